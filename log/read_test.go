package log

import (
	"sync/atomic"
	"testing"
)

func TestRegressionOffsetForTimestampStopsAtFirstSegment(t *testing.T) {
	_, _, l := memLog(t, Config{SegmentBytes: 200})
	defer l.Close()
	// segment 0: a control batch (as Raft's own entries) with ts 1000
	ctl := BuildBatch(nil, BatchOptions{Attributes: AttrControl, ProducerID: -1, BaseSequence: -1}, []Record{{Value: make([]byte, 100), Timestamp: 1000}})
	mustAppend(t, l, ctl)
	// segment 1: a data batch with ts 2000
	mustAppend(t, l, mkBatch(1, 100, 2000))
	t.Logf("segments: %+v", l.Segments())
	off, ts, found, err := l.OffsetForTimestamp(500, l.EndOffset())
	if !found {
		t.Fatalf("OffsetForTimestamp(500) = %d %d %v %v; want offset 1 (ts 2000)", off, ts, found, err)
	}
}

func TestRegressionOffsetForTimestampBelowStart(t *testing.T) {
	_, _, l := memLog(t, Config{})
	defer l.Close()
	for i := 0; i < 10; i++ {
		mustAppend(t, l, mkBatch(10, 10, int64(100*i)))
	}
	if err := l.AdvanceStart(50); err != nil {
		t.Fatal(err)
	}
	off, _, found, _ := l.OffsetForTimestamp(0, l.EndOffset())
	if found && off < l.StartOffset() {
		_, err := l.Read(off, 100, l.EndOffset())
		t.Fatalf("OffsetForTimestamp(0) = %d below log start %d; Read(%d): %v", off, l.StartOffset(), off, err)
	}
}

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
		if _, err := appendRaw(l, b, 1); err != nil {
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
