package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
)

func newOffsetIndex(t testing.TB, maxBytes int, n int) *OffsetIndex {
	t.Helper()
	x, err := OpenOffsetIndex(tempPath(t, kinds[0]), testBase, maxBytes, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	for i := range n {
		if err := x.Append(testOffset(i), testPosition(i)); err != nil {
			t.Fatal(err)
		}
	}
	return x
}

func TestOffsetIndexLookup(t *testing.T) {
	const n = 5 // offsets 1010, 1020, ..., 1050; positions 100, ..., 500
	tests := []struct {
		name    string
		entries int
		target  int64
		offset  int64
		pos     uint32
	}{
		{"empty", 0, 1020, testBase, 0},
		{"empty at base", 0, testBase, testBase, 0},
		{"before base", n, 10, testBase, 0},
		{"min int64", n, math.MinInt64, testBase, 0},
		{"at base before first entry", n, testBase, testBase, 0},
		{"just before first entry", n, 1009, testBase, 0},
		{"at first entry", n, 1010, 1010, 100},
		{"between first and second", n, 1015, 1010, 100},
		{"just before an entry", n, 1029, 1020, 200},
		{"at an entry", n, 1030, 1030, 300},
		{"at last entry", n, 1050, 1050, 500},
		{"after last entry", n, 1051, 1050, 500},
		{"far after", n, math.MaxInt64, 1050, 500},
		{"single entry before", 1, 1000, testBase, 0},
		{"single entry at", 1, 1010, 1010, 100},
		{"single entry after", 1, 2000, 1010, 100},
	}
	for _, sealed := range []bool{false, true} {
		for _, tc := range tests {
			x := newOffsetIndex(t, 64, tc.entries)
			if sealed {
				if err := x.Seal(); err != nil {
					t.Fatal(err)
				}
			}
			off, pos := x.Lookup(tc.target)
			if off != tc.offset || pos != tc.pos {
				t.Errorf("sealed=%v %s: Lookup(%d) = (%d, %d), want (%d, %d)", sealed, tc.name, tc.target, off, pos, tc.offset, tc.pos)
			}
		}
	}
}

// Lookups agree with a linear scan on an index large enough for the warm
// section to matter.
func TestOffsetIndexLookupLarge(t *testing.T) {
	const n = 10_000
	x := newOffsetIndex(t, n*OffsetEntrySize, n)
	linear := func(target int64) (int64, uint32) {
		off, pos := int64(testBase), uint32(0)
		for i := range n {
			if o, p := x.Entry(i); o <= target {
				off, pos = o, p
			}
		}
		return off, pos
	}
	r := rand.New(rand.NewPCG(1, 2))
	targets := []int64{testBase, testOffset(0), testOffset(n - 1), testOffset(n-1) + 1, testOffset(n - 1 - warmBytes/OffsetEntrySize)}
	for range 200 {
		targets = append(targets, testBase+r.Int64N(10*n+20))
	}
	for _, target := range targets {
		off, pos := x.Lookup(target)
		wo, wp := linear(target)
		if off != wo || pos != wp {
			t.Fatalf("Lookup(%d) = (%d, %d), want (%d, %d)", target, off, pos, wo, wp)
		}
	}
}

func TestOffsetIndexAppendErrors(t *testing.T) {
	tests := []struct {
		name   string
		offset int64
		want   error
	}{
		{"equal to last", testOffset(2), ErrOutOfOrder},
		{"below last", testOffset(1), ErrOutOfOrder},
		{"below base", testBase - 1, ErrOutOfOrder},
		{"relative offset overflow", testBase + 1<<32, ErrFull},
		{"largest relative offset", testBase + 1<<32 - 1, nil},
		{"next", testOffset(3), nil},
	}
	for _, tc := range tests {
		x := newOffsetIndex(t, 64, 3)
		err := x.Append(tc.offset, 1000)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: Append(%d) = %v, want %v", tc.name, tc.offset, err, tc.want)
		}
		if tc.want != nil && x.Entries() != 3 {
			t.Errorf("%s: failed append left %d entries", tc.name, x.Entries())
		}
	}
	// An empty index takes the base offset itself.
	x := newOffsetIndex(t, 64, 0)
	if err := x.Append(testBase, 0); err != nil {
		t.Fatal(err)
	}
	if off, pos, ok := x.LastEntry(); off != testBase || pos != 0 || !ok {
		t.Fatalf("LastEntry = %d, %d, %v", off, pos, ok)
	}
	// Positions may repeat (non-decreasing).
	if err := x.Append(testBase+1, 0); err != nil {
		t.Fatal(err)
	}
	if err := x.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestOffsetIndexLastEntry(t *testing.T) {
	x := newOffsetIndex(t, 64, 0)
	if off, pos, ok := x.LastEntry(); off != testBase || pos != 0 || ok {
		t.Fatalf("empty LastEntry = %d, %d, %v", off, pos, ok)
	}
	for i := range 3 {
		if err := x.Append(testOffset(i), testPosition(i)); err != nil {
			t.Fatal(err)
		}
		if off, pos, ok := x.LastEntry(); off != testOffset(i) || pos != testPosition(i) || !ok {
			t.Fatalf("LastEntry = %d, %d, %v", off, pos, ok)
		}
	}
}

func TestOffsetIndexEntryOutOfRange(t *testing.T) {
	x := newOffsetIndex(t, 64, 2)
	for _, i := range []int{-1, 2, 8} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Entry(%d) did not panic", i)
				}
			}()
			x.Entry(i)
		}()
	}
}

