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
	s, err := openStableStore(mem, "/s")
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
		s, err := openStableStore(mem, "/s")
		if err != nil {
			return
		}
		want := maps.Clone(s.kv)
		if err := s.SetUint64([]byte(keyCurrentTerm), 9); err != nil {
			return // the state does not fit a slot with the change
		}
		want[keyCurrentTerm] = s.kv[keyCurrentTerm]
		s2, err := openStableStore(mem, "/s")
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
