package vfs

import (
	"errors"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Kinds of mutating operations, as passed to the hook of SetHook.
const (
	OpWriteAt   = "writeat"
	OpTruncate  = "truncate"
	OpSync      = "sync"
	OpCreate    = "create"
	OpRename    = "rename" // name is "old -> new"
	OpRemove    = "remove"
	OpRemoveAll = "removeall"
	OpSyncDir   = "syncdir"
	OpMkdirAll  = "mkdirall"
)

// MemFS is an in-memory FS that can model a power loss: CrashClone returns
// what would be on disk if the machine lost power now, that is every file's
// contents as of its last Sync and every directory's entries as of its last
// SyncDir (POSIX rules: a created, renamed or removed entry is durable only
// once its parent directory is synced, and that includes directories made
// by MkdirAll).
//
// Paths are cleaned with filepath.Clean; relative and absolute paths name
// the same tree ("a/b" is "/a/b"; "." and "/" are the root, which always
// exists). Errors are *os.PathError (*os.LinkError for Rename) wrapping
// fs.ErrNotExist, fs.ErrExist, fs.ErrClosed, fs.ErrInvalid or a
// syscall.Errno (ENOTDIR, EISDIR, ENOTEMPTY, EBADF), as package os does.
//
// Mutating operations (WriteAt, Truncate, Sync, Create, Rename, Remove,
// RemoveAll, SyncDir, MkdirAll) are serialised with each other across the
// whole file system; reads (ReadAt, Size, Open, List, Exists) run
// concurrently with them and with each other.
type MemFS struct {
	// opMu serialises mutating operations, and is held while the hook runs,
	// so that an op and its undo are not interleaved with another op.
	opMu sync.Mutex
	// mu guards the directory tree (children and synced maps of every
	// directory node). Lock order: opMu, then mu, then a file node's mu.
	mu   sync.RWMutex
	root *memNode
	ops  atomic.Int64
	hook atomic.Pointer[hookFunc]
}

type hookFunc = func(op int, kind string, name string) error

var _ FS = (*MemFS)(nil)

// CrashOptions configures CrashClone.
type CrashOptions struct {
	// Rand, when non-nil, makes the crash less kind: for every file, a
	// random prefix of the unsynced bytes beyond the synced length is kept
	// (what a real disk may keep), and, with Torn set, a random-length tail
	// of that kept part may (with probability 1/2) be replaced by random
	// garbage of the same length. Files are visited in sorted path order, so
	// a Rand with a fixed seed gives a reproducible crash.
	Rand *rand.Rand
	Torn bool
}

// memNode is a file or a directory. A file's node is shared by every
// handle open on it and by the directory entries naming it.
type memNode struct {
	isDir bool

	// Directories; guarded by MemFS.mu.
	children map[string]*memNode // current entries
	synced   map[string]*memNode // entries as of the last SyncDir

	// Files; guarded by mu.
	mu      sync.RWMutex
	data    []byte // current contents
	durable []byte // contents as of the last Sync
	// sharedLen: positions [0, sharedLen) of data's backing array may be
	// aliased by durable or by a crash clone, so they must not be written
	// in place (copy on write). Only ever grows until data is copied.
	sharedLen int
}

func newDirNode() *memNode {
	return &memNode{
		isDir:    true,
		children: make(map[string]*memNode),
		synced:   make(map[string]*memNode),
	}
}

// NewMem returns an empty MemFS holding only the root directory.
func NewMem() *MemFS {
	return &MemFS{root: newDirNode()}
}

// Ops returns how many mutating operations have been numbered so far: each
// call of a mutating method that gets past argument validation (the target
// exists, the handle is writable, ...) is one op, whether or not it changes
// anything and whether or not the hook then fails it.
func (m *MemFS) Ops() int { return int(m.ops.Load()) }

// SetHook registers fn (nil removes it). fn is called once for every
// mutating operation, after the operation has been applied and before it
// returns, with the op number (1-based, as counted by Ops), its kind (one of
// the Op* constants) and the name it acts on (for file handles, the name the
// file was opened with; for Rename, "old -> new"). So a CrashClone taken in
// fn at op k holds the state with ops 1..k applied.
//
// If fn returns an error, the operation is undone and fails with exactly
// that error: it is as if it had not been applied (a test of sticky write
// errors). Reads from other goroutines may have seen its effect meanwhile.
//
// fn runs with the file system's op lock held: it may call CrashClone, Ops,
// SetHook and the read methods (Open, List, Exists, ReadAt, ...), but must
// not call a mutating method of the same MemFS (that would deadlock).
func (m *MemFS) SetHook(fn func(op int, kind string, name string) error) {
	if fn == nil {
		m.hook.Store(nil)
		return
	}
	m.hook.Store(&fn)
}

// fire numbers an op and runs the hook h (loaded before the op was applied)
// on it. Called with opMu held and no other lock.
func (m *MemFS) fire(h *hookFunc, kind, name string) error {
	n := int(m.ops.Add(1))
	if h == nil {
		return nil
	}
	return (*h)(n, kind, name)
}

// CrashClone returns a new, independent MemFS (deep copy, copy on write)
// holding what would survive a power loss right now: every directory with
// its entries as of its last SyncDir, every file with its contents as of its
// last Sync (bytes written since are dropped, truncations since are undone;
// see CrashOptions for a less kind crash). A file whose create was never made
// durable by a SyncDir is absent; a renamed file whose directory was not
// synced since is at its old name; a removed one is still there. In the
// clone, everything is synced, Ops is 0 and there is no hook. The original
// and its open handles are unaffected.
func (m *MemFS) CrashClone(opts CrashOptions) *MemFS {
	m.mu.RLock()
	defer m.mu.RUnlock()
	c := cloner{opts: opts, memo: make(map[*memNode]*memNode)}
	return &MemFS{root: c.clone(m.root)}
}

type cloner struct {
	opts CrashOptions
	// memo maps original nodes to their clones, so that a node reachable
	// from two durable entries (a rename made durable in the new directory
	// but not yet in the old) is one node in the clone, like a hard link.
	memo map[*memNode]*memNode
}

func (c *cloner) clone(n *memNode) *memNode {
	if cn, ok := c.memo[n]; ok {
		return cn
	}
	if n.isDir {
		cn := newDirNode()
		c.memo[n] = cn
		for _, name := range slices.Sorted(maps.Keys(n.synced)) {
			cn.children[name] = c.clone(n.synced[name])
		}
		cn.synced = maps.Clone(cn.children)
		return cn
	}
	cn := &memNode{}
	c.memo[n] = cn
	n.mu.RLock()
	data := n.durable
	if r := c.opts.Rand; r != nil && len(n.data) > len(data) {
		s := len(data)
		k := r.IntN(len(n.data) - s + 1)
		out := make([]byte, s+k)
		copy(out, data)
		copy(out[s:], n.data[s:s+k])
		if c.opts.Torn && k > 0 && r.IntN(2) == 0 {
			g := 1 + r.IntN(k)
			for i := len(out) - g; i < len(out); i++ {
				out[i] = byte(r.Uint32())
			}
		}
		data = out
	}
	n.mu.RUnlock()
	data = data[:len(data):len(data)]
	cn.data, cn.durable, cn.sharedLen = data, data, len(data)
	return cn
}

// prepareWrite makes positions from on of n.data writable in place.
// n.mu must be held for writing.
func (n *memNode) prepareWrite(from int) {
	if from < n.sharedLen {
		n.data = slices.Clone(n.data)
		n.sharedLen = 0
	}
}

// setLen truncates or zero-extends n.data. n.mu must be held for writing.
func (n *memNode) setLen(size int) {
	old := len(n.data)
	if size <= old {
		n.data = n.data[:size]
		return
	}
	n.prepareWrite(old)
	n.data = slices.Grow(n.data, size-old)[:size]
	clear(n.data[old:])
}

// writeAt writes p at off, zero-filling any gap. n.mu must be held.
func (n *memNode) writeAt(p []byte, off int) {
	if len(p) == 0 {
		return
	}
	n.prepareWrite(min(off, len(n.data)))
	if end := off + len(p); end > len(n.data) {
		n.setLen(end)
	}
	copy(n.data[off:], p)
}

// Paths.

var errNegativeOffset = errors.New("negative offset")

func pathErr(op, name string, err error) error {
	return &os.PathError{Op: op, Path: name, Err: err}
}

// splitPath cleans name and splits it into components; the root is nil.
func splitPath(name string) ([]string, error) {
	p := strings.TrimLeft(filepath.ToSlash(filepath.Clean(name)), "/")
	if p == "" || p == "." {
		return nil, nil
	}
	if p == ".." || strings.HasPrefix(p, "../") {
		return nil, fs.ErrInvalid
	}
	return strings.Split(p, "/"), nil
}

// loc is a resolved path: its parent directory (nil for the root), its last
// component, and its node (nil when absent).
type loc struct {
	parts []string
	dir   *memNode
	base  string
	node  *memNode
}

// locate resolves name; it fails when the parent directory does not exist
// (or is a file), not when name itself is absent. m.mu must be held.
func (m *MemFS) locate(op, name string) (loc, error) {
	parts, err := splitPath(name)
	if err != nil {
		return loc{}, pathErr(op, name, err)
	}
	if len(parts) == 0 {
		return loc{node: m.root}, nil
	}
	d := m.root
	for _, p := range parts[:len(parts)-1] {
		c := d.children[p]
		if c == nil {
			return loc{}, pathErr(op, name, fs.ErrNotExist)
		}
		if !c.isDir {
			return loc{}, pathErr(op, name, syscall.ENOTDIR)
		}
		d = c
	}
	base := parts[len(parts)-1]
	return loc{parts: parts, dir: d, base: base, node: d.children[base]}, nil
}

// lookup resolves an existing name. m.mu must be held.
func (m *MemFS) lookup(op, name string) (*memNode, error) {
	l, err := m.locate(op, name)
	if err != nil {
		return nil, err
	}
	if l.node == nil {
		return nil, pathErr(op, name, fs.ErrNotExist)
	}
	return l.node, nil
}

// FS methods.

// Create creates or truncates the named file, opened read-write. Truncating
// an existing file keeps its node (open handles see the truncation), and is
// undone by a crash until the file is synced.
func (m *MemFS) Create(name string) (File, error) {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	h := m.hook.Load()

	m.mu.Lock()
	l, err := m.locate("open", name)
	if err == nil && (l.dir == nil || l.node != nil && l.node.isDir) {
		err = pathErr("open", name, syscall.EISDIR)
	}
	if err != nil {
		m.mu.Unlock()
		return nil, err
	}
	n, oldLen := l.node, 0
	if n == nil {
		n = &memNode{}
		l.dir.children[l.base] = n
	} else {
		n.mu.Lock()
		oldLen = len(n.data)
		n.setLen(0)
		n.mu.Unlock()
	}
	m.mu.Unlock()

	if err := m.fire(h, OpCreate, name); err != nil {
		m.mu.Lock()
		if l.node == nil {
			delete(l.dir.children, l.base)
		} else {
			n.mu.Lock()
			n.data = n.data[:oldLen] // the bytes are still in the array
			n.mu.Unlock()
		}
		m.mu.Unlock()
		return nil, err
	}
	return &memFile{fs: m, node: n, name: name, writable: true}, nil
}

func (m *MemFS) open(name string, writable bool) (File, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n, err := m.lookup("open", name)
	if err != nil {
		return nil, err
	}
	if n.isDir {
		return nil, pathErr("open", name, syscall.EISDIR)
	}
	return &memFile{fs: m, node: n, name: name, writable: writable}, nil
}

// OpenRW opens an existing file read-write.
func (m *MemFS) OpenRW(name string) (File, error) { return m.open(name, true) }

// Open opens an existing file read-only: WriteAt and Truncate fail on it.
func (m *MemFS) Open(name string) (File, error) { return m.open(name, false) }

// Remove removes a file or an empty directory. Open handles of a removed
// file keep working on its node.
func (m *MemFS) Remove(name string) error {
	return m.remove(OpRemove, name)
}

// RemoveAll removes name and everything below it; an absent name is no
// error (and still counts as an op).
func (m *MemFS) RemoveAll(name string) error {
	return m.remove(OpRemoveAll, name)
}

func (m *MemFS) remove(kind, name string) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	h := m.hook.Load()

	m.mu.Lock()
	l, err := m.locate("remove", name)
	switch {
	case err != nil:
		if kind == OpRemoveAll && errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
	case l.dir == nil:
		err = pathErr("remove", name, fs.ErrInvalid)
	case l.node == nil:
		if kind == OpRemove {
			err = pathErr("remove", name, fs.ErrNotExist)
		}
	case kind == OpRemove && l.node.isDir && len(l.node.children) > 0:
		err = pathErr("remove", name, syscall.ENOTEMPTY)
	}
	if err != nil {
		m.mu.Unlock()
		return err
	}
	if l.node != nil {
		delete(l.dir.children, l.base)
	}
	m.mu.Unlock()

	if err := m.fire(h, kind, name); err != nil {
		if l.node != nil {
			m.mu.Lock()
			l.dir.children[l.base] = l.node
			m.mu.Unlock()
		}
		return err
	}
	return nil
}

