package log

import (
	"testing"

	"github.com/raftlog/raftlog/log/vfs"
)

func TestRegressionRebuildIndexFullClean(t *testing.T) {
	fs := vfs.NewMem()
	idx := t.TempDir()
	cfg := Config{SegmentBytes: 1 << 20, IndexIntervalBytes: 2000, SegmentIndexBytes: 480}
	l := openTest(t, "/p/t-0", cfg, WithFS(fs), WithIndexDir(idx))
	for i := 0; i < 200; i++ {
		mustAppend(t, l, mkBatch(2, 100, int64(i)))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.IndexIntervalBytes = 100
	l2, err := Open("/p/t-0", WithFS(fs), WithIndexDir(idx), WithConfig(cfg))
	if err != nil {
		t.Fatalf("clean reopen with smaller index.interval.bytes: %v", err)
	}
	l2.Close()
}

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
	info, err := l.Append(mkBatch(1, 1, 1), 1)
	t.Logf("append -> %+v %v", info, err)
	_, err = l.Read(info.BaseOffset, 1000, l.EndOffset())
	if l.StartOffset() > l.EndOffset() || err != nil {
		t.Fatalf("start %d > end %d; read of just-appended offset %d: %v", l.StartOffset(), l.EndOffset(), info.BaseOffset, err)
	}
}

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
