package log

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRegressionCorruptIndexSizeBricksOpen(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{SegmentBytes: 400}
	l := openTest(t, dir, cfg)
	for i := 0; i < 6; i++ {
		mustAppend(t, l, mkBatch(3, 50, int64(i)))
	}
	l.Close()
	// a derived file with a bad size (bit rot, a partial copy, ...)
	p := filepath.Join(dir, segmentName(0, timeIndexSuffix))
	if err := os.WriteFile(p, []byte{1, 2, 3, 4, 5}, 0o644); err != nil {
		t.Fatal(err)
	}
	l2, err := Open(dir, WithConfig(cfg))
	if err != nil {
		t.Fatalf("open with a damaged time index (derived data): %v", err)
	}
	l2.Close()
}
