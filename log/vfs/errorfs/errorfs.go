// Package errorfs wraps any vfs.FS so that tests can see and steer what
// the code under test does to its files: every operation is shown to an
// Injector before it runs, which may fail it, hold it until the test lets
// it go, or count and record it. Injectors compose (Chain), so one wrapper
// serves a test that fills the disk, one that holds an fsync while appends
// go on, and one that watches the write-behinds of the log's segments.
package errorfs

import (
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/raftlog/raftlog/log/vfs"
)

// Kind is the kind of an operation.
type Kind int

// The operations an Injector sees: those of vfs.FS and of vfs.File (and
// StartWriteback of a vfs.Writebacker).
const (
	OpCreate Kind = iota
	OpOpenRW
	OpOpen
	OpRemove
	OpRemoveAll
	OpRename
	OpMkdirAll
	OpList
	OpExists
	OpSyncDir
	OpRead
	OpWrite
	OpSync
	OpTruncate
	OpSize
	OpClose
	OpWriteback
)

var kindNames = [...]string{"create", "open-rw", "open", "remove", "remove-all", "rename", "mkdir-all",
	"list", "exists", "sync-dir", "read", "write", "sync", "truncate", "size", "close", "writeback"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Op is one operation, shown to the Injector before it runs.
type Op struct {
	Kind Kind
	// Path is the file or directory operated on (the old name of a
	// rename).
	Path string
	// Off and Len are the range of a read, write or writeback, the size
	// of a truncate.
	Off, Len int64
	// File is the wrapped file of a file operation (nil for the file
	// system's own), for an injector that needs its size.
	File vfs.File
}

// Injector decides the fate of each operation: a non-nil error fails it
// (the operation does not run). MaybeError may block, to hold the
// operation, and is called concurrently.
type Injector interface {
	MaybeError(Op) error
}

// InjectorFunc is a function as an Injector.
type InjectorFunc func(Op) error

// MaybeError calls f.
func (f InjectorFunc) MaybeError(op Op) error { return f(op) }

// Chain shows each operation to every injector in turn and fails it with
// the first error.
func Chain(injs ...Injector) Injector {
	return InjectorFunc(func(op Op) error {
		for _, inj := range injs {
			if err := inj.MaybeError(op); err != nil {
				return err
			}
		}
		return nil
	})
}

// Match selects operations.
type Match func(Op) bool

// On matches operations of the given kinds on paths ending in suffix
// ("" for any path).
func On(suffix string, kinds ...Kind) Match {
	return func(op Op) bool {
		if !strings.HasSuffix(op.Path, suffix) {
			return false
		}
		for _, k := range kinds {
			if op.Kind == k {
				return true
			}
		}
		return len(kinds) == 0
	}
}

// Wrap returns fs with every operation shown to inj first.
func Wrap(fs vfs.FS, inj Injector) vfs.FS { return &errFS{fs: fs, inj: inj} }

type errFS struct {
	fs  vfs.FS
	inj Injector
}

func (e *errFS) check(k Kind, name string) error {
	return e.inj.MaybeError(Op{Kind: k, Path: name})
}

func (e *errFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	ef := &errFile{f: f, name: name, inj: e.inj}
	if _, ok := f.(vfs.Writebacker); ok {
		return &errWritebackFile{ef}, nil
	}
	return ef, nil
}

func (e *errFS) Create(name string) (vfs.File, error) {
	if err := e.check(OpCreate, name); err != nil {
		return nil, err
	}
	f, err := e.fs.Create(name)
	return e.wrap(name, f, err)
}

func (e *errFS) OpenRW(name string) (vfs.File, error) {
	if err := e.check(OpOpenRW, name); err != nil {
		return nil, err
	}
	f, err := e.fs.OpenRW(name)
	return e.wrap(name, f, err)
}

func (e *errFS) Open(name string) (vfs.File, error) {
	if err := e.check(OpOpen, name); err != nil {
		return nil, err
	}
	f, err := e.fs.Open(name)
	return e.wrap(name, f, err)
}

func (e *errFS) Remove(name string) error {
	if err := e.check(OpRemove, name); err != nil {
		return err
	}
	return e.fs.Remove(name)
}

func (e *errFS) RemoveAll(name string) error {
	if err := e.check(OpRemoveAll, name); err != nil {
		return err
	}
	return e.fs.RemoveAll(name)
}

func (e *errFS) Rename(oldname, newname string) error {
	if err := e.check(OpRename, oldname); err != nil {
		return err
	}
	return e.fs.Rename(oldname, newname)
}

func (e *errFS) MkdirAll(dir string) error {
	if err := e.check(OpMkdirAll, dir); err != nil {
		return err
	}
	return e.fs.MkdirAll(dir)
}

func (e *errFS) List(dir string) ([]string, error) {
	if err := e.check(OpList, dir); err != nil {
		return nil, err
	}
	return e.fs.List(dir)
}

func (e *errFS) Exists(name string) (bool, error) {
	if err := e.check(OpExists, name); err != nil {
		return false, err
	}
	return e.fs.Exists(name)
}

func (e *errFS) SyncDir(dir string) error {
	if err := e.check(OpSyncDir, dir); err != nil {
		return err
	}
	return e.fs.SyncDir(dir)
}

type errFile struct {
	f    vfs.File
	name string
	inj  Injector
}

func (f *errFile) op(k Kind, off, n int64) error {
	return f.inj.MaybeError(Op{Kind: k, Path: f.name, Off: off, Len: n, File: f.f})
}

func (f *errFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.op(OpRead, off, int64(len(p))); err != nil {
		return 0, err
	}
	return f.f.ReadAt(p, off)
}

func (f *errFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.op(OpWrite, off, int64(len(p))); err != nil {
		return 0, err
	}
	return f.f.WriteAt(p, off)
}

func (f *errFile) Sync() error {
	if err := f.op(OpSync, 0, 0); err != nil {
		return err
	}
	return f.f.Sync()
}

func (f *errFile) Truncate(size int64) error {
	if err := f.op(OpTruncate, size, 0); err != nil {
		return err
	}
	return f.f.Truncate(size)
}

func (f *errFile) Size() (int64, error) {
	if err := f.op(OpSize, 0, 0); err != nil {
		return 0, err
	}
	return f.f.Size()
}

func (f *errFile) Close() error {
	if err := f.op(OpClose, 0, 0); err != nil {
		return err
	}
	return f.f.Close()
}

// errWritebackFile is an errFile over a vfs.Writebacker: the wrapper is
// one only when the file it wraps is.
type errWritebackFile struct{ *errFile }

func (f *errWritebackFile) StartWriteback(off, n int64) error {
	if err := f.op(OpWriteback, off, n); err != nil {
		return err
	}
	return f.f.(vfs.Writebacker).StartWriteback(off, n)
}

// Gate holds the first matching operation after each Arm: it says so on
// Entered and waits until Release, then fails the operation with Err
// (nil lets it run). Operations while not armed pass.
type Gate struct {
	Match Match
	Err   error

	mu               sync.Mutex
	armed, released  bool
	entered, release chan struct{}
}

// NewGate returns a gate over the operations m matches, armed.
func NewGate(m Match, err error) *Gate {
	g := &Gate{Match: m, Err: err}
	g.Arm()
	return g
}

// Arm makes the gate hold the next matching operation, with new Entered
// and Release channels.
func (g *Gate) Arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.released = true, false
	g.entered, g.release = make(chan struct{}), make(chan struct{})
}

