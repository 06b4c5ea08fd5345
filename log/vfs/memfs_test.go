package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustCreate(t *testing.T, m FS, name string) File {
	t.Helper()
	f, err := m.Create(name)
	must(t, err)
	return f
}

func mustWrite(t *testing.T, f File, p string, off int64) {
	t.Helper()
	n, err := f.WriteAt([]byte(p), off)
	must(t, err)
	if n != len(p) {
		t.Fatalf("WriteAt wrote %d, want %d", n, len(p))
	}
}

// contents returns the file's contents, or "<absent>".
func contents(t *testing.T, m FS, name string) string {
	t.Helper()
	b, err := ReadFile(m, name)
	if errors.Is(err, fs.ErrNotExist) {
		return "<absent>"
	}
	must(t, err)
	return string(b)
}

func TestMemRoundTrip(t *testing.T) {
	m := NewMem()
	f := mustCreate(t, m, "/a")
	mustWrite(t, f, "hello", 0)
	mustWrite(t, f, " world", 5)
	if got := contents(t, m, "a"); got != "hello world" {
		t.Fatalf("got %q", got)
	}
	// Gap zero-filled.
	mustWrite(t, f, "!", 13)
	if sz, err := f.Size(); err != nil || sz != 14 {
		t.Fatalf("Size = %d, %v", sz, err)
	}
	if got := contents(t, m, "/a"); got != "hello world\x00\x00!" {
		t.Fatalf("got %q", got)
	}
	// ReadAt semantics of os.File.
	buf := make([]byte, 5)
	if n, err := f.ReadAt(buf, 11); n != 3 || err != io.EOF || string(buf[:n]) != "\x00\x00!" {
		t.Fatalf("short ReadAt = %d, %v, %q", n, err, buf[:n])
	}
	if n, err := f.ReadAt(buf, 14); n != 0 || err != io.EOF {
		t.Fatalf("ReadAt at end = %d, %v", n, err)
	}
	if n, err := f.ReadAt(buf, 0); n != 5 || err != nil || string(buf) != "hello" {
		t.Fatalf("ReadAt = %d, %v, %q", n, err, buf)
	}
	if _, err := f.ReadAt(buf, -1); err == nil {
		t.Fatal("ReadAt at negative offset succeeded")
	}
	must(t, f.Truncate(5))
	if got := contents(t, m, "a"); got != "hello" {
		t.Fatalf("after Truncate got %q", got)
	}
	must(t, f.Truncate(7))
	if got := contents(t, m, "a"); got != "hello\x00\x00" {
		t.Fatalf("after growing Truncate got %q", got)
	}

	// Read-only handles.
	r, err := m.Open("/a")
	must(t, err)
	if _, err := r.WriteAt([]byte("x"), 0); err == nil {
		t.Fatal("WriteAt on a read-only handle succeeded")
	}
	if err := r.Truncate(0); err == nil {
		t.Fatal("Truncate on a read-only handle succeeded")
	}
	// OpenRW sees the same node.
	w, err := m.OpenRW("a")
	must(t, err)
	mustWrite(t, w, "J", 0)
	if n, _ := r.ReadAt(buf[:1], 0); n != 1 || buf[0] != 'J' {
		t.Fatalf("read-only handle does not see the write: %q", buf[:1])
	}

	// Close twice, use after close.
	must(t, r.Close())
	if err := r.Close(); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := r.ReadAt(buf, 0); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("ReadAt after Close = %v", err)
	}
	if _, err := w.WriteAt(buf, 0); err != nil {
		t.Fatal(err) // other handles unaffected
	}
	must(t, w.Close())
	must(t, f.Close())
}

