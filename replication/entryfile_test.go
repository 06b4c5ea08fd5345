package replication

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log/vfs"
	"github.com/raftlog/raftlog/log/vfs/errorfs"
)

// sampleSide returns n records from index first on: a mix of Raft's own
// entries and raftlog's commands, with and without time, extensions and
// data, two per offset where index is odd.
func sampleSide(first uint64, n int) []sideEntry {
	var out []sideEntry
	for i := range n {
		idx := first + uint64(i)
		se := sideEntry{offset: int64(idx / 2 * 10)}
		se.Index, se.Term = idx, idx/3+1
		switch i % 4 {
		case 0:
			se.Type, se.Data = raft.LogConfiguration, []byte(fmt.Sprintf("configuration %d", idx))
		case 1:
			se.Type, se.AppendedAt = raft.LogNoop, time.Unix(1700000000, int64(idx))
		case 2:
			se.Type, se.Extensions = raft.LogBarrier, []byte("ext")
		case 3:
			se.Type, se.Data, se.AppendedAt = raft.LogCommand, bytes.Repeat([]byte{byte(idx)}, 70), time.Unix(0, 1)
		}
		out = append(out, se)
	}
	return out
}

// sameEntries compares records by what they hold (not where they sit).
func sameEntries(t *testing.T, got, want []sideEntry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		g.pos, w.pos = 0, 0
		if !g.AppendedAt.Equal(w.AppendedAt) {
			t.Fatalf("record %d: AppendedAt %v, want %v", i, g.AppendedAt, w.AppendedAt)
		}
		g.AppendedAt, w.AppendedAt = time.Time{}, time.Time{}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("record %d: %+v, want %+v", i, g, w)
		}
	}
}

