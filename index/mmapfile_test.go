package index

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The tests in this file exercise the storage shared by both index kinds,
// once per kind.

const testBase = 1000

// Canonical test entries: entry i of a test index.
func testOffset(i int) int64    { return testBase + 10*int64(i+1) }
func testPosition(i int) uint32 { return 100 * uint32(i+1) }
func testTimestamp(i int) int64 { return 50_000 + 7*int64(i) }

// index is what the generic tests need of either kind.
type index interface {
	Entries() int
	IsFull() bool
	BaseOffset() int64
	SizeBytes() int64
	Path() string
	Reset()
	Seal() error
	SealNoSync() error
	Unseal() error
	Sync() error
	SyncFile() error
	Close() error
	Delete() error
	Check() error
	TruncateTo(int64)
}

// pair is one decoded entry of either kind.
type pair struct{ A, B int64 }

type kind struct {
	name      string
	entrySize int
	open      func(path string, base int64, maxBytes int, writable bool) (index, error)
	add       func(x index, i int) error // appends canonical entry i
	dump      func(x index) []pair
	want      func(n int) []pair // the first n canonical entries
}

var kinds = []kind{
	{
		name:      "offset",
		entrySize: OffsetEntrySize,
		open: func(path string, base int64, maxBytes int, writable bool) (index, error) {
			x, err := OpenOffsetIndex(path, base, maxBytes, writable)
			if err != nil {
				return nil, err
			}
			return x, nil
		},
		add: func(x index, i int) error { return x.(*OffsetIndex).Append(testOffset(i), testPosition(i)) },
		dump: func(x index) []pair {
			o := x.(*OffsetIndex)
			out := []pair{}
			for i := range o.Entries() {
				off, pos := o.Entry(i)
				out = append(out, pair{off, int64(pos)})
			}
			return out
		},
		want: func(n int) []pair {
			out := []pair{}
			for i := range n {
				out = append(out, pair{testOffset(i), int64(testPosition(i))})
			}
			return out
		},
	},
	{
		name:      "time",
		entrySize: TimeEntrySize,
		open: func(path string, base int64, maxBytes int, writable bool) (index, error) {
			x, err := OpenTimeIndex(path, base, maxBytes, writable)
			if err != nil {
				return nil, err
			}
			return x, nil
		},
		add: func(x index, i int) error {
			ok, err := x.(*TimeIndex).MaybeAppend(testTimestamp(i), testOffset(i))
			if err == nil && !ok {
				err = errors.New("entry skipped")
			}
			return err
		},
		dump: func(x index) []pair {
			ti := x.(*TimeIndex)
			out := []pair{}
			for i := range ti.Entries() {
				ts, off := ti.Entry(i)
				out = append(out, pair{ts, off})
			}
			return out
		},
		want: func(n int) []pair {
			out := []pair{}
			for i := range n {
				out = append(out, pair{testTimestamp(i), testOffset(i)})
			}
			return out
		},
	},
}

func forKinds(t *testing.T, f func(t *testing.T, k kind)) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) { f(t, k) })
	}
}

func (k kind) mustOpen(t testing.TB, path string, maxBytes int, writable bool) index {
	t.Helper()
	x, err := k.open(path, testBase, maxBytes, writable)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

func (k kind) fill(t testing.TB, x index, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := k.add(x, i); err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
	}
}

