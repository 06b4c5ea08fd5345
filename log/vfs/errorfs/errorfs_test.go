package errorfs

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftlog/raftlog/log/vfs"
)

func TestGateHoldsThenFails(t *testing.T) {
	mem := vfs.NewMem()
	errIO := errors.New("input/output error")
	g := NewGate(On(".log", OpSync), errIO)
	fs := Wrap(mem, g)
	f, err := fs.Create("/a.log")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.Sync() }()
	select {
	case <-g.Entered():
	case <-time.After(10 * time.Second):
		t.Fatal("the sync was not held")
	}
	select {
	case err := <-done:
		t.Fatalf("held sync returned %v before its release", err)
	default:
	}
	g.Release()
	g.Release() // a second release does nothing
	if err := <-done; !errors.Is(err, errIO) {
		t.Fatalf("released sync: %v, want the gate's error", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("a sync after the gate fired: %v", err)
	}
	other, err := fs.Create("/a.index")
	if err != nil {
		t.Fatal(err)
	}
	g.Arm()
	if err := other.Sync(); err != nil { // not matched: passes while armed
		t.Fatal(err)
	}
	g.Disarm()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func TestCounterRecorderChain(t *testing.T) {
	c := &Counter{Match: On("", OpWrite)}
	r := &Recorder{Match: On(".log", OpWrite, OpTruncate)}
	fs := Wrap(vfs.NewMem(), Chain(c, r))
	f, _ := fs.Create("/x.log")
	g, _ := fs.Create("/y.idx")
	f.WriteAt([]byte("abc"), 0)
	g.WriteAt([]byte("de"), 7)
	f.Truncate(2)
	if c.Count() != 2 {
		t.Fatalf("counted %d writes, want 2", c.Count())
	}
	ops := r.Ops()
	if len(ops) != 2 || ops[0].Kind != OpWrite || ops[0].Off != 0 || ops[0].Len != 3 || ops[1].Kind != OpTruncate || ops[1].Off != 2 {
		t.Fatalf("recorded %+v", ops)
	}
	r.Reset()
	if len(r.Ops()) != 0 {
		t.Fatal("Reset kept operations")
	}
}

func TestDiskFull(t *testing.T) {
	mem := vfs.NewMem()
	d := &DiskFull{Sparse: func(p string) bool { return filepath.Ext(p) == ".log" }}
	fs := Wrap(mem, d)
	state, _ := fs.Create("/raft.stable")
	seg, _ := fs.Create("/0.log")
	if _, err := state.WriteAt(make([]byte, 100), 0); err != nil {
		t.Fatal(err)
	}
	d.Set(true)
	if _, err := fs.Create("/new"); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("create on a full disk: %v", err)
	}
	if _, err := state.WriteAt([]byte("x"), 50); err != nil {
		t.Fatalf("overwrite on a full disk: %v", err)
	}
	if _, err := state.WriteAt([]byte("xy"), 99); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("write past the end on a full disk: %v", err)
	}
	if _, err := seg.WriteAt([]byte("x"), 0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("write into a sparse file on a full disk: %v", err)
	}
	d.Set(false)
	if _, err := seg.WriteAt([]byte("x"), 0); err != nil {
		t.Fatal(err)
	}
}

// A wrapped file is a vfs.Writebacker exactly when the file it wraps is.
func TestWritebackerPassthrough(t *testing.T) {
	mf, _ := Wrap(vfs.NewMem(), Chain()).Create("/m")
	if _, ok := mf.(vfs.Writebacker); ok {
		t.Fatal("a wrapped MemFS file claims writeback")
	}
	rec := &Recorder{Match: On("", OpWriteback)}
	of, err := Wrap(vfs.OS, rec).Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer of.Close()
	wb, ok := of.(vfs.Writebacker)
	if !ok {
		t.Fatal("a wrapped OS file lost writeback")
	}
	of.WriteAt(make([]byte, 8192), 0)
	if err := wb.StartWriteback(0, 4096); err != nil {
		t.Fatal(err)
	}
	if ops := rec.Ops(); len(ops) != 1 || ops[0].Len != 4096 {
		t.Fatalf("recorded %+v", ops)
	}
}
