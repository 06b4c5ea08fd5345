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

// StartWriteback implements Writebacker. The call runs under the file's
// reference count (Control), so a concurrent Close cannot hand the
// descriptor to another file meanwhile: it fails with os.ErrClosed instead.
func (f osFile) StartWriteback(off, n int64) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SyncFileRange(int(fd), off, n, unix.SYNC_FILE_RANGE_WRITE)
	}); err != nil {
		// Control fails only on a closed file, with an error of
		// internal/poll that os.ErrClosed does not match.
		return &os.PathError{Op: "sync_file_range", Path: f.Name(), Err: os.ErrClosed}
	}
	if serr != nil {
		return &os.PathError{Op: "sync_file_range", Path: f.Name(), Err: serr}
	}
	return nil
}
