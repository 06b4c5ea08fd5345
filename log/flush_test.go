package log

import (
	"errors"
	"testing"
	"time"

	"github.com/raftlog/raftlog/log/vfs"
	"github.com/raftlog/raftlog/log/vfs/errorfs"
)

// syncGate holds the first fsync of a .log file once armed, then fails
// it with fail; syncs counts the fsyncs of .log files.
func syncGate(fail error) (vfs.FS, *errorfs.Gate, *errorfs.Counter) {
	gate := &errorfs.Gate{Match: errorfs.On(".log", errorfs.OpSync), Err: fail}
	syncs := &errorfs.Counter{Match: errorfs.On(".log", errorfs.OpSync)}
	return errorfs.Wrap(vfs.OS, errorfs.Chain(syncs, gate)), gate, syncs
}

// waitErr waits for a result on ch, failing the test after a deadline.
func waitErr(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s never returned", what)
		return nil
	}
}

// mustAppendMeanwhile appends batch on another goroutine and fails the
// test unless the append returns, without error, while the caller holds
// something (an fsync) open.
func mustAppendMeanwhile(t *testing.T, l *Log, batch []byte, what string) {
	t.Helper()
	appended := make(chan error, 1)
	go func() {
		_, err := appendRaw(l, batch, 1)
		appended <- err
	}()
	if err := waitErr(t, appended, what); err != nil {
		t.Fatal(err)
	}
}