// Rename atomically renames a file or a directory, replacing newname if it
// exists (a directory only replaces an empty directory). The node moves:
// open handles follow it.
func (m *MemFS) Rename(oldname, newname string) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	h := m.hook.Load()
	linkErr := func(err error) error {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}

	m.mu.Lock()
	lo, err := m.locate("rename", oldname)
	var ln loc
	if err == nil {
		ln, err = m.locate("rename", newname)
	}
	if err == nil {
		switch {
		case lo.node == nil:
			err = fs.ErrNotExist
		case lo.dir == nil || ln.dir == nil:
			err = fs.ErrInvalid
		case lo.node == ln.node:
			// Same path or same node: nothing to do.
		case lo.node.isDir:
			if ln.node != nil && !ln.node.isDir {
				err = syscall.ENOTDIR
			} else if ln.node != nil && len(ln.node.children) > 0 {
				err = syscall.ENOTEMPTY
			} else if len(ln.parts) > len(lo.parts) && slices.Equal(ln.parts[:len(lo.parts)], lo.parts) {
				err = fs.ErrInvalid // into its own subtree
			}
		case ln.node != nil && ln.node.isDir:
			err = syscall.EISDIR
		}
	}
	if err != nil {
		m.mu.Unlock()
		return linkErr(err)
	}
	moved := lo.node != ln.node
	if moved {
		delete(lo.dir.children, lo.base)
		ln.dir.children[ln.base] = lo.node
	}
	m.mu.Unlock()

	if err := m.fire(h, OpRename, oldname+" -> "+newname); err != nil {
		if moved {
			m.mu.Lock()
			delete(ln.dir.children, ln.base)
			if ln.node != nil {
				ln.dir.children[ln.base] = ln.node
			}
			lo.dir.children[lo.base] = lo.node
			m.mu.Unlock()
		}
		return err
	}
	return nil
}