func (k kind) checkEntries(t testing.TB, x index, n int) {
	t.Helper()
	if got, want := k.dump(x), k.want(n); !reflect.DeepEqual(got, want) {
		t.Fatalf("entries:\n got %v\nwant %v", got, want)
	}
	if x.Entries() != n || x.SizeBytes() != int64(n*k.entrySize) {
		t.Fatalf("Entries %d SizeBytes %d, want %d, %d", x.Entries(), x.SizeBytes(), n, n*k.entrySize)
	}
	if err := x.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func tempPath(t testing.TB, k kind) string {
	return filepath.Join(t.TempDir(), "00000000000000001000."+k.name+"index")
}

func TestOpenNew(t *testing.T) {
	forKinds(t, func(t *testing.T, k kind) {
		tests := []struct {
			name     string
			maxBytes int
			wantSize int64
		}{
			{"exact", 8 * k.entrySize, int64(8 * k.entrySize)},
			{"rounded down", 8*k.entrySize + k.entrySize - 1, int64(8 * k.entrySize)},
			{"one entry", k.entrySize, int64(k.entrySize)},
			{"default", 0, DefaultMaxBytes / int64(k.entrySize) * int64(k.entrySize)},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				path := tempPath(t, k)
				x := k.mustOpen(t, path, tc.maxBytes, true)
				if got := fileSize(t, path); got != tc.wantSize {
					t.Errorf("preallocated size %d, want %d", got, tc.wantSize)
				}
				if x.Entries() != 0 || x.IsFull() || x.BaseOffset() != testBase || x.Path() != path {
					t.Errorf("Entries %d IsFull %v BaseOffset %d Path %q", x.Entries(), x.IsFull(), x.BaseOffset(), x.Path())
				}
				if err := x.Close(); err != nil {
					t.Fatal(err)
				}
				if got := fileSize(t, path); got != 0 {
					t.Errorf("size after Close %d, want 0", got)
				}
			})
		}
		if _, err := k.open(tempPath(t, k), testBase, k.entrySize-1, true); err == nil {
			t.Error("maxBytes below one entry: no error")
		}
		if _, err := k.open(tempPath(t, k), -1, 0, true); err == nil {
			t.Error("negative base offset: no error")
		}
	})
}

func TestFull(t *testing.T) {
	forKinds(t, func(t *testing.T, k kind) {
		const maxBytes = 64
		capacity := maxBytes / k.entrySize
		x := k.mustOpen(t, tempPath(t, k), maxBytes, true)
		for i := range capacity {
			if x.IsFull() {
				t.Fatalf("full after %d entries", i)
			}
			if err := k.add(x, i); err != nil {
				t.Fatalf("add %d: %v", i, err)
			}
		}
		if !x.IsFull() {
			t.Fatal("not full")
		}
		if err := k.add(x, capacity); !errors.Is(err, ErrFull) {
			t.Fatalf("add to full index: %v, want ErrFull", err)
		}
		k.checkEntries(t, x, capacity)
	})
}

func TestSeal(t *testing.T) {
	forKinds(t, func(t *testing.T, k kind) {
		for _, n := range []int{0, 1, 5} {
			testSeal(t, k, n, index.Seal)
		}
	})
}

