package log

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/raftlog/raftlog/log/vfs"
)

// FuzzValidateBatch: on any input the validator returns an error or a size
// within the input; a valid prefix validates again to the same size, its
// CRC is what it says, and Batches walks it as exactly one batch.
func FuzzValidateBatch(f *testing.F) {
	f.Add(mkBatch(1, 0, 0))
	f.Add(mkBatch(3, 17, 1_700_000_000_000))
	f.Add(append(mkBatch(2, 5, 1), mkBatch(1, 5, 2)...))
	f.Add([]byte{})
	f.Add(make([]byte, BatchHeaderSize))
	f.Fuzz(func(t *testing.T, p []byte) {
		size, err := ValidateBatch(p, 1<<20)
		if err != nil {
			if !errors.Is(err, ErrCorruptBatch) && !errors.Is(err, ErrBatchTooLarge) {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		if size < BatchHeaderSize || size > len(p) {
			t.Fatalf("size %d of %d bytes", size, len(p))
		}
		b := Batch(p[:size])
		if b.ComputeCRC() != b.CRC() || b.Size() != size {
			t.Fatal("valid batch with a wrong CRC or size")
		}
		again, err := ValidateBatch(append([]byte(nil), p[:size]...), 1<<20)
		if err != nil || again != size {
			t.Fatalf("re-validation of the valid prefix: %d %v", again, err)
		}
		n := 0
		Batches(p[:size], func(Batch) bool { n++; return true })
		if n != 1 {
			t.Fatalf("Batches saw %d batches", n)
		}
		if b.Codec() == 0 {
			if _, _, ok := DecodeRecords(b); !ok {
				t.Fatal("valid uncompressed batch whose records do not decode")
			}
		}
	})
}

// FuzzRecoverSegment: a segment of valid batches followed by arbitrary
// bytes, or with one byte changed, recovers after an unclean shutdown to a
// prefix of the valid batches (every batch before the damage kept), with
// indexes that agree with the log, and takes appends afterwards.
func FuzzRecoverSegment(f *testing.F) {
	f.Add([]byte{}, int32(-1), byte(0))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 200}, int32(-1), byte(0))
	f.Add([]byte{}, int32(100), byte(0x80))
	f.Add(mkBatch(1, 3, 5), int32(-1), byte(0))
	f.Fuzz(func(t *testing.T, tail []byte, flipAt int32, flip byte) {
		var batches []Batch
		var seg []byte
		next := int64(0)
		for i := 0; i < 6; i++ {
			b := Batch(mkBatch(1+i%3, 40*i, int64(i)))
			b.SetBaseOffset(next)
			next = b.NextOffset()
			batches = append(batches, b)
			seg = append(seg, b...)
		}
		damageAt := len(seg)
		if flipAt >= 0 && int(flipAt) < len(seg) && flip != 0 {
			seg[flipAt] ^= flip
			damageAt = int(flipAt)
		}
		seg = append(seg, tail...)

		fs := vfs.NewMem()
		dir := "/d/t-0"
		if err := fs.MkdirAll(dir); err != nil {
			t.Fatal(err)
		}
		file, err := fs.Create(filepath.Join(dir, segmentName(0, logSuffix)))
		if err != nil {
			t.Fatal(err)
		}
		file.WriteAt(seg, 0)
		file.Close()
		idx := t.TempDir()
		l, err := Open(dir, WithFS(fs), WithIndexDir(idx), WithConfig(Config{IndexIntervalBytes: 64, SegmentIndexBytes: 4096}))
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer l.Close()
		got := readAll(t, l)
		if len(got) > len(batches) {
			// Only possible when the tail itself is a valid batch continuing the log.
			for i := range batches {
				if !sameIgnoringEpoch(got[i], batches[i]) {
					t.Fatalf("batch %d differs", i)
				}
			}
		} else {
			pos := 0
			for i := range got {
				if !sameIgnoringEpoch(got[i], batches[i]) {
					t.Fatalf("batch %d differs", i)
				}
				pos += len(got[i])
			}
			// Every batch wholly before the damage survives.
			kept := 0
			for _, b := range batches {
				if kept+len(b) > damageAt {
					break
				}
				kept += len(b)
			}
			if pos < kept {
				t.Fatalf("recovered %d bytes, %d were undamaged", pos, kept)
			}
		}
		if err := l.Verify(); err != nil {
			t.Fatalf("verify: %v", err)
		}
		if _, err := appendRaw(l, mkBatch(1, 1, 1), 0); err != nil {
			t.Fatalf("append after recovery: %v", err)
		}
		if err := l.Verify(); err != nil {
			t.Fatalf("verify after append: %v", err)
		}
	})
}

// sameIgnoringEpoch compares two batches but for partitionLeaderEpoch,
// which Kafka's format leaves outside the CRC: a flipped bit there cannot be
// detected, only the Raft layer above knows the right value.
func sameIgnoringEpoch(a, b []byte) bool {
	if len(a) != len(b) || len(a) < magicOff {
		return false
	}
	return bytes.Equal(a[:leaderEpochOff], b[:leaderEpochOff]) && bytes.Equal(a[magicOff:], b[magicOff:])
}

// The seed corpora live in testdata/fuzz; this keeps one batch file there
// honest: it must still validate.
func TestFuzzSeedCorpusPresent(t *testing.T) {
	for _, name := range []string{"FuzzValidateBatch", "FuzzRecoverSegment"} {
		ents, err := os.ReadDir(filepath.Join("testdata", "fuzz", name))
		if err != nil || len(ents) == 0 {
			t.Fatalf("no committed seed corpus for %s: %v", name, err)
		}
	}
}
