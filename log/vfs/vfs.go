// Package vfs is the file-system seam under the partition log: every byte the
// log reads or writes goes through an FS, so tests can run the log on a
// crashable in-memory file system that forgets what was never synced.
//
// Two implementations exist: OS (the real file system through package os) and
// MemFS (in memory, with CrashClone to model a power loss). The interface is
// the least the log needs: positional reads and writes, truncate, sync, and
// the directory operations of an atomic replace (create, rename, sync dir).
package vfs

import (
	"io"
	"os"
	"path/filepath"
	"sort"
)

// File is an open file. ReadAt and WriteAt are positional and safe for
// concurrent use by one writer and many readers on disjoint or already
// written ranges, as pread/pwrite are.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes the file's contents durable (fsync).
	Sync() error
	// Truncate changes the size of the file.
	Truncate(size int64) error
	// Size is the current size of the file.
	Size() (int64, error)
}

// FS is a file system.
type FS interface {
	// Create creates or truncates the named file, opened read-write.
	Create(name string) (File, error)
	// OpenRW opens an existing file read-write.
	OpenRW(name string) (File, error)
	// Open opens an existing file read-only.
	Open(name string) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes a path and everything below it; no error if absent.
	RemoveAll(name string) error
	// Rename atomically renames a file, replacing newname if it exists.
	Rename(oldname, newname string) error
	// MkdirAll creates a directory and its parents.
	MkdirAll(dir string) error
	// List returns the sorted names of the entries of a directory.
	List(dir string) ([]string, error)
	// Exists reports whether a path exists.
	Exists(name string) (bool, error)
	// SyncDir makes the directory's entries (creates, renames, removes)
	// durable.
	SyncDir(dir string) error
}

// OS is the real file system.
var OS FS = osFS{}

type osFS struct{}

type osFile struct{ *os.File }

func (f osFile) Size() (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (osFS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) OpenRW(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Remove(name string) error             { return os.Remove(name) }
func (osFS) RemoveAll(name string) error          { return os.RemoveAll(name) }
func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }
func (osFS) MkdirAll(dir string) error            { return os.MkdirAll(dir, 0o755) }

func (osFS) List(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, nil
}

func (osFS) Exists(name string) (bool, error) {
	_, err := os.Stat(name)
	if err == nil {
		return true, nil
	}
	if os.IsNotExist(err) {
		return false, nil
	}
	return false, err
}

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// OSFile returns the *os.File behind f when f is a file of the OS file
// system, so that callers can use what only real files offer (sendfile).
func OSFile(f File) (*os.File, bool) {
	of, ok := f.(osFile)
	if !ok {
		return nil, false
	}
	return of.File, true
}

// MkdirAllSync creates dir and its missing parents so that they survive
// a crash: it syncs the parent of each directory it creates, and dir's
// parent when dir was there already (whoever made it may have crashed
// before its parent was synced). Opening thousands of partitions synced
// every ancestor up to the root for each.
func MkdirAllSync(fs FS, dir string) error {
	dir = filepath.Clean(dir)
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		ok, err := fs.Exists(d)
		if err != nil {
			return err
		}
		if ok || filepath.Dir(d) == d {
			break
		}
		created = append(created, d)
	}
	if err := fs.MkdirAll(dir); err != nil {
		return err
	}
	if len(created) == 0 {
		created = []string{dir}
	}
	for i := len(created) - 1; i >= 0; i-- {
		if err := fs.SyncDir(filepath.Dir(created[i])); err != nil {
			return err
		}
	}
	return nil
}

// WriteFileAtomic replaces name with data so that after a crash the file
// holds either the old or the new contents: write a temporary file, sync it,
// rename it over name, and sync the directory.
func WriteFileAtomic(fs FS, name string, data []byte) error {
	tmp := name + ".tmp"
	f, err := fs.Create(tmp)
	if err != nil {
		return err
	}
	if err := WriteSyncClose(f, data, 0); err != nil {
		return err
	}
	if err := fs.Rename(tmp, name); err != nil {
		return err
	}
	return fs.SyncDir(filepath.Dir(name))
}

// WriteSyncClose writes data at off (nothing when it is empty), syncs f
// and closes it; f is closed on an error too.
func WriteSyncClose(f File, data []byte, off int64) error {
	if len(data) > 0 {
		if _, err := f.WriteAt(data, off); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReadFile reads a whole file.
func ReadFile(fs FS, name string) ([]byte, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return buf, nil
}

// Writebacker is a File that can ask the kernel to start writing a range of
// its dirty pages to the device without waiting for it. Files of OS are
// Writebackers on Linux (sync_file_range(2) with SYNC_FILE_RANGE_WRITE);
// MemFS files are not: they have no page cache to write back.
type Writebacker interface {
	// StartWriteback starts the writeback of [off, off+n). It makes
	// nothing durable: only Sync does. An error (the file closed, an I/O
	// error the kernel already knows of) loses nothing.
	StartWriteback(off, n int64) error
}

// maxIovecs is the most buffers one pwritev takes (IOV_MAX on Linux).
const maxIovecs = 1024

// WriteVecAt writes bufs back to back at off: with pwritev on OS files (one
// system call for many batches), with WriteAt per buffer elsewhere.
func WriteVecAt(f File, bufs [][]byte, off int64) error {
	switch len(bufs) {
	case 0:
		return nil
	case 1:
		_, err := f.WriteAt(bufs[0], off)
		return err
	}
	if of, ok := OSFile(f); ok {
		for i, b := range bufs {
			if len(b) == 0 { // pwritev would report a short write
				rest := append(append([][]byte(nil), bufs[:i]...), bufs[i+1:]...)
				return WriteVecAt(f, rest, off)
			}
		}
		return pwritev(of, bufs, off)
	}
	for _, b := range bufs {
		if _, err := f.WriteAt(b, off); err != nil {
			return err
		}
		off += int64(len(b))
	}
	return nil
}
