package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// RawChunk is the size of each write of RawWrite.
const RawChunk = 1 << 20

// RawWrite is the physical reference of a run: it writes total bytes
// sequentially to a new file in dir with RawChunk-sized writes, no fsync
// (so into the page cache, as raftlog's appends go), and returns the rate
// in MB/s (10^6 bytes). The file is removed afterwards.
func RawWrite(dir string, total int64) (mbPerSec float64, elapsed time.Duration, err error) {
	if total < RawChunk {
		return 0, 0, fmt.Errorf("raw write of %d bytes: want at least %d", total, RawChunk)
	}
	f, err := os.CreateTemp(dir, "rawwrite-*")
	if err != nil {
		return 0, 0, err
	}
	name := filepath.Clean(f.Name())
	defer os.Remove(name)
	defer f.Close()
	buf := make([]byte, RawChunk)
	for i := range buf {
		buf[i] = byte(i)
	}
	start := time.Now()
	var n int64
	for n < total {
		w, err := f.Write(buf[:min(int64(len(buf)), total-n)])
		if err != nil {
			return 0, 0, err
		}
		n += int64(w)
	}
	elapsed = time.Since(start)
	return float64(n) / 1e6 / elapsed.Seconds(), elapsed, nil
}