func newEntryFile(t *testing.T, fsys vfs.FS) *entryFile {
	t.Helper()
	fsys.MkdirAll("/r")
	fsys.SyncDir("/")
	e, err := openEntryFile(fsys, "/r")
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func reopenEntryFile(t *testing.T, fsys vfs.FS) *entryFile {
	t.Helper()
	e, err := openEntryFile(fsys, "/r")
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEntryFileRoundTrip(t *testing.T) {
	mem := vfs.NewMem()
	e := newEntryFile(t, mem)
	want := sampleSide(1, 9)
	if err := e.append(append([]sideEntry(nil), want[:1]...)); err != nil {
		t.Fatal(err)
	}
	if err := e.append(append([]sideEntry(nil), want[1:]...)); err != nil {
		t.Fatal(err)
	}
	sameEntries(t, e.ents, want)
	sameEntries(t, reopenEntryFile(t, mem).ents, want)
	// What a power loss keeps: every append was synced.
	sameEntries(t, reopenEntryFile(t, mem.CrashClone(vfs.CrashOptions{})).ents, want)
	if se, ok := e.get(5); !ok || se.Index != 5 {
		t.Fatalf("get(5) = %v, %v", se, ok)
	}
	if _, ok := e.get(10); ok {
		t.Fatal("get of an entry never stored")
	}
	if err := e.append(sampleSide(9, 1)); err == nil {
		t.Fatal("an append at an index already held")
	}
}

// A crash may tear the last append anywhere: the file opens with the
// records written whole before the tear, cut there, and takes appends.
func TestEntryFileTornTail(t *testing.T) {
	mem := vfs.NewMem()
	e := newEntryFile(t, mem)
	all := sampleSide(1, 6)
	if err := e.append(append([]sideEntry(nil), all[:3]...)); err != nil {
		t.Fatal(err)
	}
	whole := e.size
	if err := e.append(append([]sideEntry(nil), all[3:]...)); err != nil {
		t.Fatal(err)
	}
	img, _ := vfs.ReadFile(mem, "/r/"+entryFileName)
	ends := []int64{whole}
	for _, se := range e.ents[4:] {
		ends = append(ends, se.pos)
	}
	ends = append(ends, e.size)
	for cut := whole; cut <= int64(len(img)); cut++ {
		for _, garbage := range []bool{false, true} {
			file := append([]byte(nil), img[:cut]...)
			if garbage && cut > whole {
				file[cut-1] ^= 0xff // the last byte written is wrong
			}
			m := vfs.NewMem()
			m.MkdirAll("/r")
			vfs.WriteFileAtomic(m, "/r/"+entryFileName, file)
			e2, err := openEntryFile(m, "/r")
			if err != nil {
				t.Fatalf("cut %d: %v", cut, err)
			}
			n := 3
			for _, end := range ends[1:] {
				if end <= cut && !(garbage && end == cut) {
					n++
				}
			}
			sameEntries(t, e2.ents, all[:n])
			if size, _ := vfs.ReadFile(m, "/r/"+entryFileName); int64(len(size)) != e2.size {
				t.Fatalf("cut %d: file of %d bytes, %d whole", cut, len(size), e2.size)
			}
			next := sampleSide(uint64(n+1), 1)
			if err := e2.append(next); err != nil {
				t.Fatal(err)
			}
			sameEntries(t, reopenEntryFile(t, m).ents, append(append([]sideEntry(nil), all[:n]...), next...))
		}
	}
}

func TestEntryFileTruncateDropReset(t *testing.T) {
	mem := vfs.NewMem()
	e := newEntryFile(t, mem)
	all := sampleSide(1, 8)
	if err := e.append(append([]sideEntry(nil), all...)); err != nil {
		t.Fatal(err)
	}
	if err := e.truncateFrom(6); err != nil {
		t.Fatal(err)
	}
	sameEntries(t, e.ents, all[:5])
	sameEntries(t, reopenEntryFile(t, mem.CrashClone(vfs.CrashOptions{})).ents, all[:5])
	if err := e.truncateFrom(100); err != nil {
		t.Fatal(err)
	}
	// A prefix leaves memory at once; the file keeps it while it is
	// small, and openLogStore skips what lies below its anchor.
	if err := e.dropBefore(3); err != nil {
		t.Fatal(err)
	}
	sameEntries(t, e.ents, all[2:5])
	sameEntries(t, reopenEntryFile(t, mem).ents, all[:5])
	if err := e.reset(); err != nil {
		t.Fatal(err)
	}
	if len(e.ents) != 0 || len(reopenEntryFile(t, mem.CrashClone(vfs.CrashOptions{})).ents) != 0 {
		t.Fatal("records after a reset")
	}
	if err := e.append(sampleSide(20, 1)); err != nil {
		t.Fatal(err)
	}
	sameEntries(t, reopenEntryFile(t, mem).ents, sampleSide(20, 1))
}

// Dropped records are rewritten away once they outweigh the live ones
// and entryCompactMin, atomically: a crash at any step of the rewrite
// leaves either file.
func TestEntryFileCompacts(t *testing.T) {
	mem := vfs.NewMem()
	e := newEntryFile(t, mem)
	big := func(idx uint64) sideEntry {
		se := sideEntry{offset: int64(idx)}
		se.Index, se.Term, se.Type, se.Data = idx, 1, raft.LogConfiguration, bytes.Repeat([]byte{1}, 10<<10)
		return se
	}
	var all []sideEntry
	for i := uint64(1); i <= 10; i++ {
		all = append(all, big(i))
		if err := e.append([]sideEntry{big(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.dropBefore(5); err != nil {
		t.Fatal(err)
	}
	if n := len(reopenEntryFile(t, mem).ents); n != 10 {
		t.Fatalf("%d records after dropping 40 KiB, want all 10 still in the file", n)
	}
	before := mem.Ops()
	if err := e.dropBefore(9); err != nil {
		t.Fatal(err)
	}
	sameEntries(t, reopenEntryFile(t, mem).ents, all[8:])
	after := mem.Ops()
	crashes := 0
	for op := before; op <= after; op++ {
		// Replay the rewrite on a copy, crashing after each of its
		// operations.
		m := vfs.NewMem()
		m.MkdirAll("/r")
		m.SyncDir("/")
		e2, _ := openEntryFile(m, "/r")
		for i := uint64(1); i <= 10; i++ {
			e2.append([]sideEntry{big(i)})
		}
		e2.dropBefore(5)
		base := m.Ops()
		var crashed *vfs.MemFS
		m.SetHook(func(n int, kind, name string) error {
			if n == base+(op-before) && crashed == nil {
				crashed = m.CrashClone(vfs.CrashOptions{})
			}
			return nil
		})
		e2.dropBefore(9)
		m.SetHook(nil)
		if crashed == nil {
			continue
		}
		crashes++
		got := reopenEntryFile(t, crashed).ents
		if !(len(got) == 10 || len(got) == 2) {
			t.Fatalf("crash at op %d of the rewrite: %d records", op-before, len(got))
		}
	}
	if crashes < 3 {
		t.Fatalf("%d crashes tried over the rewrite's %d operations", crashes, after-before)
	}
}

// A failed write or sync fails the append and leaves what was held.
func TestEntryFileWriteFails(t *testing.T) {
	mem := vfs.NewMem()
	fail := errors.New("injected")
	var on atomic.Bool
	fsys := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if on.Load() && op.Kind == errorfs.OpSync {
			return fail
		}
		return nil
	}))
	fsys.MkdirAll("/r")
	fsys.SyncDir("/")
	e, err := openEntryFile(fsys, "/r")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.append(sampleSide(1, 2)); err != nil {
		t.Fatal(err)
	}
	on.Store(true)
	if err := e.append(sampleSide(3, 1)); !errors.Is(err, fail) {
		t.Fatalf("append with a failing sync: %v", err)
	}
	on.Store(false)
	sameEntries(t, e.ents, sampleSide(1, 2))
	sameEntries(t, reopenEntryFile(t, mem.CrashClone(vfs.CrashOptions{})).ents, sampleSide(1, 2))
}