func offsetFile(entries ...[2]uint32) []byte {
	b := make([]byte, 0, len(entries)*OffsetEntrySize)
	for _, e := range entries {
		b = binary.BigEndian.AppendUint32(b, e[0])
		b = binary.BigEndian.AppendUint32(b, e[1])
	}
	return b
}

func TestOffsetIndexCheck(t *testing.T) {
	tests := []struct {
		name    string
		data    []byte
		base    int64
		corrupt bool
	}{
		{"empty", nil, testBase, false},
		{"one zero entry", offsetFile([2]uint32{0, 0}), testBase, false},
		{"valid", offsetFile([2]uint32{0, 0}, [2]uint32{5, 100}, [2]uint32{9, 100}, [2]uint32{20, 4000}), testBase, false},
		{"offsets decreasing", offsetFile([2]uint32{5, 100}, [2]uint32{3, 200}), testBase, true},
		{"offsets equal", offsetFile([2]uint32{5, 100}, [2]uint32{5, 200}), testBase, true},
		{"positions decreasing", offsetFile([2]uint32{5, 300}, [2]uint32{6, 200}), testBase, true},
		{"garbage", []byte("\xde\xad\xbe\xef\xde\xad\xbe\xef\x00\x00\x00\x01\x00\x00\x00\x01"), testBase, true},
		{"offset overflows", offsetFile([2]uint32{math.MaxUint32, 0}), math.MaxInt64 - 10, true},
	}
	for _, tc := range tests {
		for _, writable := range []bool{false, true} {
			path := tempPath(t, kinds[0])
			if err := os.WriteFile(path, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			x, err := OpenOffsetIndex(path, tc.base, 64, writable)
			if err != nil {
				t.Fatalf("%s: open: %v", tc.name, err)
			}
			err = x.Check()
			if tc.corrupt != (err != nil) || (err != nil && (!errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path))) {
				t.Errorf("%s writable=%v: Check = %v, want corrupt=%v naming the file", tc.name, writable, err, tc.corrupt)
			}
			// Lookups on a corrupt index do not panic.
			x.Lookup(testBase + 4)
			x.TruncateTo(testBase + 4)
			if err := x.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// One goroutine appends while others look up; run with -race.
func TestOffsetIndexConcurrentReaders(t *testing.T) {
	const n = 20_000
	x := newOffsetIndex(t, n*OffsetEntrySize, 0)
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			for {
				select {
				case <-done:
					return
				default:
				}
				seen := x.Entries()
				if seen > 0 {
					// Every published entry is whole.
					i := rng.IntN(seen)
					if off, pos := x.Entry(i); off != testOffset(i) || pos != testPosition(i) {
						errs <- fmt.Errorf("Entry(%d) = (%d, %d) with %d published", i, off, pos, seen)
						return
					}
					if off, _, ok := x.LastEntry(); !ok || off < testOffset(seen-1) {
						errs <- fmt.Errorf("LastEntry = %d, %v with %d published", off, ok, seen)
						return
					}
				}
				target := testBase + rng.Int64N(10*int64(seen+1)+10)
				off, pos := x.Lookup(target)
				if off > target || (off != testBase && int64(pos) != (off-testBase)*10) {
					errs <- fmt.Errorf("Lookup(%d) = (%d, %d)", target, off, pos)
					return
				}
				if seen > 0 && target >= testOffset(seen-1) && off < testOffset(seen-1) {
					errs <- fmt.Errorf("Lookup(%d) = %d misses published entry %d", target, off, testOffset(seen-1))
					return
				}
			}
		}()
	}
	for i := range n {
		if err := x.Append(testOffset(i), testPosition(i)); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	kinds[0].checkEntries(t, x, n)
}