// MkdirAll creates a directory and its missing parents. The new directories
// are durable only once their parents are synced with SyncDir.
func (m *MemFS) MkdirAll(dir string) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	h := m.hook.Load()

	parts, err := splitPath(dir)
	if err != nil {
		return pathErr("mkdir", dir, err)
	}
	m.mu.Lock()
	d, i := m.root, 0
	for ; i < len(parts); i++ {
		c := d.children[parts[i]]
		if c == nil {
			break
		}
		if !c.isDir {
			m.mu.Unlock()
			return pathErr("mkdir", dir, syscall.ENOTDIR)
		}
		d = c
	}
	top, topName := d, ""
	if i < len(parts) {
		topName = parts[i]
		for ; i < len(parts); i++ {
			c := newDirNode()
			d.children[parts[i]] = c
			d = c
		}
	}
	m.mu.Unlock()

	if err := m.fire(h, OpMkdirAll, dir); err != nil {
		if topName != "" {
			m.mu.Lock()
			delete(top.children, topName)
			m.mu.Unlock()
		}
		return err
	}
	return nil
}

// List returns the sorted names of the entries (files and directories) of
// a directory.
func (m *MemFS) List(dir string) ([]string, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n, err := m.lookup("open", dir)
	if err != nil {
		return nil, err
	}
	if !n.isDir {
		return nil, pathErr("readdirent", dir, syscall.ENOTDIR)
	}
	return slices.Sorted(maps.Keys(n.children)), nil
}