func TestMemErrorsAndDirs(t *testing.T) {
	m := NewMem()
	for _, name := range []string{"/missing", "missing", "/d/missing"} {
		_, err := m.Open(name)
		var pe *os.PathError
		if !errors.As(err, &pe) || !os.IsNotExist(err) || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Open(%q) = %v", name, err)
		}
	}
	if _, err := m.Create("/d/x"); !os.IsNotExist(err) {
		t.Fatalf("Create without parent = %v", err)
	}
	if _, err := m.OpenRW("/nope"); !os.IsNotExist(err) {
		t.Fatalf("OpenRW = %v", err)
	}
	for _, dir := range []string{"/", "."} {
		if ok, err := m.Exists(dir); !ok || err != nil {
			t.Fatalf("Exists(%q) = %v, %v", dir, ok, err)
		}
	}
	must(t, m.MkdirAll("/d/e/f"))
	must(t, m.MkdirAll("d/e")) // already there
	mustCreate(t, m, "/d/e/f/../x").Close()
	mustCreate(t, m, "/d/b").Close()
	mustCreate(t, m, "/d//a").Close()
	names, err := m.List("/d")
	must(t, err)
	if !slices.Equal(names, []string{"a", "b", "e"}) {
		t.Fatalf("List = %q", names)
	}
	if names, _ := m.List("d/e/"); !slices.Equal(names, []string{"f", "x"}) {
		t.Fatalf("List = %q", names)
	}
	if _, err := m.List("/d/a"); err == nil {
		t.Fatal("List of a file succeeded")
	}
	if _, err := m.List("/zz"); !os.IsNotExist(err) {
		t.Fatalf("List missing = %v", err)
	}
	if err := m.MkdirAll("/d/a/b"); !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("MkdirAll through a file = %v", err)
	}
	if _, err := m.Create("/d/e"); !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("Create over a dir = %v", err)
	}
	if _, err := m.Open("/d/e"); err == nil {
		t.Fatal("Open of a dir succeeded")
	}
	if err := m.Remove("/d/e"); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("Remove non-empty dir = %v", err)
	}
	if err := m.Remove("/d/zz"); !os.IsNotExist(err) {
		t.Fatalf("Remove missing = %v", err)
	}
	must(t, m.Remove("/d/e/f"))
	must(t, m.RemoveAll("/d/e"))
	must(t, m.RemoveAll("/d/e"))
	if ok, err := m.Exists("/d/e/x"); ok || err != nil {
		t.Fatalf("Exists after RemoveAll = %v, %v", ok, err)
	}
	if names, _ := m.List("/d"); !slices.Equal(names, []string{"a", "b"}) {
		t.Fatalf("List = %q", names)
	}

	// Rename replaces; handles follow the node.
	f := mustCreate(t, m, "/d/a")
	mustWrite(t, f, "A", 0)
	must(t, m.Rename("/d/a", "/d/b"))
	mustWrite(t, f, "AA", 0)
	if got := contents(t, m, "/d/b"); got != "AA" {
		t.Fatalf("renamed file holds %q", got)
	}
	if ok, _ := m.Exists("/d/a"); ok {
		t.Fatal("old name still exists")
	}
	err = m.Rename("/d/nope", "/d/c")
	var le *os.LinkError
	if !errors.As(err, &le) || !os.IsNotExist(err) {
		t.Fatalf("Rename missing = %v", err)
	}
	must(t, m.MkdirAll("/d/sub"))
	if err := m.Rename("/d", "/d/sub/d"); err == nil {
		t.Fatal("Rename into own subtree succeeded")
	}
	if err := m.Rename("/d/b", "/d/sub"); err == nil {
		t.Fatal("Rename of a file over a dir succeeded")
	}
	must(t, m.Rename("/d", "/e"))
	if got := contents(t, m, "/e/b"); got != "AA" {
		t.Fatalf("after dir rename got %q", got)
	}

	// Remove with open handles: the handle keeps the node.
	must(t, m.Remove("/e/b"))
	mustWrite(t, f, "BBB", 0)
	buf := make([]byte, 3)
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "BBB" {
		t.Fatalf("read of removed file = %q, %v", buf, err)
	}
	must(t, f.Close())
}

