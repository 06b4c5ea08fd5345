package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// FreeMemory is the memory the kernel has not given to anything, not even
// to its page cache: MemFree of /proc/meminfo, in bytes.
func FreeMemory() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != "MemFree" {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("/proc/meminfo: MemFree %q: want a size in kB", rest)
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/meminfo: MemFree: %w", err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("/proc/meminfo: no MemFree")
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
	size := (free - leave) / RawChunk * RawChunk
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