// Exists reports whether a path exists.
func (m *MemFS) Exists(name string) (bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	l, err := m.locate("stat", name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	return l.node != nil, nil
}

// SyncDir makes the directory's current entries durable.
func (m *MemFS) SyncDir(dir string) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	h := m.hook.Load()

	m.mu.Lock()
	n, err := m.lookup("open", dir)
	if err == nil && !n.isDir {
		err = pathErr("sync", dir, syscall.ENOTDIR)
	}
	if err != nil {
		m.mu.Unlock()
		return err
	}
	old := n.synced
	n.synced = maps.Clone(n.children)
	m.mu.Unlock()

	if err := m.fire(h, OpSyncDir, dir); err != nil {
		m.mu.Lock()
		n.synced = old
		m.mu.Unlock()
		return err
	}
	return nil
}

// memFile is an open handle on a file node.
type memFile struct {
	fs       *MemFS
	node     *memNode
	name     string
	writable bool
	closed   atomic.Bool
}

// check fails when the handle is closed, or read-only and write is set.
func (f *memFile) check(op string, write bool) error {
	if f.closed.Load() {
		return pathErr(op, f.name, fs.ErrClosed)
	}
	if write && !f.writable {
		return pathErr(op, f.name, syscall.EBADF)
	}
	return nil
}

