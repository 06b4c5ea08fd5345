package log

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlog/raftlog/log/vfs"
	"github.com/raftlog/raftlog/log/vfs/errorfs"
)

// TestRollSyncsInBackground: the append that rolls a segment fsyncs
// neither the sealed one nor the directory; the background task does,
// the directory first, and only then moves the recovery point to the new
// segment. A flush before the task has run syncs both itself.
func TestRollSyncsInBackground(t *testing.T) {
	fs := vfs.NewMem()
	var mu sync.Mutex
	var syncs, dirSyncs []string // .log fsyncs; directory fsyncs, with the .log fsyncs before each
	fs.SetHook(func(_ int, kind, name string) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case kind == vfs.OpSync && strings.HasSuffix(name, ".log"):
			syncs = append(syncs, name)
		case kind == vfs.OpSyncDir && name == "/d":
			dirSyncs = append(dirSyncs, strings.Join(syncs, ","))
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
	syncs, dirSyncs = nil, nil // the open's own
	mu.Unlock()
	for len(l.Segments()) < 2 {
		if _, err := appendRaw(l, mkBatch(2, 100, 1), 1); err != nil {
			t.Fatal(err)
		}
	}
	if len(syncs) != 0 || len(dirSyncs) != 0 {
		t.Fatalf("appends fsynced %v and the directory %d times", syncs, len(dirSyncs))
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
	if len(dirSyncs) == 0 || dirSyncs[0] != "" {
		t.Fatalf("background task fsynced the directory after %q (want before the segment)", dirSyncs)
	}
	if ck, _ := readCheckpoint(fs, "/d"); ck.recoveryPoint != newBase {
		t.Fatalf("recovery point %d after the background fsync, want %d", ck.recoveryPoint, newBase)
	}

	// Roll again; flush before the task runs: the flush syncs both.
	for len(l.Segments()) < 3 {
		if _, err := appendRaw(l, mkBatch(2, 100, 1), 1); err != nil {
			t.Fatal(err)
		}
	}
	syncs, dirSyncs = nil, nil
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	segs := l.Segments()
	if len(syncs) != 2 || syncs[0] != segs[1].LogPath || syncs[1] != segs[2].LogPath {
		t.Fatalf("flush fsynced %v", syncs)
	}
	if len(dirSyncs) == 0 || dirSyncs[0] != "" {
		t.Fatalf("flush fsynced the directory after %q (want before the segments)", dirSyncs)
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
			if _, err := appendRaw(l, mkBatch(1, 200, 1), 1); err != nil {
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

// TestBackgroundSyncFailureIsKept: the background fsync of a sealed
// segment fails. The failure stops the log and stays with the segment: a
// later fsync through the same file (which Linux may let succeed over the
// lost pages) does not make a flush or a close succeed, and no
// clean-shutdown marker is written.
func TestBackgroundSyncFailureIsKept(t *testing.T) {
	fs := vfs.NewMem()
	errIO := errors.New("input/output error")
	var failed atomic.Bool
	var queued []func()
	l, err := Open("/d", WithFS(fs), WithIndexDir(t.TempDir()), WithConfig(Config{SegmentBytes: 1000}),
		func(o *options) { o.background = func(fn func()) { queued = append(queued, fn) } })
	if err != nil {
		t.Fatal(err)
	}
	fs.SetHook(func(_ int, kind, name string) error {
		if kind == vfs.OpSync && strings.HasSuffix(name, "00000000000000000000.log") && !failed.Swap(true) {
			return errIO // the first fsync of the first segment only
		}
		return nil
	})
	for len(l.Segments()) < 2 {
		if _, err := appendRaw(l, mkBatch(2, 100, 1), 1); err != nil {
			t.Fatal(err)
		}
	}
	queued[0]()
	if !failed.Load() || !errors.Is(l.Err(), errIO) {
		t.Fatalf("background fsync failure not kept: failed %v, log error %v", failed.Load(), l.Err())
	}
	if err := l.Flush(); !errors.Is(err, errIO) {
		t.Fatalf("flush after a failed background fsync: %v", err)
	}
	if err := l.Close(); err == nil {
		t.Fatal("close after a failed background fsync succeeded")
	}
	if ok, _ := fs.Exists("/d/" + cleanShutdownName); ok {
		t.Fatal("clean-shutdown marker written after a failed fsync")
	}
}

// TestCloseDuringAFailingBackgroundSync: Close starts while the background
// fsync of a sealed segment is failing. Its own fsync of that segment
// (which the file system lets succeed, as Linux may for a second fsync of
// the same file) must not hide the failure: Close fails and writes no
// clean-shutdown marker.
func TestCloseDuringAFailingBackgroundSync(t *testing.T) {
	fs := vfs.NewMem()
	errIO := errors.New("input/output error")
	var queued []func()
	l, err := Open("/d", WithFS(fs), WithIndexDir(t.TempDir()), WithConfig(Config{SegmentBytes: 1000}),
		func(o *options) { o.background = func(fn func()) { queued = append(queued, fn) } })
	if err != nil {
		t.Fatal(err)
	}
	for len(l.Segments()) < 2 {
		if _, err := appendRaw(l, mkBatch(2, 100, 1), 1); err != nil {
			t.Fatal(err)
		}
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	fs.SetHook(func(_ int, kind, name string) error {
		if kind == vfs.OpSync && strings.HasSuffix(name, "00000000000000000000.log") && !first.Swap(true) {
			close(entered)
			<-release
			return errIO
		}
		return nil
	})
	taskDone := make(chan struct{})
	go func() { defer close(taskDone); queued[0]() }()
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	// Let the failing fsync return once Close holds the writer lock.
	deadline := time.Now().Add(10 * time.Second)
	for l.wmu.TryLock() {
		l.wmu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("Close never took the writer lock")
		}
		runtime.Gosched()
	}
	close(release)
	if err := <-closed; !errors.Is(err, errIO) {
		t.Fatalf("Close during a failing background fsync: %v", err)
	}
	<-taskDone
	if ok, _ := fs.Exists("/d/" + cleanShutdownName); ok {
		t.Fatal("clean-shutdown marker written over a failed fsync")
	}
}

// TestRollCheckpointOutsideWriteLock: the checkpoint a sealed segment's
// background task writes (an atomic replace, two fsyncs) does not hold
// the write lock, so appends go on while it runs; and a truncation that
// comes meanwhile, lowering the recovery point, is not overtaken by it:
// the file ends holding the truncation's checkpoint.
func TestRollCheckpointOutsideWriteLock(t *testing.T) {
	mem := vfs.NewMem()
	hold := &errorfs.Gate{Match: errorfs.On(checkpointName+".tmp", errorfs.OpSync)}
	fs := errorfs.Wrap(mem, hold)
	var queued []func()
	l, err := Open("/d", WithFS(fs), WithIndexDir(t.TempDir()), WithConfig(Config{SegmentBytes: 1000}),
		func(o *options) { o.background = func(fn func()) { queued = append(queued, fn) } })
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for len(l.Segments()) < 2 {
		if _, err := appendRaw(l, mkBatch(2, 100, 1), 1); err != nil {
			t.Fatal(err)
		}
	}
	newBase := l.Segments()[1].BaseOffset
	hold.Arm()
	defer hold.Release()
	task := make(chan error, 1)
	go func() { queued[0](); task <- nil }()
	select {
	case <-hold.Entered():
	case <-time.After(30 * time.Second):
		t.Fatal("the background task wrote no checkpoint")
	}
	mustAppendMeanwhile(t, l, mkBatch(2, 100, 2), "an append during the background checkpoint write")
	// Truncate into the sealed segment: the recovery point (newBase once
	// the task's checkpoint lands) goes down to the cut.
	cut := newBase - 1
	truncated := make(chan error, 1)
	go func() {
		_, err := l.TruncateTo(cut)
		truncated <- err
	}()
	// Release the write once the truncation holds the write lock (it
	// waits for the write to end) or has returned.
	deadline := time.Now().Add(30 * time.Second)
	early := false
	for !early && l.wmu.TryLock() {
		l.wmu.Unlock()
		select {
		case err := <-truncated:
			truncated <- err
			early = true
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the truncation never took the write lock")
		}
		runtime.Gosched()
	}
	hold.Release()
	if err := waitErr(t, task, "the background task"); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, truncated, "TruncateTo"); err != nil {
		t.Fatal(err)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("log stopped: %v", err)
	}
	l.wmu.Lock()
	rp := l.recoveryPoint
	l.wmu.Unlock()
	ck, err := readCheckpoint(mem, "/d")
	if err != nil {
		t.Fatal(err)
	}
	if rp >= newBase || ck.recoveryPoint != rp {
		t.Fatalf("after the truncation to %d: recovery point %d, checkpoint %d; want both below %d and equal", cut, rp, ck.recoveryPoint, newBase)
	}
}