// blockedFlush opens a log on a file system whose fsyncs wait at a gate
// and then fail with fail, appends batches of the given record counts,
// and starts a Flush, returning once the flush waits in its fsync.
// gate.Release lets it go on; its result comes on flushed.
func blockedFlush(t *testing.T, fail error, counts ...int) (l *Log, gate *errorfs.Gate, flushed chan error) {
	t.Helper()
	fs, gate, _ := syncGate(fail)
	dir := t.TempDir()
	l, err := Open(dir, WithFS(fs), WithIndexDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	for i, n := range counts {
		if _, err := appendRaw(l, mkBatch(n, 50, int64(i)), 1); err != nil {
			t.Fatal(err)
		}
	}
	gate.Arm()
	// A test that fails while the fsync is held must not hang its Close.
	t.Cleanup(gate.Release)
	flushed = make(chan error, 1)
	go func() { flushed <- l.Flush() }()
	<-gate.Entered()
	return l, gate, flushed
}

// TestFlushDoesNotStopAppends: while a flush waits for its fsync, appends
// go on; the flush covers what was there when it began, so the recovery
// point stops there and the later appends stay dirty.
func TestFlushDoesNotStopAppends(t *testing.T) {
	l, gate, flushed := blockedFlush(t, nil, 3)
	mustAppendMeanwhile(t, l, mkBatch(2, 50, 2), "an append during a flush's fsync")
	gate.Release()
	if err := waitErr(t, flushed, "Flush"); err != nil {
		t.Fatal(err)
	}
	l.wmu.Lock()
	rp, dirty := l.recoveryPoint, l.segs[0].dirty()
	l.wmu.Unlock()
	if rp != 3 || !dirty {
		t.Fatalf("after the flush: recovery point %d, dirty %v; want 3 (the end when it began), dirty (the append during it)", rp, dirty)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	l.wmu.Lock()
	rp, dirty = l.recoveryPoint, l.segs[0].dirty()
	l.wmu.Unlock()
	if rp != 5 || dirty {
		t.Fatalf("after a second flush: recovery point %d, dirty %v; want 5, clean", rp, dirty)
	}
}

// TestFlushDuringTruncation: a truncation that comes while a flush waits
// for its fsync, and appends after it, must not leave the recovery point
// past the cut: the offsets there hold new, unsynced data.
func TestFlushDuringTruncation(t *testing.T) {
	l, gate, flushed := blockedFlush(t, nil, 2, 2, 2, 2)
	truncated := make(chan error, 1)
	go func() {
		if _, err := l.TruncateTo(4); err != nil {
			truncated <- err
			return
		}
		// New data at the offsets the flush saw: 4..7.
		_, err := appendRaw(l, mkBatch(4, 50, 9), 2)
		truncated <- err
	}()
	// The truncation waits for the flush's hold on the segment.
	gate.Release()
	if err := waitErr(t, flushed, "Flush"); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, truncated, "TruncateTo and Append"); err != nil {
		t.Fatal(err)
	}
	l.wmu.Lock()
	rp, dirty := l.recoveryPoint, l.segs[0].dirty()
	l.wmu.Unlock()
	if rp > 4 || !dirty {
		t.Fatalf("recovery point %d, dirty %v after a flush raced a truncation to 4 and new appends: want at most 4, dirty", rp, dirty)
	}
}

// TestFlushFailureStopsTheLog: a failed fsync of a flush made outside the
// write lock still stops the log, and the error sticks.
func TestFlushFailureStopsTheLog(t *testing.T) {
	errIO := errors.New("input/output error")
	l, gate, flushed := blockedFlush(t, errIO, 3)
	gate.Release()
	if err := waitErr(t, flushed, "Flush"); !errors.Is(err, errIO) || !errors.Is(err, ErrWrite) {
		t.Fatalf("Flush over a failing fsync: %v", err)
	}
	if _, err := appendRaw(l, mkBatch(1, 50, 2), 1); !errors.Is(err, ErrWrite) {
		t.Fatalf("append after a failed flush: %v, want the write error", err)
	}
}

// TestFlushToSkipsWhatIsDurable: FlushTo below the recovery point fsyncs
// nothing; past it, it flushes.
func TestFlushToSkipsWhatIsDurable(t *testing.T) {
	fs, _, syncs := syncGate(nil)
	dir := t.TempDir()
	l, err := Open(dir, WithFS(fs), WithIndexDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := appendRaw(l, mkBatch(3, 50, 1), 1); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := appendRaw(l, mkBatch(2, 50, 2), 1); err != nil {
		t.Fatal(err)
	}
	before := syncs.Count()
	if err := l.FlushTo(3); err != nil || syncs.Count() != before {
		t.Fatalf("FlushTo(3) with the recovery point at 3: %v, %d fsyncs", err, syncs.Count()-before)
	}
	if err := l.FlushTo(5); err != nil || syncs.Count() == before {
		t.Fatalf("FlushTo(5) with the recovery point at 3: %v, %d fsyncs", err, syncs.Count()-before)
	}
	l.wmu.Lock()
	rp := l.recoveryPoint
	l.wmu.Unlock()
	if rp != 5 {
		t.Fatalf("recovery point %d after FlushTo(5), want 5", rp)
	}
}

// With flush.messages=1 every append is fsynced, and the checkpoint on
// disk says so at once (not only when a segment rolls): a reader of the
// directory, such as the chaos harness emulating a power loss, knows the
// fsynced prefix exactly. Recovery after a crash then scans nothing.
func TestCheckpointFollowsEveryFlush(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{FlushMessages: 1}
	l := openTest(t, dir, cfg)
	for i := 0; i < 5; i++ {
		info := mustAppend(t, l, mkBatch(3, 10, int64(i)))
		ck, err := readCheckpoint(vfs.OS, dir)
		if err != nil {
			t.Fatal(err)
		}
		if want := info.LastOffset + 1; ck.recoveryPoint != want {
			t.Fatalf("append %d: checkpoint recovery point %d, want %d", i, ck.recoveryPoint, want)
		}
	}
	l.Abort() // a crash: no clean-shutdown marker
	l2 := openTest(t, dir, cfg)
	defer l2.Close()
	if rep := l2.Recovery(); rep.CheckpointError != "" || rep.RecoveryPoint != l2.EndOffset() {
		t.Fatalf("recovery after the crash: %+v (end %d)", rep, l2.EndOffset())
	}
}