func TestMemCrashUnsyncedLost(t *testing.T) {
	m := NewMem()
	f := mustCreate(t, m, "/f")
	must(t, m.SyncDir("/"))
	mustWrite(t, f, "abc", 0)
	must(t, f.Sync())
	mustWrite(t, f, "def", 3)
	c := m.CrashClone(CrashOptions{})
	if got := contents(t, c, "/f"); got != "abc" {
		t.Fatalf("clone holds %q, want synced part only", got)
	}
	// The original and its handle are unaffected.
	if got := contents(t, m, "/f"); got != "abcdef" {
		t.Fatalf("original holds %q", got)
	}
	mustWrite(t, f, "g", 6)
	must(t, f.Sync())
	if got := contents(t, m.CrashClone(CrashOptions{}), "/f"); got != "abcdefg" {
		t.Fatalf("second clone holds %q", got)
	}
	if got := contents(t, c, "/f"); got != "abc" {
		t.Fatalf("first clone changed: %q", got)
	}
}

func TestMemCrashCreateNeedsSyncDir(t *testing.T) {
	m := NewMem()
	must(t, m.MkdirAll("/d"))
	f := mustCreate(t, m, "/d/f")
	mustWrite(t, f, "x", 0)
	must(t, f.Sync())
	// Neither /d (root not synced) nor /d/f (/d not synced) is durable.
	c := m.CrashClone(CrashOptions{})
	if ok, _ := c.Exists("/d"); ok {
		t.Fatal("unsynced directory survived")
	}
	must(t, m.SyncDir("/"))
	c = m.CrashClone(CrashOptions{})
	if ok, _ := c.Exists("/d"); !ok {
		t.Fatal("synced directory lost")
	}
	if ok, _ := c.Exists("/d/f"); ok {
		t.Fatal("file created without SyncDir survived")
	}
	must(t, m.SyncDir("/d"))
	if got := contents(t, m.CrashClone(CrashOptions{}), "/d/f"); got != "x" {
		t.Fatalf("clone holds %q", got)
	}
}

func TestMemCrashRename(t *testing.T) {
	m := NewMem()
	f := mustCreate(t, m, "/old")
	mustWrite(t, f, "data", 0)
	must(t, f.Sync())
	must(t, m.SyncDir("/"))
	must(t, m.Rename("/old", "/new"))

	c := m.CrashClone(CrashOptions{})
	if got := contents(t, c, "/old"); got != "data" {
		t.Fatalf("old name in clone holds %q", got)
	}
	if got := contents(t, c, "/new"); got != "<absent>" {
		t.Fatalf("new name in clone holds %q", got)
	}

	must(t, m.SyncDir("/"))
	c = m.CrashClone(CrashOptions{})
	if got := contents(t, c, "/old"); got != "<absent>" {
		t.Fatalf("old name in clone holds %q", got)
	}
	if got := contents(t, c, "/new"); got != "data" {
		t.Fatalf("new name in clone holds %q", got)
	}
}

func TestMemCrashRemoveNeedsSyncDir(t *testing.T) {
	m := NewMem()
	f := mustCreate(t, m, "/f")
	mustWrite(t, f, "keep", 0)
	must(t, f.Sync())
	mustWrite(t, f, "lost", 4)
	must(t, m.MkdirAll("/dir"))
	must(t, m.SyncDir("/"))
	g := mustCreate(t, m, "/dir/g")
	must(t, m.SyncDir("/dir"))
	must(t, g.Close())

	must(t, m.Remove("/f"))
	must(t, m.RemoveAll("/dir"))
	c := m.CrashClone(CrashOptions{})
	if got := contents(t, c, "/f"); got != "keep" {
		t.Fatalf("removed file in clone holds %q", got)
	}
	if ok, _ := c.Exists("/dir/g"); !ok {
		t.Fatal("RemoveAll without SyncDir lost /dir/g")
	}
	must(t, m.SyncDir("/"))
	c = m.CrashClone(CrashOptions{})
	if names, _ := c.List("/"); len(names) != 0 {
		t.Fatalf("after SyncDir the clone holds %q", names)
	}
}

