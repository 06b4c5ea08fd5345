package log

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/raftlog/raftlog/log/vfs"
)

// TestRollSyncsInBackground: the append that rolls a segment does not
// fsync the sealed one; the background task does, and only then moves
// the recovery point to the new segment. A flush before the task has run
// syncs the sealed segment itself.
func TestRollSyncsInBackground(t *testing.T) {
	fs := vfs.NewMem()
	var mu sync.Mutex
	var syncs []string
	fs.SetHook(func(_ int, kind, name string) error {
		if kind == vfs.OpSync && strings.HasSuffix(name, ".log") {
			mu.Lock()
			syncs = append(syncs, name)
			mu.Unlock()
		}
		return nil
	})
	var queued []func()
	cfg := Config{SegmentBytes: 1000}
	l, err := Open("/d", WithFS(fs), WithIndexDir(t.TempDir()), WithConfig(cfg),
		func(o *options) { o.background = func(fn func()) { queued = append(queued, fn) } })
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	run := func(i int) {
		for ; ran <= i && ran < len(queued); ran++ {
			queued[ran]()
		}
	}
	defer func() {
		run(len(queued))
		l.Close()
	}()
	mu.Lock()
	syncs = nil // the open's own
	mu.Unlock()
	for len(l.Segments()) < 2 {
		if _, err := l.Append(mkBatch(2, 100, 1), 1); err != nil {
			t.Fatal(err)
		}
	}
	if len(syncs) != 0 {
		t.Fatalf("appends fsynced %v", syncs)
	}
	if len(queued) != 1 {
		t.Fatalf("%d background tasks after one roll", len(queued))
	}
	sealed := l.Segments()[0]
	newBase := l.Segments()[1].BaseOffset
	ck, err := readCheckpoint(fs, "/d")
	if errors.Is(err, errNoCheckpoint) {
		err = nil // a new log's recovery point 0 is not written
	}
	if err != nil || ck.recoveryPoint != 0 {
		t.Fatalf("checkpoint %+v %v before the background fsync", ck, err)
	}
	run(0)
	if len(syncs) != 1 || syncs[0] != sealed.LogPath {
		t.Fatalf("background task fsynced %v, want %s", syncs, sealed.LogPath)
	}
	if ck, _ := readCheckpoint(fs, "/d"); ck.recoveryPoint != newBase {
		t.Fatalf("recovery point %d after the background fsync, want %d", ck.recoveryPoint, newBase)
	}

	// Roll again; flush before the task runs: the flush syncs both.
	for len(l.Segments()) < 3 {
		if _, err := l.Append(mkBatch(2, 100, 1), 1); err != nil {
			t.Fatal(err)
		}
	}
	syncs = nil
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	segs := l.Segments()
	if len(syncs) != 2 || syncs[0] != segs[1].LogPath || syncs[1] != segs[2].LogPath {
		t.Fatalf("flush fsynced %v", syncs)
	}
	if ck, _ := readCheckpoint(fs, "/d"); ck.recoveryPoint != l.EndOffset() {
		t.Fatalf("recovery point %d after flush, want %d", ck.recoveryPoint, l.EndOffset())
	}
	// The task, late, finds nothing left to do.
	syncs = nil
	run(1)
	if ck, _ := readCheckpoint(fs, "/d"); ck.recoveryPoint != l.EndOffset() {
		t.Fatalf("recovery point %d after the late task", ck.recoveryPoint)
	}
}

// TestRollSyncRacesCloseAndTruncation: background fsyncs on real
// goroutines, with rolls, truncations into sealed segments, deletions from
// the front and a close while they run (for the race detector).
func TestRollSyncRacesCloseAndTruncation(t *testing.T) {
	dir := t.TempDir()
	for round := 0; round < 5; round++ {
		l, err := Open(dir, WithConfig(Config{SegmentBytes: 600}))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 60; i++ {
			if _, err := l.Append(mkBatch(1, 200, 1), 1); err != nil {
				t.Fatal(err)
			}
			switch i % 20 {
			case 10:
				if _, err := l.TruncateTo(l.EndOffset() - 5); err != nil {
					t.Fatal(err)
				}
			case 15:
				if err := l.AdvanceStart(l.EndOffset() - 8); err != nil {
					t.Fatal(err)
				}
			}
		}
		want := l.EndOffset()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l2, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !l2.Recovery().Clean || l2.EndOffset() != want {
			t.Fatalf("round %d: reopen %+v, end %d want %d", round, l2.Recovery(), l2.EndOffset(), want)
		}
		if err := l2.Verify(); err != nil {
			t.Fatal(err)
		}
		if err := l2.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