// Disarm lets matching operations pass until the next Arm.
func (g *Gate) Disarm() {
	g.mu.Lock()
	g.armed = false
	g.mu.Unlock()
}

// Entered is closed once an operation is held.
func (g *Gate) Entered() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.entered
}

// Release lets the held operation (or the next one to arrive) go on.
// Calling it again before the next Arm does nothing.
func (g *Gate) Release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.release != nil && !g.released {
		g.released = true
		close(g.release)
	}
}

// MaybeError implements Injector.
func (g *Gate) MaybeError(op Op) error {
	if !g.Match(op) {
		return nil
	}
	g.mu.Lock()
	if !g.armed {
		g.mu.Unlock()
		return nil
	}
	g.armed = false
	entered, release := g.entered, g.release
	g.mu.Unlock()
	close(entered)
	<-release
	return g.Err
}

// Counter counts the operations it matches.
type Counter struct {
	Match Match
	n     atomic.Int64
}

// MaybeError implements Injector; it fails nothing.
func (c *Counter) MaybeError(op Op) error {
	if c.Match(op) {
		c.n.Add(1)
	}
	return nil
}

// Count is the number of matching operations so far.
func (c *Counter) Count() int64 { return c.n.Load() }

// Recorder keeps the operations it matches, in the order they came.
type Recorder struct {
	Match Match
	mu    sync.Mutex
	ops   []Op
}

// MaybeError implements Injector; it fails nothing.
func (r *Recorder) MaybeError(op Op) error {
	if r.Match(op) {
		op.File = nil
		r.mu.Lock()
		r.ops = append(r.ops, op)
		r.mu.Unlock()
	}
	return nil
}

// Reset forgets the operations recorded so far.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.ops = nil
	r.mu.Unlock()
}

// Ops returns a copy of the operations recorded so far.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// ErrNoSpace is what a full disk answers (ENOSPC).
var ErrNoSpace error = syscall.ENOSPC

// DiskFull is a disk that, while full (Set), fails with ErrNoSpace what
// needs new blocks: creating a file, writing past a file's end, and any
// write into a sparse file (Sparse says which: a preallocated segment has
// no blocks yet). Overwriting blocks a file has still works.
type DiskFull struct {
	Sparse func(path string) bool
	full   atomic.Bool
}

// Set fills the disk (true) or frees it.
func (d *DiskFull) Set(full bool) { d.full.Store(full) }

// MaybeError implements Injector.
func (d *DiskFull) MaybeError(op Op) error {
	if !d.full.Load() {
		return nil
	}
	switch op.Kind {
	case OpCreate:
		return ErrNoSpace
	case OpWrite:
		if d.Sparse != nil && d.Sparse(op.Path) {
			return ErrNoSpace
		}
		if n, err := op.File.Size(); err != nil || op.Off+op.Len > n {
			return ErrNoSpace
		}
	}
	return nil
}
