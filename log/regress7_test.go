package log

import (
	"sync/atomic"
	"testing"
)

func TestRegressionNextBeforeSizeSkew(t *testing.T) {
	_, _, l := memLog(t, Config{SegmentBytes: 1 << 30})
	defer l.Close()
	b := mkBatch(1, 1, 1)
	var stop atomic.Bool
	errc := make(chan error, 1)
	go func() {
		prev := int64(0)
		for !stop.Load() {
			e := l.EndOffset()
			if e > 0 && e != prev {
				prev = e
				if _, err := l.ReadBatch(e - 1); err != nil {
					errc <- err
					return
				}

			}
		}
		errc <- nil
	}()
	for i := 0; i < 300000; i++ {
		if _, err := l.Append(b, 1); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 0 && len(errc) > 0 {
			break
		}
	}
	stop.Store(true)
	if err := <-errc; err != nil {
		t.Fatalf("ReadBatch of an offset below EndOffset: %v", err)
	}
}
