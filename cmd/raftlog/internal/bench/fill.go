package bench

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/procfs"
)

// FreeMemory is the memory the kernel has not given to anything, not even
// to its page cache: MemFree of /proc/meminfo, in bytes.
func FreeMemory() (int64, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, err
	}
	mi, err := fs.Meminfo()
	if err != nil {
		return 0, err
	}
	if mi.MemFreeBytes == nil {
		return 0, errors.New("/proc/meminfo: no MemFree")
	}
	return int64(*mi.MemFreeBytes), nil
}

// FillPageCache brings the machine's memory to the state of a broker that
// has run for a while: the page cache holds all memory but leave bytes,
// so new log pages are taken from old clean pages the kernel reclaims
// rather than from free memory. It reads a sparse file in dir of the size
// of the free memory less leave (a hole is read as zeroes: no disk is
// written or read) and keeps the file until the returned function is
// called, which removes it. It returns the bytes read.
//
// On a virtual machine whose host takes back the guest's free memory
// (free page reporting, ballooning) the first write into each page of
// free memory waits for the host to provide it again, an order of
// magnitude slower than a write into a page in use; a benchmark on a
// freshly booted guest measures that, not the program. Preconditioning
// takes it out of the measurement, as a run of a few hours would.
func FillPageCache(dir string, leave int64) (filled int64, remove func(), err error) {
	free, err := FreeMemory()
	if err != nil {
		return 0, nil, err
	}
	return readSparse(dir, (free-leave)/RawChunk*RawChunk)
}

// readSparse creates a sparse file of size bytes in dir and reads it
// whole, which puts size bytes of zeroes into the page cache; the file
// stays until remove is called.
func readSparse(dir string, size int64) (filled int64, remove func(), err error) {
	if size <= 0 {
		return 0, func() {}, nil
	}
	f, err := os.CreateTemp(dir, "pagecache-*")
	if err != nil {
		return 0, nil, err
	}
	name := filepath.Clean(f.Name())
	remove = func() { os.Remove(name) }
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		remove()
		return 0, nil, err
	}
	buf := make([]byte, RawChunk)
	deadline := time.Now().Add(10 * time.Minute)
	for filled < size && time.Now().Before(deadline) {
		n, err := f.ReadAt(buf, filled)
		filled += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			remove()
			return filled, nil, err
		}
	}
	return filled, remove, nil
}
