package replication

import (
	"bytes"
	"maps"
	"path/filepath"
	"testing"

	"github.com/raftlog/raftlog/log/vfs"
)

// FuzzStableStore: a raft.stable file of any bytes (two slots, or the
// earlier one-body format) opens or is refused with an error, never a
// panic; a store that opens takes a change and reopens with it, and a
// slot that decodes encodes to one that decodes the same.
func FuzzStableStore(f *testing.F) {
	mem := vfs.NewMem()
	mem.MkdirAll("/s")
	s, err := openStableStore(mem, "/s", nil)
	if err != nil {
		f.Fatal(err)
	}
	s.SetUint64([]byte(keyCurrentTerm), 7)
	s.Set([]byte("LastVoteCand"), []byte("node-1"))
	img, _ := vfs.ReadFile(mem, "/s/"+stableName)
	f.Add(img)
	f.Add(img[:stableSlotSize])
	f.Add(append([]byte("RLSS\x00\x00\x00\x01\x01k\x01v"), 0, 0, 0, 0))
	f.Fuzz(func(t *testing.T, p []byte) {
		file := p
		if !bytes.HasPrefix(p, stableMagicV1[:]) {
			file = make([]byte, 2*stableSlotSize)
			copy(file, p)
			for i := range 2 {
				slot := file[i*stableSlotSize : (i+1)*stableSlotSize]
				kv, seq, err := decodeSlot(slot)
				if err != nil {
					continue
				}
				again := make([]byte, stableSlotSize)
				if err := encodeSlot(again, kv, seq); err != nil {
					t.Fatalf("slot %d decodes but does not encode: %v", i, err)
				}
				kv2, seq2, err := decodeSlot(again)
				if err != nil || seq2 != seq || !maps.EqualFunc(kv, kv2, bytes.Equal) {
					t.Fatalf("slot %d: re-encoded slot decodes to %v %d %v, want %v %d", i, kv2, seq2, err, kv, seq)
				}
			}
		}
		mem := vfs.NewMem()
		mem.MkdirAll("/s")
		if err := vfs.WriteFileAtomic(mem, filepath.Join("/s", stableName), file); err != nil {
			t.Fatal(err)
		}
		s, err := openStableStore(mem, "/s", nil)
		if err != nil {
			return
		}
		want := maps.Clone(s.kv)
		if err := s.SetUint64([]byte(keyCurrentTerm), 9); err != nil {
			return // the state does not fit a slot with the change
		}
		want[keyCurrentTerm] = s.kv[keyCurrentTerm]
		s2, err := openStableStore(mem, "/s", nil)
		if err != nil {
			t.Fatalf("reopen after a change: %v", err)
		}
		if !maps.EqualFunc(s2.kv, want, bytes.Equal) {
			t.Fatalf("reopened with %v, want %v", s2.kv, want)
		}
	})
}

// FuzzSnapHeader: a snapshot stream's header of any bytes decodes or is
// refused; one that decodes encodes to a header that decodes the same.
func FuzzSnapHeader(f *testing.F) {
	f.Add(snapHeader{flags: snapHasData, index: 12, term: 3, start: 5, end: 900}.encode())
	f.Add(make([]byte, snapHeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeSnapHeader(b)
		if err != nil {
			return
		}
		again, err := decodeSnapHeader(h.encode())
		if err != nil || again != h {
			t.Fatalf("header %x decodes to %+v, which encodes to one that decodes to %+v %v", b, h, again, err)
		}
	})
}

// FuzzAnchor: the anchor file of any bytes decodes or is refused; one
// that decodes encodes to the same bytes.
func FuzzAnchor(f *testing.F) {
	f.Add(anchor{index: 40, offset: 1234}.encode())
	f.Add(make([]byte, 24))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, ok := decodeAnchor(b)
		if !ok {
			return
		}
		if got := a.encode(); !bytes.Equal(got, b) {
			t.Fatalf("anchor %x decodes to %+v, which encodes to %x", b, a, got)
		}
	})
}

// FuzzEntryFile: an entries file of any bytes opens or is refused with an
// error, never a panic; the records it opens with encode back to the
// bytes they came from, and it takes an append and reopens with it.
func FuzzEntryFile(f *testing.F) {
	mem := vfs.NewMem()
	mem.MkdirAll("/r")
	e, err := openEntryFile(mem, "/r")
	if err != nil {
		f.Fatal(err)
	}
	e.append(sampleSide(1, 5))
	img, _ := vfs.ReadFile(mem, "/r/"+entryFileName)
	f.Add(img)
	f.Add(img[:len(img)-3])
	f.Add(img[:entryFileHeader])
	f.Fuzz(func(t *testing.T, p []byte) {
		ents, size, err := decodeEntryFile(p)
		if err != nil {
			return
		}
		again := append([]byte(nil), p[:entryFileHeader]...)
		for i := range ents {
			if ents[i].pos != int64(len(again)) {
				t.Fatalf("record %d at %d, re-encoded at %d", i, ents[i].pos, len(again))
			}
			again = appendEntryRecord(again, &ents[i])
		}
		if !bytes.Equal(again, p[:size]) {
			t.Fatalf("records re-encode to %x, want %x", again, p[:size])
		}
		mem := vfs.NewMem()
		mem.MkdirAll("/r")
		if err := vfs.WriteFileAtomic(mem, "/r/"+entryFileName, p); err != nil {
			t.Fatal(err)
		}
		e, err := openEntryFile(mem, "/r")
		if err != nil {
			t.Fatalf("decodes but does not open: %v", err)
		}
		next := uint64(1)
		if len(ents) > 0 {
			next = ents[len(ents)-1].Index + 1
		}
		if next == 0 || next > 1<<40 {
			return // sampleSide's offsets would overflow
		}
		add := sampleSide(next, 1)
		if err := e.append(add); err != nil {
			t.Fatal(err)
		}
		e2, err := openEntryFile(mem, "/r")
		if err != nil {
			t.Fatal(err)
		}
		if len(e2.ents) != len(ents)+1 || e2.ents[len(ents)].Index != next {
			t.Fatalf("reopened with %d records, want %d", len(e2.ents), len(ents)+1)
		}
	})
}