func TestMemCrashTruncateUndone(t *testing.T) {
	m := NewMem()
	f := mustCreate(t, m, "/f")
	must(t, m.SyncDir("/"))
	mustWrite(t, f, "0123456789", 0)
	must(t, f.Sync())
	must(t, f.Truncate(3))
	mustWrite(t, f, "xy", 3) // overwrites bytes 3..4 of the synced array
	if got := contents(t, m.CrashClone(CrashOptions{}), "/f"); got != "0123456789" {
		t.Fatalf("clone holds %q", got)
	}
	// Create of an existing file truncates it, also undone by a crash.
	g := mustCreate(t, m, "/f")
	if got := contents(t, m, "/f"); got != "" {
		t.Fatalf("Create did not truncate: %q", got)
	}
	if got := contents(t, m.CrashClone(CrashOptions{}), "/f"); got != "0123456789" {
		t.Fatalf("clone after Create holds %q", got)
	}
	must(t, g.Sync())
	if got := contents(t, m.CrashClone(CrashOptions{}), "/f"); got != "" {
		t.Fatalf("clone after synced Create holds %q", got)
	}
}

// TestMemCopyOnWrite checks that the original, its synced state and its
// clones never see each other's later writes.
func TestMemCopyOnWrite(t *testing.T) {
	m := NewMem()
	f := mustCreate(t, m, "/f")
	must(t, m.SyncDir("/"))
	mustWrite(t, f, "aaaaaaaaaa", 0)
	must(t, f.Sync())
	c1 := m.CrashClone(CrashOptions{})
	must(t, f.Truncate(4))
	must(t, f.Sync())
	c2 := m.CrashClone(CrashOptions{})
	mustWrite(t, f, "bbbbbb", 4) // positions c1 aliases, beyond c2's length
	mustWrite(t, f, "c", 0)
	if got := contents(t, c1, "/f"); got != "aaaaaaaaaa" {
		t.Fatalf("c1 holds %q", got)
	}
	if got := contents(t, c2, "/f"); got != "aaaa" {
		t.Fatalf("c2 holds %q", got)
	}
	if got := contents(t, m.CrashClone(CrashOptions{}), "/f"); got != "aaaa" {
		t.Fatalf("synced state holds %q", got)
	}
	// Writes to a clone stay in the clone.
	cf, err := c1.OpenRW("/f")
	must(t, err)
	mustWrite(t, cf, "zz", 1)
	mustWrite(t, cf, "tail", 10)
	if got := contents(t, c1, "/f"); got != "azzaaaaaaatail" {
		t.Fatalf("c1 holds %q", got)
	}
	if got := contents(t, m, "/f"); got != "caaabbbbbb" {
		t.Fatalf("original holds %q", got)
	}
	// A clone of a clone is independent too, and a clone is fully synced.
	if got := contents(t, c1.CrashClone(CrashOptions{}), "/f"); got != "aaaaaaaaaa" {
		t.Fatalf("clone of clone holds %q", got)
	}
}

