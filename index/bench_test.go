package index

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// fullOffsetIndex returns a DefaultMaxBytes offset index filled to the brim
// (1,310,720 entries, one every 16 offsets and 4 KiB).
func fullOffsetIndex(b *testing.B) *OffsetIndex {
	x, err := OpenOffsetIndex(tempPath(b, kinds[0]), testBase, DefaultMaxBytes, true)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { x.Close() })
	for i := 0; ; i++ {
		err := x.Append(testBase+16*int64(i), uint32(i)*4096)
		if errors.Is(err, ErrFull) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	return x
}

func randomTargets(lo, hi int64) []int64 {
	r := rand.New(rand.NewPCG(42, 43))
	t := make([]int64, 1<<16)
	for i := range t {
		t[i] = lo + r.Int64N(hi-lo)
	}
	return t
}

func BenchmarkOffsetIndexLookup(b *testing.B) {
	x := fullOffsetIndex(b)
	last, _, _ := x.LastEntry()
	targets := randomTargets(testBase, last+16)
	mask := len(targets) - 1
	var sink uint32
	for i := 0; b.Loop(); i++ {
		_, pos := x.Lookup(targets[i&mask])
		sink += pos
	}
	_ = sink
	b.ReportMetric(float64(x.Entries()), "entries")
}

func BenchmarkOffsetIndexAppend(b *testing.B) {
	x, err := OpenOffsetIndex(tempPath(b, kinds[0]), testBase, DefaultMaxBytes, true)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	next := int64(testBase)
	for b.Loop() {
		if err := x.Append(next, uint32(next)); err != nil {
			if !errors.Is(err, ErrFull) {
				b.Fatal(err)
			}
			b.StopTimer()
			x.Reset()
			next = testBase
			b.StartTimer()
			continue
		}
		next++
	}
}

func BenchmarkTimeIndexLookup(b *testing.B) {
	x, err := OpenTimeIndex(tempPath(b, kinds[1]), testBase, DefaultMaxBytes, true)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	for i := 0; ; i++ {
		if _, err := x.MaybeAppend(1_700_000_000_000+int64(i)*10, testBase+16*int64(i)); err != nil {
			if errors.Is(err, ErrFull) {
				break
			}
			b.Fatal(err)
		}
	}
	lastTs, _, _ := x.LastEntry()
	targets := randomTargets(1_700_000_000_000, lastTs+10)
	mask := len(targets) - 1
	var sink int64
	for i := 0; b.Loop(); i++ {
		_, off, _ := x.Lookup(targets[i&mask])
		sink += off
	}
	_ = sink
	b.ReportMetric(float64(x.Entries()), "entries")
}
