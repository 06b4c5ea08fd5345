package vfs

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

func pwritev(f *os.File, bufs [][]byte, off int64) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	for len(bufs) > 0 {
		chunk := bufs
		if len(chunk) > maxIovecs {
			chunk = chunk[:maxIovecs]
		}
		var n int
		var werr error
		if err := rc.Write(func(fd uintptr) bool {
			n, werr = unix.Pwritev(int(fd), chunk, off)
			return werr != unix.EAGAIN
		}); err != nil {
			return err
		}
		if werr == unix.EINTR {
			continue
		}
		if werr != nil {
			return &os.PathError{Op: "pwritev", Path: f.Name(), Err: werr}
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		off += int64(n)
		// Drop what was written, keeping a partly written buffer's rest.
		for n > 0 {
			if n >= len(bufs[0]) {
				n -= len(bufs[0])
				bufs = bufs[1:]
			} else {
				bufs = append([][]byte{bufs[0][n:]}, bufs[1:]...)
				n = 0
			}
		}
	}
	return nil
}