func TestMemCrashRandPrefix(t *testing.T) {
	const synced = "synced-part|"
	written := synced
	for i := range 20 {
		written += fmt.Sprintf("record-%02d|", i)
	}
	seen := map[int]bool{}
	for seed := range uint64(200) {
		m := NewMem()
		f := mustCreate(t, m, "/f")
		must(t, m.SyncDir("/"))
		mustWrite(t, f, synced, 0)
		must(t, f.Sync())
		for off := len(synced); off < len(written); off += 10 {
			mustWrite(t, f, written[off:off+10], int64(off))
		}
		got := contents(t, m.CrashClone(CrashOptions{Rand: rand.New(rand.NewPCG(seed, 1))}), "/f")
		if len(got) < len(synced) || written[:len(got)] != got {
			t.Fatalf("seed %d: clone holds %q, not a prefix of %q at least the synced part", seed, got, written)
		}
		seen[len(got)] = true

		torn := contents(t, m.CrashClone(CrashOptions{Rand: rand.New(rand.NewPCG(seed, 2)), Torn: true}), "/f")
		if len(torn) < len(synced) || len(torn) > len(written) || torn[:len(synced)] != synced {
			t.Fatalf("seed %d: torn clone holds %q", seed, torn)
		}
	}
	if len(seen) < 10 {
		t.Fatalf("only %d distinct lengths kept over 200 seeds", len(seen))
	}
	// Same seed, same crash.
	m := NewMem()
	for _, n := range []string{"/a", "/b", "/c"} {
		f := mustCreate(t, m, n)
		mustWrite(t, f, written, 0)
	}
	must(t, m.SyncDir("/"))
	clone := func() (s []string) {
		c := m.CrashClone(CrashOptions{Rand: rand.New(rand.NewPCG(7, 7)), Torn: true})
		for _, n := range []string{"/a", "/b", "/c"} {
			s = append(s, contents(t, c, n))
		}
		return s
	}
	if a, b := clone(), clone(); !slices.Equal(a, b) {
		t.Fatalf("same seed gave different crashes: %q vs %q", a, b)
	}
}

func TestMemHookCountsAndCaptures(t *testing.T) {
	m := NewMem()
	type op struct {
		n          int
		kind, name string
	}
	var ops []op
	var atThird *MemFS
	m.SetHook(func(n int, kind, name string) error {
		ops = append(ops, op{n, kind, name})
		if n == 3 {
			atThird = m.CrashClone(CrashOptions{})
		}
		return nil
	})
	f := mustCreate(t, m, "/f")   // 1
	mustWrite(t, f, "abc", 0)     // 2
	must(t, f.Sync())             // 3
	must(t, m.SyncDir("/"))       // 4
	must(t, f.Truncate(1))        // 5
	must(t, m.MkdirAll("/d"))     // 6
	must(t, m.Rename("/f", "/g")) // 7
	must(t, m.Remove("/g"))       // 8
	must(t, m.RemoveAll("/d"))    // 9
	if _, err := m.Open("/x"); err == nil {
		t.Fatal("Open of a missing file succeeded")
	}
	if err := m.Remove("/x"); err == nil { // not an op: fails validation
		t.Fatal("Remove of a missing file succeeded")
	}
	buf := make([]byte, 1)
	f.ReadAt(buf, 0)
	f.Size()
	m.List("/")
	m.Exists("/f")
	f.Close()
	want := []op{
		{1, OpCreate, "/f"}, {2, OpWriteAt, "/f"}, {3, OpSync, "/f"}, {4, OpSyncDir, "/"},
		{5, OpTruncate, "/f"}, {6, OpMkdirAll, "/d"}, {7, OpRename, "/f -> /g"},
		{8, OpRemove, "/g"}, {9, OpRemoveAll, "/d"},
	}
	if !slices.Equal(ops, want) {
		t.Fatalf("ops = %v, want %v", ops, want)
	}
	if m.Ops() != 9 {
		t.Fatalf("Ops = %d", m.Ops())
	}
	// At op 3 (the Sync, applied) the data is synced but the file's entry is
	// not durable yet.
	if ok, _ := atThird.Exists("/f"); ok {
		t.Fatal("clone at op 3 holds /f")
	}
	m.SetHook(nil)
	must(t, m.SyncDir("/"))
	if m.Ops() != 10 {
		t.Fatalf("Ops = %d", m.Ops())
	}
}

