package log

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// The benchmarks of this file run side by side: BenchmarkRawWrite is the
// reference (plain sequential writes of the same bytes to one file, no
// validation, no index, no roll), BenchmarkAppend the subject. Compare MB/s
// of the same sub-benchmark name; docs/storage.md has the latest ratios.

var benchShapes = []struct {
	batchBytes int // approximate size of one batch
	perCall    int // batches handed over in one call
}{
	{1 << 10, 1}, {1 << 10, 16}, {16 << 10, 1}, {16 << 10, 8},
}

// benchPayload returns perCall batches of about batchBytes each, back to
// back, and the size of one.
func benchPayload(batchBytes, perCall int) ([]byte, int) {
	recs := batchBytes / 1024
	if recs < 1 {
		recs = 1
	}
	one := mkBatch(recs, batchBytes/recs-40, 1_700_000_000_000)
	var p []byte
	for i := 0; i < perCall; i++ {
		p = append(p, one...)
	}
	return p, len(one)
}

func shapeName(batchBytes, perCall int) string {
	return fmt.Sprintf("batch=%dKiB/per-call=%d", batchBytes>>10, perCall)
}

func BenchmarkAppend(b *testing.B) {
	for _, s := range benchShapes {
		b.Run(shapeName(s.batchBytes, s.perCall), func(b *testing.B) {
			l := openTest(b, b.TempDir(), Config{SegmentBytes: 256 << 20})
			// Close fsyncs the segment: keep it out of the timed region.
			defer func() { b.StopTimer(); l.Close() }()
			p, _ := benchPayload(s.batchBytes, s.perCall)
			b.SetBytes(int64(len(p)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := appendRaw(l, p, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkRawWrite(b *testing.B) {
	for _, s := range benchShapes {
		b.Run(shapeName(s.batchBytes, s.perCall), func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			p, _ := benchPayload(s.batchBytes, s.perCall)
			b.SetBytes(int64(len(p)))
			b.ReportAllocs()
			b.ResetTimer()
			var off int64
			for i := 0; i < b.N; i++ {
				// Roll at the same size as the log does, to compare like for like.
				if off+int64(len(p)) > 256<<20 {
					f.Truncate(0)
					off = 0
				}
				if _, err := f.WriteAt(p, off); err != nil {
					b.Fatal(err)
				}
				off += int64(len(p))
			}
		})
	}
}

// BenchmarkRead reads 1 MiB of 1 KiB batches from an arbitrary offset.
func BenchmarkRead(b *testing.B) {
	l := openTest(b, b.TempDir(), Config{})
	defer l.Close()
	p, one := benchPayload(1<<10, 64)
	for i := 0; i < 256; i++ {
		if _, err := appendRaw(l, p, 1); err != nil {
			b.Fatal(err)
		}
	}
	_ = one
	end := l.EndOffset()
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		off := int64(i*7919) % (end / 2)
		if _, err := l.Read(off, 1<<20, end); err != nil {
			b.Fatal(err)
		}
	}
}