// TestSealNoSync: sealed without a sync, an index is what Seal makes of
// it, and SyncFile then makes the entries durable; a reopen reads them
// from the file.
func TestSealNoSync(t *testing.T) {
	forKinds(t, func(t *testing.T, k kind) {
		for _, n := range []int{0, 1, 5} {
			path := testSeal(t, k, n, func(x index) error {
				if err := x.SealNoSync(); err != nil {
					return err
				}
				return x.SyncFile()
			})
			y := k.mustOpen(t, path, 64*k.entrySize, false)
			k.checkEntries(t, y, n)
			if err := y.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// testSeal fills a new index with n entries, seals it with seal, checks
// it, and returns its path once closed.
func testSeal(t *testing.T, k kind, n int, seal func(index) error) string {
	t.Helper()
	path := tempPath(t, k)
	x := k.mustOpen(t, path, 64*k.entrySize, true)
	k.fill(t, x, 0, n)
	if err := seal(x); err != nil {
		t.Fatal(err)
	}
	if got := fileSize(t, path); got != int64(n*k.entrySize) {
		t.Errorf("%d entries: sealed size %d, want %d", n, got, n*k.entrySize)
	}
	if err := k.add(x, n); !errors.Is(err, ErrReadOnly) {
		t.Errorf("%d entries: add to sealed: %v, want ErrReadOnly", n, err)
	}
	if !x.IsFull() {
		t.Errorf("%d entries: sealed index not full", n)
	}
	k.checkEntries(t, x, n)
	// Sealing again is harmless.
	if err := x.Seal(); err != nil {
		t.Fatal(err)
	}
	k.checkEntries(t, x, n)
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if got := fileSize(t, path); got != int64(n*k.entrySize) {
		t.Errorf("%d entries: size after Close %d", n, got)
	}
	return path
}

func TestReopen(t *testing.T) {
	forKinds(t, func(t *testing.T, k kind) {
		tests := []struct {
			name     string
			n        int
			writable bool
		}{
			{"empty writable", 0, true},
			{"empty read-only", 0, false},
			{"writable", 20, true},
			{"read-only", 20, false},
			{"full writable", 64, true},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				path := tempPath(t, k)
				maxBytes := 64 * k.entrySize
				x := k.mustOpen(t, path, maxBytes, true)
				k.fill(t, x, 0, tc.n)
				if err := x.Close(); err != nil {
					t.Fatal(err)
				}
				if got := fileSize(t, path); got != int64(tc.n*k.entrySize) {
					t.Fatalf("size after Close %d, want %d", got, tc.n*k.entrySize)
				}
				y := k.mustOpen(t, path, maxBytes, tc.writable)
				k.checkEntries(t, y, tc.n)
				err := k.add(y, tc.n)
				switch {
				case !tc.writable:
					if !errors.Is(err, ErrReadOnly) {
						t.Fatalf("add to read-only: %v", err)
					}
					if got := fileSize(t, path); got != int64(tc.n*k.entrySize) {
						t.Fatalf("read-only open changed the size to %d", got)
					}
				case tc.n == 64:
					if !errors.Is(err, ErrFull) {
						t.Fatalf("add to full: %v", err)
					}
				default:
					if err != nil {
						t.Fatal(err)
					}
					k.checkEntries(t, y, tc.n+1)
				}
			})
		}
	})
}

func TestUnseal(t *testing.T) {
	forKinds(t, func(t *testing.T, k kind) {
		path := tempPath(t, k)
		maxBytes := 16 * k.entrySize
		x := k.mustOpen(t, path, maxBytes, true)
		k.fill(t, x, 0, 6)
		if err := x.Seal(); err != nil {
			t.Fatal(err)
		}
		if err := x.Unseal(); err != nil {
			t.Fatal(err)
		}
		if got := fileSize(t, path); got != int64(maxBytes) {
			t.Fatalf("unsealed size %d, want %d", got, maxBytes)
		}
		if err := x.Unseal(); err != nil { // no-op when writable
			t.Fatal(err)
		}
		k.fill(t, x, 6, 16)
		k.checkEntries(t, x, 16)
		if err := k.add(x, 16); !errors.Is(err, ErrFull) {
			t.Fatalf("add to full: %v", err)
		}
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
		// A read-only open unseals too.
		y := k.mustOpen(t, path, 32*k.entrySize, false)
		if err := y.Unseal(); err != nil {
			t.Fatal(err)
		}
		k.fill(t, y, 16, 32)
		k.checkEntries(t, y, 32)
		if err := y.Close(); err != nil {
			t.Fatal(err)
		}
		z := k.mustOpen(t, path, 0, false)
		k.checkEntries(t, z, 32)
	})
}

func TestTruncateTo(t *testing.T) {
	forKinds(t, func(t *testing.T, k kind) {
		const n = 10
		tests := []struct {
			name   string
			offset int64
			keep   int
		}{
			{"below base", testBase - 5, 0},
			{"at base", testBase, 0},
			{"at first entry", testOffset(0), 0},
			{"just after first entry", testOffset(0) + 1, 1},
			{"between entries", testOffset(4) + 5, 5},
			{"at an entry", testOffset(6), 6},
			{"at last entry", testOffset(n - 1), n - 1},
			{"after last entry", testOffset(n-1) + 1, n},
			{"far after", 1 << 62, n},
		}
		for _, sealed := range []bool{false, true} {
			for _, tc := range tests {
				name := tc.name
				if sealed {
					name = "sealed " + name
				}
				t.Run(name, func(t *testing.T) {
					path := tempPath(t, k)
					x := k.mustOpen(t, path, 32*k.entrySize, true)
					k.fill(t, x, 0, n)
					if sealed {
						if err := x.Seal(); err != nil {
							t.Fatal(err)
						}
					}
					x.TruncateTo(tc.offset)
					k.checkEntries(t, x, tc.keep)
					if sealed {
						if err := x.Unseal(); err != nil {
							t.Fatal(err)
						}
					}
					// The dropped entries can be appended again.
					k.fill(t, x, tc.keep, n)
					k.checkEntries(t, x, n)
					x.TruncateTo(tc.offset)
					if sealed {
						if err := x.Seal(); err != nil {
							t.Fatal(err)
						}
						if got := fileSize(t, path); got != int64(tc.keep*k.entrySize) {
							t.Fatalf("sealed size %d, want %d", got, tc.keep*k.entrySize)
						}
					}
					if err := x.Close(); err != nil {
						t.Fatal(err)
					}
					if got := fileSize(t, path); got != int64(tc.keep*k.entrySize) {
						t.Fatalf("size after Close %d, want %d", got, tc.keep*k.entrySize)
					}
					y := k.mustOpen(t, path, 32*k.entrySize, !sealed)
					k.checkEntries(t, y, tc.keep)
				})
			}
		}
	})
}

// A sealed index truncated in memory is trimmed on disk by Close.
func TestTruncateSealedThenClose(t *testing.T) {
	forKinds(t, func(t *testing.T, k kind) {
		path := tempPath(t, k)
		x := k.mustOpen(t, path, 32*k.entrySize, true)
		k.fill(t, x, 0, 8)
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
		y := k.mustOpen(t, path, 32*k.entrySize, false)
		y.TruncateTo(testOffset(3))
		k.checkEntries(t, y, 3)
		if err := y.Close(); err != nil {
			t.Fatal(err)
		}
		if got := fileSize(t, path); got != int64(3*k.entrySize) {
			t.Fatalf("size %d, want %d", got, 3*k.entrySize)
		}
	})
}

func TestReset(t *testing.T) {
	forKinds(t, func(t *testing.T, k kind) {
		path := tempPath(t, k)
		x := k.mustOpen(t, path, 32*k.entrySize, true)
		k.fill(t, x, 0, 10)
		x.Reset()
		k.checkEntries(t, x, 0)
		k.fill(t, x, 0, 3)
		k.checkEntries(t, x, 3)
		if err := x.Sync(); err != nil {
			t.Fatal(err)
		}
		// The slots past the entries were zeroed: nothing stale survives.
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range raw[3*k.entrySize:] {
			if b != 0 {
				t.Fatalf("byte %d after the entries is %#x", 3*k.entrySize+i, b)
			}
		}
		if err := x.Seal(); err != nil {
			t.Fatal(err)
		}
		x.Reset()
		if err := x.Seal(); err != nil {
			t.Fatal(err)
		}
		if got := fileSize(t, path); got != 0 {
			t.Fatalf("size %d after Reset and Seal", got)
		}
		k.checkEntries(t, x, 0)
	})
}

// After a crash the file of a writable index is still preallocated: the
// zero tail is not taken for entries.
func TestCrashRecovery(t *testing.T) {
	forKinds(t, func(t *testing.T, k kind) {
		for _, n := range []int{0, 1, 7, 16} {
			path := tempPath(t, k)
			maxBytes := 16 * k.entrySize
			x := k.mustOpen(t, path, maxBytes, true)
			k.fill(t, x, 0, n)
			if err := x.Sync(); err != nil {
				t.Fatal(err)
			}
			// The file as a crash would leave it: preallocated, not trimmed.
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(raw) != maxBytes {
				t.Fatalf("file of %d bytes, want %d", len(raw), maxBytes)
			}
			for _, writable := range []bool{true, false} {
				crashed := filepath.Join(t.TempDir(), "crashed")
				if err := os.WriteFile(crashed, raw, 0o644); err != nil {
					t.Fatal(err)
				}
				y := k.mustOpen(t, crashed, maxBytes, writable)
				k.checkEntries(t, y, n)
				if writable && n < 16 {
					k.fill(t, y, n, n+1)
				}
			}
		}
	})
}

func TestBadSize(t *testing.T) {
	forKinds(t, func(t *testing.T, k kind) {
		for _, writable := range []bool{false, true} {
			for _, size := range []int{1, k.entrySize - 1, 3*k.entrySize + 1} {
				path := tempPath(t, k)
				if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
					t.Fatal(err)
				}
				_, err := k.open(path, testBase, 0, writable)
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
					t.Errorf("writable=%v size %d: %v, want ErrCorrupt naming the file", writable, size, err)
				}
				if got := fileSize(t, path); got != int64(size) {
					t.Errorf("failed open changed the size to %d", got)
				}
			}
		}
	})
}

