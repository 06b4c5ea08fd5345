package index

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// Tests of OpenOffsetIndexReadOnly and OpenTimeIndexReadOnly, once per kind.

func (k kind) openReadOnly(path string) (index, error) {
	switch k.entrySize {
	case OffsetEntrySize:
		x, err := OpenOffsetIndexReadOnly(path, testBase)
		if err != nil {
			return nil, err
		}
		return x, nil
	default:
		x, err := OpenTimeIndexReadOnly(path, testBase)
		if err != nil {
			return nil, err
		}
		return x, nil
	}
}

func (k kind) mustOpenReadOnly(t testing.TB, path string) index {
	t.Helper()
	x, err := k.openReadOnly(path)
	if err != nil {
		t.Fatalf("open read-only %s: %v", path, err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

// fileState is what a read-only open must not change.
type fileState struct {
	size int64
	data []byte
}

func stateOf(t testing.TB, path string) fileState {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fileState{fileSize(t, path), data}
}

func (s fileState) check(t testing.TB, path, when string) {
	t.Helper()
	got := stateOf(t, path)
	if got.size != s.size || !bytes.Equal(got.data, s.data) {
		t.Fatalf("%s: file changed: size %d -> %d", when, s.size, got.size)
	}
}

// checkLookups looks every canonical entry up.
func (k kind) checkLookups(t testing.TB, x index, n int) {
	t.Helper()
	for i := range n {
		switch y := x.(type) {
		case *OffsetIndex:
			if off, pos := y.Lookup(testOffset(i)); off != testOffset(i) || pos != testPosition(i) {
				t.Fatalf("Lookup(%d) = %d, %d", testOffset(i), off, pos)
			}
		case *TimeIndex:
			// The entry before i is the last with a timestamp < entry i's.
			ts, off, ok := y.Lookup(testTimestamp(i) + 1)
			if !ok || ts != testTimestamp(i) || off != testOffset(i) {
				t.Fatalf("Lookup(%d) = %d, %d, %v", testTimestamp(i)+1, ts, off, ok)
			}
		}
	}
}

// canonical returns the bytes of a cleanly closed index of the first n
// canonical entries.
func (k kind) canonical(t testing.TB, n int) []byte {
	t.Helper()
	path := tempPath(t, k)
	x := k.mustOpen(t, path, 0, true)
	k.fill(t, x, 0, n)
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// A read-only open of the live, preallocated index of a writer sees its
// entries and leaves the file alone; the writer carries on.
func TestReadOnlyLiveIndex(t *testing.T) {
	forKinds(t, func(t *testing.T, k kind) {
		path := tempPath(t, k)
		w := k.mustOpen(t, path, 64*k.entrySize, true)
		k.fill(t, w, 0, 5)
		before := stateOf(t, path)
		if before.size != int64(64*k.entrySize) {
			t.Fatalf("writable index is %d bytes, want preallocated %d", before.size, 64*k.entrySize)
		}

		r := k.mustOpenReadOnly(t, path)
		k.checkEntries(t, r, 5)
		k.checkLookups(t, r, 5)
		if !r.IsFull() {
			t.Error("read-only index not full")
		}
		before.check(t, path, "after read-only open")

		// The writer appends while the reader is open; the reader keeps the
		// entries counted at open.
		k.fill(t, w, 5, 7)
		k.checkEntries(t, r, 5)
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if r.Entries() != 0 {
			t.Errorf("closed read-only index has %d entries", r.Entries())
		}
		if err := r.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if got := fileSize(t, path); got != before.size {
			t.Fatalf("size after read-only close %d, want %d", got, before.size)
		}

		k.fill(t, w, 7, 10)
		k.checkEntries(t, w, 10)
		k.checkLookups(t, w, 10)
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}

		r2 := k.mustOpenReadOnly(t, path)
		k.checkEntries(t, r2, 10)
		mid := stateOf(t, path)
		if err := r2.Close(); err != nil {
			t.Fatal(err)
		}
		mid.check(t, path, "after second read-only close")

		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if got := fileSize(t, path); got != int64(10*k.entrySize) {
			t.Fatalf("closed writable index is %d bytes, want %d", got, 10*k.entrySize)
		}
		r3 := k.mustOpenReadOnly(t, path)
		k.checkEntries(t, r3, 10)
	})
}

// An index left at its preallocated size by a crash reads as its entries.
func TestReadOnlyCrashed(t *testing.T) {
	forKinds(t, func(t *testing.T, k kind) {
		path := tempPath(t, k)
		w := k.mustOpen(t, path, 0, true)
		k.fill(t, w, 0, 3)
		w.(interface{ Abort() }).Abort()
		before := stateOf(t, path)
		r := k.mustOpenReadOnly(t, path)
		k.checkEntries(t, r, 3)
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		before.check(t, path, "after read-only open of a crashed index")
	})
}

func TestReadOnlyMissing(t *testing.T) {
	forKinds(t, func(t *testing.T, k kind) {
		path := filepath.Join(t.TempDir(), "missing."+k.name+"index")
		x, err := k.openReadOnly(path)
		if !errors.Is(err, fs.ErrNotExist) || x != nil {
			t.Fatalf("open missing: %v, %v; want fs.ErrNotExist", x, err)
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("file after failed open: %v", err)
		}
		if _, err := k.openReadOnly(t.TempDir()); err == nil {
			t.Error("opened a directory")
		}
	})
}

func TestReadOnlyEmpty(t *testing.T) {
	forKinds(t, func(t *testing.T, k kind) {
		path := tempPath(t, k)
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		r := k.mustOpenReadOnly(t, path)
		k.checkEntries(t, r, 0)
		switch y := r.(type) {
		case *OffsetIndex:
			if off, pos, ok := y.LastEntry(); ok || off != testBase || pos != 0 {
				t.Errorf("LastEntry = %d, %d, %v", off, pos, ok)
			}
			if off, pos := y.Lookup(testBase + 5); off != testBase || pos != 0 {
				t.Errorf("Lookup = %d, %d", off, pos)
			}
		case *TimeIndex:
			if _, _, ok := y.Lookup(1 << 40); ok {
				t.Error("Lookup found an entry")
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if got := fileSize(t, path); got != 0 {
			t.Fatalf("size %d after close", got)
		}
	})
}

// A size that is not a multiple of the entry size is no error: the
// trailing partial entry is ignored, then trailing zero entries dropped.
func TestReadOnlyPartialEntry(t *testing.T) {
	forKinds(t, func(t *testing.T, k kind) {
		es := k.entrySize
		three := k.canonical(t, 3)
		junk := bytes.Repeat([]byte{0xff}, es-1)
		cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
		tests := []struct {
			name string
			raw  []byte
			want int
		}{
			{"one byte", []byte{0xff}, 0},
			{"one short zero entry", make([]byte, es-1), 0},
			{"one zero entry and a byte", make([]byte, es+1), 1},
			{"zero entries and a byte", make([]byte, 3*es+1), 0},
			{"entries and a nonzero byte", cat(three, []byte{1}), 3},
			{"entries and a partial entry", cat(three, junk), 3},
			{"entries, zero entries, partial entry", cat(three, make([]byte, 2*es), junk), 3},
			{"entries, partial zero entry", cat(three, make([]byte, es-1)), 3},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				if len(tc.raw)%es == 0 {
					t.Fatalf("test file of %d bytes is a whole number of entries", len(tc.raw))
				}
				path := tempPath(t, k)
				if err := os.WriteFile(path, tc.raw, 0o644); err != nil {
					t.Fatal(err)
				}
				before := stateOf(t, path)
				r := k.mustOpenReadOnly(t, path)
				if r.Entries() != tc.want {
					t.Fatalf("Entries %d, want %d", r.Entries(), tc.want)
				}
				if tc.want == 3 {
					k.checkEntries(t, r, 3)
				}
				if err := r.Close(); err != nil {
					t.Fatal(err)
				}
				before.check(t, path, "after close")
			})
		}
	})
}

// Every mutating call refuses or does nothing, and the file is untouched.
func TestReadOnlyRefusesMutation(t *testing.T) {
	forKinds(t, func(t *testing.T, k kind) {
		path := tempPath(t, k)
		if err := os.WriteFile(path, k.canonical(t, 3), 0o644); err != nil {
			t.Fatal(err)
		}
		before := stateOf(t, path)
		r := k.mustOpenReadOnly(t, path)
		for name, f := range map[string]func() error{
			"add":    func() error { return k.add(r, 3) },
			"Seal":   r.Seal,
			"Unseal": r.Unseal,
			"Sync":   r.Sync,
			"Delete": r.Delete,
		} {
			if err := f(); !errors.Is(err, ErrReadOnly) {
				t.Errorf("%s: %v, want ErrReadOnly", name, err)
			}
		}
		r.TruncateTo(testOffset(1))
		r.TruncateTo(testBase)
		r.Reset()
		k.checkEntries(t, r, 3)
		k.checkLookups(t, r, 3)
		before.check(t, path, "after mutating calls")
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		before.check(t, path, "after close")
		for name, err := range map[string]error{
			"Seal": r.Seal(), "Unseal": r.Unseal(), "Sync": r.Sync(), "add": k.add(r, 3),
		} {
			if !errors.Is(err, fs.ErrClosed) {
				t.Errorf("%s after Close: %v, want fs.ErrClosed", name, err)
			}
		}
	})
}

// The file need not be writable by the inspector.
func TestReadOnlyUnwritableFile(t *testing.T) {
	forKinds(t, func(t *testing.T, k kind) {
		path := tempPath(t, k)
		if err := os.WriteFile(path, k.canonical(t, 2), 0o444); err != nil {
			t.Fatal(err)
		}
		if f, err := os.OpenFile(path, os.O_RDWR, 0); err == nil {
			f.Close()
			t.Skip("file is writable anyway (running as root?)")
		}
		r := k.mustOpenReadOnly(t, path)
		k.checkEntries(t, r, 2)
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