// ReadAt reads len(p) bytes at off; it returns io.EOF with fewer bytes when
// the file ends first, like os.File.
func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("readat", f.name, errNegativeOffset)
	}
	if len(p) == 0 {
		return 0, nil
	}
	n := f.node
	n.mu.RLock()
	defer n.mu.RUnlock()
	if off >= int64(len(n.data)) {
		return 0, io.EOF
	}
	k := copy(p, n.data[off:])
	if k < len(p) {
		return k, io.EOF
	}
	return k, nil
}

// WriteAt writes p at off, zero-filling any gap past the end.
func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("writeat", f.name, errNegativeOffset)
	}
	m, n, o := f.fs, f.node, int(off)
	m.opMu.Lock()
	defer m.opMu.Unlock()
	h := m.hook.Load()

	n.mu.Lock()
	oldLen := len(n.data)
	var saved []byte // overwritten bytes, to undo
	if h != nil && o < oldLen {
		saved = slices.Clone(n.data[o:min(o+len(p), oldLen)])
	}
	n.writeAt(p, o)
	n.mu.Unlock()

	if err := m.fire(h, OpWriteAt, f.name); err != nil {
		n.mu.Lock()
		if len(saved) > 0 {
			n.prepareWrite(o)
			copy(n.data[o:], saved)
		}
		n.data = n.data[:oldLen]
		n.mu.Unlock()
		return 0, err
	}
	return len(p), nil
}

// Truncate changes the size of the file, zero-extending it if it grows.
func (f *memFile) Truncate(size int64) error {
	if err := f.check("truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return pathErr("truncate", f.name, fs.ErrInvalid)
	}
	m, n := f.fs, f.node
	m.opMu.Lock()
	defer m.opMu.Unlock()
	h := m.hook.Load()

	n.mu.Lock()
	oldLen := len(n.data)
	n.setLen(int(size))
	n.mu.Unlock()

	if err := m.fire(h, OpTruncate, f.name); err != nil {
		n.mu.Lock()
		// A shrink left the bytes in the array; a growth copied them.
		n.data = n.data[:oldLen]
		n.mu.Unlock()
		return err
	}
	return nil
}

// Sync records the file's current contents as durable.
func (f *memFile) Sync() error {
	if err := f.check("sync", false); err != nil {
		return err
	}
	m, n := f.fs, f.node
	m.opMu.Lock()
	defer m.opMu.Unlock()
	h := m.hook.Load()

	n.mu.Lock()
	old := n.durable
	n.durable = n.data[:len(n.data):len(n.data)]
	n.sharedLen = max(n.sharedLen, len(n.data))
	n.mu.Unlock()

	if err := m.fire(h, OpSync, f.name); err != nil {
		n.mu.Lock()
		n.durable = old // sharedLen stays: a clone may alias the array
		n.mu.Unlock()
		return err
	}
	return nil
}

// Size is the current size of the file.
func (f *memFile) Size() (int64, error) {
	if err := f.check("stat", false); err != nil {
		return 0, err
	}
	f.node.mu.RLock()
	defer f.node.mu.RUnlock()
	return int64(len(f.node.data)), nil
}

// Close closes the handle; a second Close returns an error.
func (f *memFile) Close() error {
	if !f.closed.CompareAndSwap(false, true) {
		return pathErr("close", f.name, fs.ErrClosed)
	}
	return nil
}
