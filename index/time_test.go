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

func newTimeIndex(t testing.TB, maxBytes int, entries ...pair) *TimeIndex {
	t.Helper()
	x, err := OpenTimeIndex(tempPath(t, kinds[1]), testBase, maxBytes, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	for _, e := range entries {
		if ok, err := x.MaybeAppend(e.A, e.B); err != nil || !ok {
			t.Fatalf("MaybeAppend(%d, %d) = %v, %v", e.A, e.B, ok, err)
		}
	}
	return x
}

func TestTimeIndexMaybeAppend(t *testing.T) {
	type step struct {
		ts, off int64
		added   bool
		err     error
	}
	tests := []struct {
		name  string
		steps []step
		want  []pair
	}{
		{"increasing", []step{{100, 1010, true, nil}, {200, 1020, true, nil}, {300, 1030, true, nil}},
			[]pair{{100, 1010}, {200, 1020}, {300, 1030}}},
		{"first entry at base", []step{{5, testBase, true, nil}}, []pair{{5, testBase}}},
		{"first entry negative timestamp", []step{{-1, 1010, true, nil}, {0, 1020, true, nil}}, []pair{{-1, 1010}, {0, 1020}}},
		{"equal timestamp skipped", []step{{100, 1010, true, nil}, {100, 1020, false, nil}, {101, 1030, true, nil}},
			[]pair{{100, 1010}, {101, 1030}}},
		{"clock going backwards skipped", []step{{100, 1010, true, nil}, {50, 1020, false, nil}, {99, 1030, false, nil}, {150, 1040, true, nil}},
			[]pair{{100, 1010}, {150, 1040}}},
		{"same offset larger timestamp skipped", []step{{100, 1010, true, nil}, {200, 1010, false, nil}},
			[]pair{{100, 1010}}},
		{"offset going backwards", []step{{100, 1020, true, nil}, {200, 1010, false, ErrOutOfOrder}},
			[]pair{{100, 1020}}},
		{"offset going backwards with old timestamp", []step{{100, 1020, true, nil}, {50, 1010, false, ErrOutOfOrder}},
			[]pair{{100, 1020}}},
		{"below base", []step{{100, testBase - 1, false, ErrOutOfOrder}}, []pair{}},
		{"relative offset overflow", []step{{100, testBase + 1<<32, false, ErrFull}}, []pair{}},
		{"full", []step{{1, 1001, true, nil}, {2, 1002, true, nil}, {3, 1003, true, nil}, {4, 1004, true, nil}, {5, 1005, true, nil}, {5, 1006, false, nil}, {6, 1006, false, ErrFull}},
			[]pair{{1, 1001}, {2, 1002}, {3, 1003}, {4, 1004}, {5, 1005}}},
	}
	for _, tc := range tests {
		x := newTimeIndex(t, 5*TimeEntrySize+3)
		for i, s := range tc.steps {
			added, err := x.MaybeAppend(s.ts, s.off)
			if added != s.added || !errors.Is(err, s.err) || (s.err == nil) != (err == nil) {
				t.Errorf("%s: step %d MaybeAppend(%d, %d) = %v, %v; want %v, %v", tc.name, i, s.ts, s.off, added, err, s.added, s.err)
			}
		}
		if got := kinds[1].dump(x); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: entries %v, want %v", tc.name, got, tc.want)
		}
		if err := x.Check(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	// Sealed: ErrReadOnly, even for an entry that would be skipped.
	x := newTimeIndex(t, 64, pair{100, 1010})
	if err := x.Seal(); err != nil {
		t.Fatal(err)
	}
	for _, e := range []pair{{200, 1020}, {50, 1020}} {
		if added, err := x.MaybeAppend(e.A, e.B); added || !errors.Is(err, ErrReadOnly) {
			t.Errorf("sealed MaybeAppend(%d, %d) = %v, %v", e.A, e.B, added, err)
		}
	}
}

func TestTimeIndexLookup(t *testing.T) {
	entries := []pair{{100, 1010}, {200, 1020}, {300, 1035}}
	tests := []struct {
		name    string
		entries []pair
		target  int64
		ts, off int64
		ok      bool
	}{
		{"empty", nil, 150, -1, testBase, false},
		{"min int64", entries, math.MinInt64, -1, testBase, false},
		{"before first", entries, 50, -1, testBase, false},
		{"at first", entries, 100, -1, testBase, false},
		{"just after first", entries, 101, 100, 1010, true},
		{"between", entries, 150, 100, 1010, true},
		{"at an entry", entries, 200, 100, 1010, true},
		{"just after an entry", entries, 201, 200, 1020, true},
		{"at last", entries, 300, 200, 1020, true},
		{"after last", entries, 301, 300, 1035, true},
		{"max int64", entries, math.MaxInt64, 300, 1035, true},
		{"single entry after", entries[:1], 1000, 100, 1010, true},
		{"single entry at", entries[:1], 100, -1, testBase, false},
	}
	for _, sealed := range []bool{false, true} {
		for _, tc := range tests {
			x := newTimeIndex(t, 120, tc.entries...)
			if sealed {
				if err := x.Seal(); err != nil {
					t.Fatal(err)
				}
			}
			ts, off, ok := x.Lookup(tc.target)
			if ts != tc.ts || off != tc.off || ok != tc.ok {
				t.Errorf("sealed=%v %s: Lookup(%d) = (%d, %d, %v), want (%d, %d, %v)", sealed, tc.name, tc.target, ts, off, ok, tc.ts, tc.off, tc.ok)
			}
		}
	}
}

func TestTimeIndexLookupLarge(t *testing.T) {
	const n = 5_000
	x := newTimeIndex(t, n*TimeEntrySize)
	kinds[1].fill(t, x, 0, n)
	r := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		target := testTimestamp(0) - 5 + r.Int64N(7*n+10)
		wts, woff, wok := int64(-1), int64(testBase), false
		for i := range n {
			if ts, off := x.Entry(i); ts < target {
				wts, woff, wok = ts, off, true
			}
		}
		ts, off, ok := x.Lookup(target)
		if ts != wts || off != woff || ok != wok {
			t.Fatalf("Lookup(%d) = (%d, %d, %v), want (%d, %d, %v)", target, ts, off, ok, wts, woff, wok)
		}
	}
}

func TestTimeIndexLastEntry(t *testing.T) {
	x := newTimeIndex(t, 64)
	if ts, off, ok := x.LastEntry(); ts != -1 || off != testBase || ok {
		t.Fatalf("empty LastEntry = %d, %d, %v", ts, off, ok)
	}
	x = newTimeIndex(t, 64, pair{7, 1001}, pair{9, 1004})
	if ts, off, ok := x.LastEntry(); ts != 9 || off != 1004 || !ok {
		t.Fatalf("LastEntry = %d, %d, %v", ts, off, ok)
	}
}

func timeFile(entries ...pair) []byte {
	b := make([]byte, 0, len(entries)*TimeEntrySize)
	for _, e := range entries {
		b = binary.BigEndian.AppendUint64(b, uint64(e.A))
		b = binary.BigEndian.AppendUint32(b, uint32(e.B))
	}
	return b
}

func TestTimeIndexCheck(t *testing.T) {
	tests := []struct {
		name    string
		data    []byte
		base    int64
		corrupt bool
	}{
		{"empty", nil, testBase, false},
		{"valid", timeFile(pair{10, 0}, pair{20, 5}, pair{30, 9}), testBase, false},
		{"equal timestamps and offsets", timeFile(pair{10, 3}, pair{10, 3}), testBase, false},
		{"timestamps decreasing", timeFile(pair{20, 1}, pair{10, 2}), testBase, true},
		{"offsets decreasing", timeFile(pair{10, 5}, pair{20, 4}), testBase, true},
		{"garbage", []byte("\x7f\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x09\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x01"), testBase, true},
		{"offset overflows", timeFile(pair{1, math.MaxUint32}), math.MaxInt64 - 10, true},
	}
	for _, tc := range tests {
		for _, writable := range []bool{false, true} {
			path := tempPath(t, kinds[1])
			if err := os.WriteFile(path, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			x, err := OpenTimeIndex(path, tc.base, 120, writable)
			if err != nil {
				t.Fatalf("%s: open: %v", tc.name, err)
			}
			err = x.Check()
			if tc.corrupt != (err != nil) || (err != nil && (!errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path))) {
				t.Errorf("%s writable=%v: Check = %v, want corrupt=%v naming the file", tc.name, writable, err, tc.corrupt)
			}
			x.Lookup(15)
			x.TruncateTo(testBase + 4)
			if err := x.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// One goroutine appends while others look up; run with -race.
func TestTimeIndexConcurrentReaders(t *testing.T) {
	const n = 20_000
	x := newTimeIndex(t, n*TimeEntrySize)
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 9))
			for {
				select {
				case <-done:
					return
				default:
				}
				seen := x.Entries()
				if seen > 0 {
					i := rng.IntN(seen)
					if ts, off := x.Entry(i); ts != testTimestamp(i) || off != testOffset(i) {
						errs <- fmt.Errorf("Entry(%d) = (%d, %d) with %d published", i, ts, off, seen)
						return
					}
				}
				target := testTimestamp(0) + rng.Int64N(7*int64(seen+1))
				ts, off, ok := x.Lookup(target)
				if ok && (ts >= target || off != testOffset(int(ts-testTimestamp(0))/7)) {
					errs <- fmt.Errorf("Lookup(%d) = (%d, %d, %v)", target, ts, off, ok)
					return
				}
				if seen > 0 && target > testTimestamp(seen-1) && (!ok || ts < testTimestamp(seen-1)) {
					errs <- fmt.Errorf("Lookup(%d) = (%d, %v) misses published entry %d", target, ts, ok, testTimestamp(seen-1))
					return
				}
			}
		}()
	}
	kinds[1].fill(t, x, 0, n)
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	kinds[1].checkEntries(t, x, n)
}
