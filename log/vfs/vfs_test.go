package vfs

import (
	"errors"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
)

func TestWriteFileAtomicOS(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "state")
	must(t, WriteFileAtomic(OS, name, []byte("old")))
	if got := contents(t, OS, name); got != "old" {
		t.Fatalf("got %q", got)
	}
	must(t, WriteFileAtomic(OS, name, []byte("new contents")))
	if got := contents(t, OS, name); got != "new contents" {
		t.Fatalf("got %q", got)
	}
	names, err := OS.List(dir)
	must(t, err)
	if !slices.Equal(names, []string{"state"}) {
		t.Fatalf("dir holds %q", names)
	}
}

// TestWriteFileAtomicMemCrash crashes a WriteFileAtomic at every op index,
// kindly and unkindly, and fails it at every op index: the file must always
// hold the old or the new contents, in the crash clone and, after a failure,
// in the live file system too.
func TestWriteFileAtomicMemCrash(t *testing.T) {
	const name = "/d/state"
	oldData, newData := "old contents", "new, longer contents"

	base := NewMem()
	must(t, base.MkdirAll("/d"))
	must(t, base.SyncDir("/"))
	must(t, WriteFileAtomic(base, name, []byte(oldData)))

	// Count the ops of one replace.
	probe := base.CrashClone(CrashOptions{})
	must(t, WriteFileAtomic(probe, name, []byte(newData)))
	nops := probe.Ops()
	if nops < 5 {
		t.Fatalf("WriteFileAtomic took only %d ops", nops)
	}

	oldOrNew := func(t *testing.T, m FS, what string) string {
		t.Helper()
		got := contents(t, m, name)
		if got != oldData && got != newData {
			t.Fatalf("%s: %s holds %q", what, name, got)
		}
		return got
	}

	opts := []CrashOptions{{}}
	for seed := range uint64(8) {
		opts = append(opts, CrashOptions{Rand: rand.New(rand.NewPCG(seed, 3)), Torn: seed%2 == 1})
	}
	sawNew := false
	for k := 1; k <= nops; k++ {
		for _, o := range opts {
			m := base.CrashClone(CrashOptions{})
			var crashed *MemFS
			m.SetHook(func(n int, _, _ string) error {
				if n == k {
					crashed = m.CrashClone(o)
				}
				return nil
			})
			must(t, WriteFileAtomic(m, name, []byte(newData)))
			if crashed == nil {
				t.Fatalf("no crash at op %d", k)
			}
			if oldOrNew(t, crashed, "crash") == newData {
				sawNew = true
			}
			// The crashed file system is usable: replace again.
			must(t, WriteFileAtomic(crashed, name, []byte(newData)))
			if got := contents(t, crashed.CrashClone(CrashOptions{}), name); got != newData {
				t.Fatalf("after recovery at op %d: %q", k, got)
			}
		}
		if k == nops && !sawNew {
			t.Fatal("new contents never durable, even after the last op")
		}

		// Fail op k instead.
		errInjected := errors.New("injected")
		m := base.CrashClone(CrashOptions{})
		m.SetHook(func(n int, _, _ string) error {
			if n == k {
				return errInjected
			}
			return nil
		})
		if err := WriteFileAtomic(m, name, []byte(newData)); !errors.Is(err, errInjected) {
			t.Fatalf("op %d failed: WriteFileAtomic = %v", k, err)
		}
		m.SetHook(nil)
		oldOrNew(t, m, "after failure")
		oldOrNew(t, m.CrashClone(CrashOptions{}), "crash after failure")
	}
}
