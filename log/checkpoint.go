package log

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"path/filepath"

	"github.com/raftlog/raftlog/log/vfs"
)

// The partition checkpoint holds the recovery point (every offset below it
// was fsynced) and the log start offset. It is replaced atomically (tmp,
// fsync, rename, fsync dir).
//
//	offset  size  field
//	     0     4  magic "RLCP"
//	     4     1  version (1)
//	     5     3  zero
//	     8     8  recovery point (offset)
//	    16     8  log start offset
//	    24     4  CRC-32C of bytes [0, 24)
//
// Frozen: changing it needs a new version.
const (
	checkpointName    = "partition.checkpoint"
	checkpointSize    = 28
	checkpointVersion = 1
	// cleanShutdownName marks a log closed cleanly: segments fsynced,
	// indexes trimmed, checkpoint written. Removed (durably) on open.
	cleanShutdownName = ".clean-shutdown"
)

var checkpointMagic = [4]byte{'R', 'L', 'C', 'P'}

type checkpoint struct {
	recoveryPoint int64
	logStart      int64
}

func (c checkpoint) encode() []byte {
	b := make([]byte, checkpointSize)
	copy(b, checkpointMagic[:])
	b[4] = checkpointVersion
	binary.BigEndian.PutUint64(b[8:], uint64(c.recoveryPoint))
	binary.BigEndian.PutUint64(b[16:], uint64(c.logStart))
	binary.BigEndian.PutUint32(b[24:], crc32.Checksum(b[:24], castagnoli))
	return b
}

var errNoCheckpoint = errors.New("no checkpoint")

func readCheckpoint(fsys vfs.FS, dir string) (checkpoint, error) {
	b, err := vfs.ReadFile(fsys, filepath.Join(dir, checkpointName))
	if errors.Is(err, fs.ErrNotExist) {
		return checkpoint{}, errNoCheckpoint
	}
	if err != nil {
		return checkpoint{}, err
	}
	if len(b) != checkpointSize || [4]byte(b[:4]) != checkpointMagic || b[4] != checkpointVersion {
		return checkpoint{}, fmt.Errorf("log: checkpoint in %s: bad header or size %d", dir, len(b))
	}
	if got, want := crc32.Checksum(b[:24], castagnoli), binary.BigEndian.Uint32(b[24:]); got != want {
		return checkpoint{}, fmt.Errorf("log: checkpoint in %s: crc %08x, computed %08x", dir, want, got)
	}
	c := checkpoint{
		recoveryPoint: int64(binary.BigEndian.Uint64(b[8:])),
		logStart:      int64(binary.BigEndian.Uint64(b[16:])),
	}
	if c.recoveryPoint < 0 || c.logStart < 0 {
		return checkpoint{}, fmt.Errorf("log: checkpoint in %s: negative offsets", dir)
	}
	return c, nil
}

func writeCheckpoint(fsys vfs.FS, dir string, c checkpoint) error {
	return vfs.WriteFileAtomic(fsys, filepath.Join(dir, checkpointName), c.encode())
}