// TestMemHookCrashAtEveryOp replays a small workload once per op index and
// checks the clone taken at op k holds the effect of ops 1..k.
func TestMemHookCrashAtEveryOp(t *testing.T) {
	workload := func(m *MemFS) {
		f := mustCreate(t, m, "/f")
		must(t, m.SyncDir("/"))
		mustWrite(t, f, "ab", 0)
		must(t, f.Sync())
		mustWrite(t, f, "cd", 2)
		must(t, f.Sync())
	}
	want := []string{"<absent>", "", "", "ab", "ab", "abcd"} // after op k
	for k := 1; k <= len(want); k++ {
		m := NewMem()
		var c *MemFS
		m.SetHook(func(n int, _, _ string) error {
			if n == k {
				c = m.CrashClone(CrashOptions{})
			}
			return nil
		})
		workload(m)
		if got := contents(t, c, "/f"); got != want[k-1] {
			t.Fatalf("crash at op %d: got %q, want %q", k, got, want[k-1])
		}
	}
}

func TestMemHookErrorFailsOp(t *testing.T) {
	errInjected := errors.New("injected")
	m := NewMem()
	f := mustCreate(t, m, "/f")
	mustWrite(t, f, "0123", 0)
	must(t, f.Sync())
	must(t, m.SyncDir("/"))
	failing := ""
	m.SetHook(func(_ int, kind, _ string) error {
		if kind == failing {
			return errInjected
		}
		return nil
	})
	check := func(what, name, want string) {
		t.Helper()
		if got := contents(t, m, name); got != want {
			t.Fatalf("after failed %s: %s holds %q, want %q", what, name, got, want)
		}
	}

	failing = OpWriteAt
	if n, err := f.WriteAt([]byte("xyz"), 2); !errors.Is(err, errInjected) || n != 0 {
		t.Fatalf("WriteAt = %d, %v", n, err)
	}
	check("WriteAt", "/f", "0123")
	failing = OpTruncate
	if err := f.Truncate(1); !errors.Is(err, errInjected) {
		t.Fatal(err)
	}
	check("Truncate", "/f", "0123")
	if err := f.Truncate(10); !errors.Is(err, errInjected) {
		t.Fatal(err)
	}
	check("Truncate", "/f", "0123")
	failing = OpSync
	mustWrite(t, f, "4", 4)
	if err := f.Sync(); !errors.Is(err, errInjected) {
		t.Fatal(err)
	}
	if got := contents(t, m.CrashClone(CrashOptions{}), "/f"); got != "0123" {
		t.Fatalf("failed Sync made %q durable", got)
	}
	failing = OpCreate
	if _, err := m.Create("/g"); !errors.Is(err, errInjected) {
		t.Fatal(err)
	}
	check("Create", "/g", "<absent>")
	if _, err := m.Create("/f"); !errors.Is(err, errInjected) {
		t.Fatal(err)
	}
	check("Create", "/f", "01234")
	failing = OpRename
	g := mustCreate(t, m, "/g")
	mustWrite(t, g, "G", 0)
	if err := m.Rename("/g", "/f"); !errors.Is(err, errInjected) {
		t.Fatal(err)
	}
	check("Rename", "/f", "01234")
	check("Rename", "/g", "G")
	failing = OpRemove
	if err := m.Remove("/g"); !errors.Is(err, errInjected) {
		t.Fatal(err)
	}
	check("Remove", "/g", "G")
	failing = OpMkdirAll
	if err := m.MkdirAll("/a/b/c"); !errors.Is(err, errInjected) {
		t.Fatal(err)
	}
	if ok, _ := m.Exists("/a"); ok {
		t.Fatal("failed MkdirAll left /a")
	}
	failing = OpRemoveAll
	must(t, m.MkdirAll("/a/b"))
	if err := m.RemoveAll("/a"); !errors.Is(err, errInjected) {
		t.Fatal(err)
	}
	if ok, _ := m.Exists("/a/b"); !ok {
		t.Fatal("failed RemoveAll removed /a/b")
	}
	failing = OpSyncDir
	if err := m.SyncDir("/"); !errors.Is(err, errInjected) {
		t.Fatal(err)
	}
	if got := contents(t, m.CrashClone(CrashOptions{}), "/g"); got != "<absent>" {
		t.Fatalf("failed SyncDir made /g durable: %q", got)
	}

	// Sticky: from some op on, every write fails.
	failAfter := m.Ops() + 2
	m.SetHook(func(n int, kind, _ string) error {
		if n > failAfter && kind == OpWriteAt {
			return errInjected
		}
		return nil
	})
	var errs []error
	for i := range 4 {
		_, err := f.WriteAt([]byte{'a' + byte(i)}, int64(5+i))
		errs = append(errs, err)
	}
	if errs[0] != nil || errs[1] != nil || errs[2] == nil || errs[3] == nil {
		t.Fatalf("errs = %v", errs)
	}
	check("sticky", "/f", "01234ab")
}