func TestCloseAndDelete(t *testing.T) {
	forKinds(t, func(t *testing.T, k kind) {
		path := tempPath(t, k)
		x := k.mustOpen(t, path, 0, true)
		k.fill(t, x, 0, 3)
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
		if err := x.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		for name, err := range map[string]error{
			"Seal": x.Seal(), "Unseal": x.Unseal(), "Sync": x.Sync(), "add": k.add(x, 3),
		} {
			if !errors.Is(err, fs.ErrClosed) {
				t.Errorf("%s after Close: %v, want fs.ErrClosed", name, err)
			}
		}
		if x.Entries() != 0 || !x.IsFull() {
			t.Errorf("closed index: Entries %d IsFull %v", x.Entries(), x.IsFull())
		}
		x.TruncateTo(0)
		x.Reset()

		y := k.mustOpen(t, path, 0, true)
		k.checkEntries(t, y, 3)
		if err := y.Delete(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("file after Delete: %v", err)
		}
		if err := y.Delete(); err != nil {
			t.Fatalf("second Delete: %v", err)
		}
		if err := x.Delete(); err != nil { // closed, file already gone
			t.Fatalf("Delete after Close: %v", err)
		}
	})
}

// TestNoDescriptorAtRest: an open index, writable or sealed, holds no file
// descriptor between operations (its mapping outlives the descriptor), so
// a node of thousands of segments does not run out of them; appends,
// lookups, a seal and an unseal go on working through the mapping.
func TestNoDescriptorAtRest(t *testing.T) {
	if _, err := os.ReadDir("/proc/self/fd"); err != nil {
		t.Skip("no /proc/self/fd here:", err)
	}
	forKinds(t, func(t *testing.T, k kind) {
		before := openDescriptors(t)
		const n = 40
		xs := make([]index, n)
		for i := range xs {
			xs[i] = k.mustOpen(t, filepath.Join(t.TempDir(), "x"), 64*k.entrySize, true)
			k.fill(t, xs[i], 0, 3)
		}
		if err := xs[0].Seal(); err != nil {
			t.Fatal(err)
		}
		if err := xs[1].Unseal(); err != nil {
			t.Fatal(err)
		}
		if err := xs[2].Sync(); err != nil {
			t.Fatal(err)
		}
		if got := openDescriptors(t) - before; got >= n/2 {
			t.Errorf("%d open indexes hold %d more descriptors", n, got)
		}
		for i, x := range xs {
			k.checkEntries(t, x, 3)
			if err := x.Close(); err != nil {
				t.Fatalf("close %d: %v", i, err)
			}
		}
	})
}

func openDescriptors(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
