package log

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftlog/raftlog/log/testkit"
	"github.com/raftlog/raftlog/log/vfs"
	"github.com/raftlog/raftlog/log/vfs/errorfs"
)

// wbFS is vfs.OS whose write-behinds of .log files are recorded, each
// held until hold is closed (when hold is set) and failed with fail
// (when set).
type wbFS struct {
	vfs.FS
	rec *errorfs.Recorder
}

func newWBFS(hold chan struct{}, fail error) *wbFS {
	writeback := errorfs.On(".log", errorfs.OpWriteback)
	w := &wbFS{rec: &errorfs.Recorder{Match: writeback}}
	w.FS = errorfs.Wrap(vfs.OS, errorfs.Chain(
		errorfs.InjectorFunc(func(op errorfs.Op) error {
			if hold != nil && writeback(op) {
				<-hold
			}
			return nil
		}),
		w.rec,
		errorfs.InjectorFunc(func(op errorfs.Op) error {
			if writeback(op) {
				return fail
			}
			return nil
		})))
	return w
}

// ranges are the write-behinds started on the named file, in order, as
// [offset, length].
func (w *wbFS) ranges(name string) [][2]int64 {
	var rs [][2]int64
	for _, op := range w.rec.Ops() {
		if filepath.Base(op.Path) == name {
			rs = append(rs, [2]int64{op.Off, op.Len})
		}
	}
	return rs
}

// checkRanges checks that the write-behinds of one file are page-aligned,
// at least min bytes each, and back to back from `from`; it returns where
// they end.
func checkRanges(t *testing.T, rs [][2]int64, from, min int64) int64 {
	t.Helper()
	at := from
	for i, r := range rs {
		if r[0] != at || r[0]%writeBehindPage != 0 || (r[0]+r[1])%writeBehindPage != 0 || r[1] < min {
			t.Fatalf("write-behind %d of %v: [%d, +%d) does not follow %d in pages of at least %d bytes", i, rs, r[0], r[1], at, min)
		}
		at = r[0] + r[1]
	}
	return at
}

func TestWriteBehindFollowsAppends(t *testing.T) {
	if _, ok := any(osFileOf(t)).(vfs.Writebacker); !ok {
		t.Fatal("files of vfs.OS do not start writebacks")
	}
	dir := t.TempDir()
	fs := newWBFS(nil, nil)
	cfg := Config{WriteBehindBytes: 64 << 10}
	l := openTest(t, dir, cfg, WithFS(fs), WithIndexDir(dir))
	for l.Size() < 1<<20 {
		mustAppend(t, l, mkBatch(3, 3000, 1))
	}
	// Appends made while a write-behind ran started none; one made once
	// none runs starts the last if WriteBehindBytes have gathered.
	waitWriteBehinds(t, l)
	mustAppend(t, l, mkBatch(1, 10, 1))
	size := l.Size()
	if err := l.Close(); err != nil { // waits for the write-behinds
		t.Fatal(err)
	}
	rs := fs.ranges(segmentName(0, ".log"))
	end := checkRanges(t, rs, 0, cfg.WriteBehindBytes)
	if end > size || size-end >= cfg.WriteBehindBytes+writeBehindPage {
		t.Fatalf("write-behinds end at %d of %d bytes (each at least %d): %v", end, size, cfg.WriteBehindBytes, rs)
	}

	// After a reopen they start where the appends do, and after a
	// truncation from the new end.
	for _, reopen := range []bool{true, false} {
		if reopen {
			l = openTest(t, dir, cfg, WithFS(fs), WithIndexDir(dir))
		} else if _, err := l.TruncateTo(l.EndOffset() / 2); err != nil {
			t.Fatal(err)
		}
		from := l.Size()
		fs.rec.Reset()
		for l.Size() < from+256<<10 {
			mustAppend(t, l, mkBatch(3, 3000, 1))
		}
		if !reopen {
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		} else {
			waitWriteBehinds(t, l)
		}
		rs = fs.ranges(segmentName(0, ".log"))
		if len(rs) == 0 {
			t.Fatalf("reopen %v: no write-behind from %d", reopen, from)
		}
		checkRanges(t, rs, from&^(writeBehindPage-1), cfg.WriteBehindBytes)
	}
}

// waitWriteBehinds waits until no write-behind of l's active segment runs.
func waitWriteBehinds(t *testing.T, l *Log) {
	t.Helper()
	testkit.WaitFor(t, "the write-behinds to end", 10*time.Second, func() bool {
		l.mu.RLock()
		defer l.mu.RUnlock()
		return !l.segs[len(l.segs)-1].writingBack.Load()
	})
}

// osFileOf is a file of vfs.OS.
func osFileOf(t *testing.T) vfs.File {
	f, err := vfs.OS.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestWriteBehindOneAtATime(t *testing.T) {
	dir := t.TempDir()
	hold := make(chan struct{})
	fs := newWBFS(hold, nil)
	cfg := Config{WriteBehindBytes: 16 << 10}
	l := openTest(t, dir, cfg, WithFS(fs), WithIndexDir(dir))
	// While the first write-behind is held, appends go on and start none.
	for l.Size() < 512<<10 {
		mustAppend(t, l, mkBatch(2, 3000, 1))
	}
	close(hold)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rs := fs.ranges(segmentName(0, ".log"))
	if len(rs) != 1 {
		t.Fatalf("%d write-behinds started while the first was held (%v), want 1", len(rs), rs)
	}
	checkRanges(t, rs, 0, cfg.WriteBehindBytes)
}

// TestWriteBehindFailureTurnsItOff: a write-behind that fails (a file
// system without sync_file_range) is the log's last.
func TestWriteBehindFailureTurnsItOff(t *testing.T) {
	dir := t.TempDir()
	fs := newWBFS(nil, errors.New("sync_file_range: operation not supported"))
	l := openTest(t, dir, Config{WriteBehindBytes: 16 << 10}, WithFS(fs), WithIndexDir(dir))
	for l.Size() < 256<<10 {
		mustAppend(t, l, mkBatch(2, 3000, 1))
		waitWriteBehinds(t, l)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if rs := fs.ranges(segmentName(0, ".log")); len(rs) != 1 {
		t.Fatalf("write-behinds after the first failed: %v", rs)
	}
}

func TestWriteBehindOff(t *testing.T) {
	dir := t.TempDir()
	fs := newWBFS(nil, nil)
	l := openTest(t, dir, Config{WriteBehindBytes: -1}, WithFS(fs), WithIndexDir(dir))
	for l.Size() < 256<<10 {
		mustAppend(t, l, mkBatch(3, 3000, 1))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if rs := fs.ranges(segmentName(0, ".log")); len(rs) != 0 {
		t.Fatalf("write-behinds with WriteBehindBytes -1: %v", rs)
	}
}

func TestStartWritebackOnClosedFile(t *testing.T) {
	f := osFileOf(t)
	if _, err := f.WriteAt(make([]byte, 3*writeBehindPage), 0); err != nil {
		t.Fatal(err)
	}
	wb := f.(vfs.Writebacker)
	if err := wb.StartWriteback(0, 2*writeBehindPage); err != nil {
		t.Fatalf("start writeback: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := wb.StartWriteback(0, writeBehindPage); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("start writeback on a closed file: %v, want os.ErrClosed", err)
	}
	mf, err := vfs.NewMem().Create("/f")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := mf.(vfs.Writebacker); ok {
		t.Fatal("a MemFS file claims a page cache to write back")
	}
}