// TestMemConcurrentReadWrite runs one appender and several readers on one
// file, plus crash clones, for the race detector.
func TestMemConcurrentReadWrite(t *testing.T) {
	m := NewMem()
	w := mustCreate(t, m, "/log")
	must(t, m.SyncDir("/"))
	const recSize, recs = 64, 2000
	rec := func(i int) []byte {
		return bytes.Repeat([]byte{byte(i)}, recSize)
	}
	var published atomic.Int64 // bytes written so far
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	wg.Go(func() {
		for i := range recs {
			if _, err := w.WriteAt(rec(i), int64(i*recSize)); err != nil {
				errc <- err
				return
			}
			published.Store(int64((i + 1) * recSize))
			if i%100 == 0 {
				if err := w.Sync(); err != nil {
					errc <- err
					return
				}
			}
		}
	})
	for range 3 {
		wg.Go(func() {
			r, err := m.Open("/log")
			if err != nil {
				errc <- err
				return
			}
			defer r.Close()
			buf := make([]byte, recSize)
			for {
				end := published.Load()
				if end > 0 {
					i := int(end/recSize) - 1
					if _, err := r.ReadAt(buf, int64(i*recSize)); err != nil {
						errc <- err
						return
					}
					if !bytes.Equal(buf, rec(i)) {
						errc <- fmt.Errorf("record %d corrupt", i)
						return
					}
				}
				if end == recs*recSize {
					return
				}
			}
		})
	}
	wg.Go(func() {
		for published.Load() < recs*recSize {
			c := m.CrashClone(CrashOptions{})
			b, err := ReadFile(c, "/log")
			if err != nil {
				errc <- err
				return
			}
			if len(b)%recSize != 0 {
				errc <- fmt.Errorf("clone holds %d bytes", len(b))
				return
			}
		}
	})
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

// TestMkdirAllSyncSurvivesCrash: every directory MkdirAllSync creates
// survives a crash; on one that exists it syncs only the parent, and a
// directory left unsynced by an earlier crash is made durable.
func TestMkdirAllSyncSurvivesCrash(t *testing.T) {
	m := NewMem()
	must(t, MkdirAllSync(m, "/a/b/c"))
	c := m.CrashClone(CrashOptions{})
	for _, d := range []string{"/a", "/a/b", "/a/b/c"} {
		if ok, _ := c.Exists(d); !ok {
			t.Fatalf("%s lost in a crash", d)
		}
	}
	// Made by someone who crashed before syncing its parent.
	must(t, m.MkdirAll("/a/b/d"))
	if ok, _ := m.CrashClone(CrashOptions{}).Exists("/a/b/d"); ok {
		t.Fatal("an unsynced directory survived")
	}
	must(t, MkdirAllSync(m, "/a/b/d"))
	if ok, _ := m.CrashClone(CrashOptions{}).Exists("/a/b/d"); !ok {
		t.Fatal("/a/b/d lost in a crash after MkdirAllSync")
	}
}
