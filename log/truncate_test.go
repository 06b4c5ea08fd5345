package log

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/raftlog/raftlog/log/vfs"
	"github.com/raftlog/raftlog/log/vfs/errorfs"
)

func TestRegressionTruncateBelowStart(t *testing.T) {
	_, _, l := memLog(t, Config{})
	defer l.Close()
	for i := 0; i < 10; i++ {
		mustAppend(t, l, mkBatch(10, 10, int64(i)))
	}
	if err := l.AdvanceStart(50); err != nil {
		t.Fatal(err)
	}
	end, err := l.TruncateTo(30)
	t.Logf("TruncateTo(30) -> end %d err %v; start %d end %d", end, err, l.StartOffset(), l.EndOffset())
	info, err := appendRaw(l, mkBatch(1, 1, 1), 1)
	t.Logf("append -> %+v %v", info, err)
	_, err = l.Read(info.BaseOffset, 1000, l.EndOffset())
	if l.StartOffset() > l.EndOffset() || err != nil {
		t.Fatalf("start %d > end %d; read of just-appended offset %d: %v", l.StartOffset(), l.EndOffset(), info.BaseOffset, err)
	}
}

// Reset publishes l.segs = nil while it deletes/creates files; a
// concurrent reader indexes l.segs[len-1] and panics.
func TestRegressionResetRacePanics(t *testing.T) {
	_, _, l := memLog(t, Config{})
	defer l.Close()
	mustAppend(t, l, mkBatch(3, 10, 1))
	var stop atomic.Bool
	var panicked atomic.Value
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			if r := recover(); r != nil {
				panicked.Store(fmt.Sprint(r))
			}
		}()
		for !stop.Load() {
			_ = l.EndOffset()
			_, _ = l.Read(l.StartOffset(), 100, 1<<40)
		}
	}()
	for i := 0; i < 200 && panicked.Load() == nil; i++ {
		if err := l.Reset(int64(100 + i)); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if p := panicked.Load(); p != nil {
		t.Fatalf("reader panicked during Reset: %v", p)
	}
}

// Read/ReadBatch race with TruncateTo + Append: the reader holds a
// position and limit from before the cut and reads the rewritten bytes.
func TestRegressionReadRacesTruncate(t *testing.T) {
	for _, mode := range []string{"Read", "ReadBatch"} {
		t.Run(mode, func(t *testing.T) {
			// gateLen is the size of the read the gate holds.
			var gateLen int64
			g := &errorfs.Gate{Match: func(op errorfs.Op) bool { return op.Kind == errorfs.OpRead && op.Len == gateLen }}
			l := openTest(t, "/p/t-0", Config{}, WithFS(errorfs.Wrap(vfs.NewMem(), g)), WithIndexDir(t.TempDir()))
			defer l.Close()
			a, b, c := mkBatch(10, 50, 1), mkBatch(10, 50, 2), mkBatch(10, 50, 3)
			mustAppend(t, l, a)
			mustAppend(t, l, b)
			mustAppend(t, l, c)
			var payload []byte
			if mode == "Read" {
				// a complete, CRC-valid batch claiming offsets 20..29
				evil := make([]Record, 10)
				for i := range evil {
					evil[i] = Record{Value: bytes.Repeat([]byte("EVIL"), 12), Timestamp: 9}
				}
				payload = BuildBatch(nil, BatchOptions{BaseOffset: 20, ProducerID: -1, BaseSequence: -1}, evil)
				gateLen = LogOverhead
			} else {
				payload = make([]byte, 12)
				binary.BigEndian.PutUint64(payload, 20)
				binary.BigEndian.PutUint32(payload[8:], 0x80000000)
				gateLen = BatchHeaderSize
			}
			g.Arm()
			defer g.Release()
			type res struct {
				p   []byte
				err error
				pan any
			}
			out := make(chan res, 1)
			go func() {
				defer func() {
					if r := recover(); r != nil {
						out <- res{pan: r}
					}
				}()
				if mode == "Read" {
					p, err := l.Read(20, 1<<20, 30)
					out <- res{p: p, err: err}
				} else {
					p, err := l.ReadBatch(20)
					out <- res{p: p, err: err}
				}
			}()
			<-g.Entered()
			// The truncation waits for the reader that already located
			// its batch; the append of other bytes comes after.
			cut := make(chan error, 1)
			go func() {
				_, err := l.TruncateTo(10)
				if err == nil {
					_, err = appendRaw(l, buildD(len(b), payload), 1)
				}
				cut <- err
			}()
			g.Release()
			r := <-out
			if err := <-cut; err != nil {
				t.Fatal(err)
			}
			if r.pan != nil {
				t.Fatalf("%s panicked: %v (log end is %d)", mode, r.pan, l.EndOffset())
			}
			if r.err == nil && len(r.p) > 0 {
				bb := Batch(r.p)
				if bb.BaseOffset() != 20 || !bytes.Equal(r.p[:len(c)], c) || bytes.Contains(r.p, []byte("EVIL")) {
					t.Fatalf("%s(20) returned %d bytes: batch base %d last %d, contains EVIL=%v; log end is %d",
						mode, len(r.p), bb.BaseOffset(), bb.LastOffset(), bytes.Contains(r.p, []byte("EVIL")), l.EndOffset())
				}
			}
			t.Logf("err=%v", r.err)
		})
	}
}
