package log

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/raftlog/raftlog/log/vfs"
)

// mkBatch builds an uncompressed batch of n records with valueSize-byte
// values; record i has timestamp ts+i.
func mkBatch(n, valueSize int, ts int64) []byte {
	recs := make([]Record, n)
	for i := range recs {
		v := bytes.Repeat([]byte{byte('a' + i%26)}, valueSize)
		recs[i] = Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: v, Timestamp: ts + int64(i)}
	}
	return BuildBatch(nil, BatchOptions{ProducerID: -1, BaseSequence: -1}, recs)
}

// rndBatch builds a batch with random record count and sizes.
func rndBatch(r *rand.Rand, ts int64) []byte {
	return mkBatch(1+r.IntN(8), r.IntN(300), ts)
}

func openTest(t testing.TB, dir string, cfg Config, opts ...Option) *Log {
	t.Helper()
	l, err := Open(dir, append([]Option{WithConfig(cfg)}, opts...)...)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l
}

// appendRaw validates the batches in p, as a request's are where they
// enter a node, and appends them.
func appendRaw(l *Log, p []byte, leaderEpoch int32) (AppendInfo, error) {
	if _, err := SplitBatches(p, l.cfg.MaxBatchBytes); err != nil {
		return AppendInfo{}, fmt.Errorf("log: %w", err)
	}
	return l.AppendValidated([][]byte{p}, leaderEpoch)
}

func mustAppend(t testing.TB, l *Log, p []byte) AppendInfo {
	t.Helper()
	info, err := appendRaw(l, p, 7)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return info
}

// readAll reads every batch from the log start to the end.
func readAll(t testing.TB, l *Log) []Batch {
	t.Helper()
	var out []Batch
	off := l.StartOffset()
	end := l.EndOffset()
	for off < end {
		p, err := l.Read(off, 64<<10, end)
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		if len(p) == 0 {
			t.Fatalf("read at %d (end %d): nothing", off, end)
		}
		Batches(p, func(b Batch) bool {
			if b.LastOffset() >= off {
				out = append(out, append(Batch(nil), b...))
				off = b.NextOffset()
			}
			return true
		})
	}
	return out
}

func memLog(t testing.TB, cfg Config) (*vfs.MemFS, string, *Log) {
	t.Helper()
	fs := vfs.NewMem()
	idx := t.TempDir()
	l := openTest(t, "/p/t-0", cfg, WithFS(fs), WithIndexDir(idx))
	return fs, idx, l
}

func mustVerify(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Verify(); err != nil {
		t.Fatalf("verify: %v", err)
	}
}
