package replication

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/raftlog/raftlog/log/vfs"
)

// stableStore is raft.StableStore as one small file (current term, last
// vote, and the replica's own keys), written in place with fsync on every
// change: it changes rarely, and Raft is unsafe without it.
//
// The file has a fixed size and two slots; a change is written to the slot
// not holding the latest state, so a torn write leaves the other one
// intact, and the state with the higher sequence number among the valid
// slots is the current one. Since the file's blocks were written when it
// was created, a change allocates nothing: it succeeds on a full disk,
// where hashicorp/raft would panic on a failed save of its term.
//
//	file: slot 0 at offset 0, slot 1 at offset stableSlotSize
//	slot  offset  size  field
//	           0     4  magic "RLS2"
//	           4     8  sequence number (the higher valid slot is current)
//	          12     4  body length L
//	          16     L  body: number of entries N (4 bytes), then
//	                    N × (uvarint key length, key, uvarint value length,
//	                    value), keys sorted
//	        16+L     4  CRC-32C of the slot's bytes [0, 16+L)
//	                    zeros to the end of the slot
//
// A file in the earlier format (magic "RLSS", one body and its CRC,
// replaced atomically on every change) is read and rewritten in this one.
//
// Frozen.
type stableStore struct {
	fs   vfs.FS
	path string
	mu   sync.Mutex
	kv   map[string][]byte
	seq  uint64 // sequence number of the current slot
	slot int    // index of the slot holding the current state
	// deferred is set while kv holds a LastVoteTerm not written yet
	// (deferredVoteTerm); prevVoteTerm is what it replaced.
	deferred     bool
	prevVoteTerm []byte
}

// keyLastVoteTerm is hashicorp/raft's key for the term of its last vote.
// Raft saves a vote as that key, then at once keyLastVoteCand, and sends
// the vote only when both are saved: the term is written with the
// candidate, one fsync for the two (a vote was three, with the term's).
// A crash between the two loses a term for which no vote went out.
const (
	keyLastVoteTerm = "LastVoteTerm"
	keyLastVoteCand = "LastVoteCand"
)

const (
	stableName     = "raft.stable"
	stableSlotSize = 4096
	stableHeader   = 16
)

var (
	stableMagic   = [4]byte{'R', 'L', 'S', '2'}
	stableMagicV1 = [4]byte{'R', 'L', 'S', 'S'}
	crcTable      = crc32.MakeTable(crc32.Castagnoli)
	// errStableNotFound is what raft expects for a missing key: it compares
	// the text "not found".
	errStableNotFound = errors.New("not found")
)

// openStableStore opens the store in dir, creating it, when there is
// none, holding initial.
func openStableStore(fsys vfs.FS, dir string, initial map[string][]byte) (*stableStore, error) {
	s := &stableStore{fs: fsys, path: filepath.Join(dir, stableName), kv: map[string][]byte{}}
	b, err := vfs.ReadFile(fsys, s.path)
	if errors.Is(err, fs.ErrNotExist) {
		// A new file: slot 0 holds the initial state, slot 1 nothing
		// valid.
		for k, v := range initial {
			s.kv[k] = append([]byte(nil), v...)
		}
		return s, s.create()
	}
	if err != nil {
		return nil, fmt.Errorf("replication: stable store: %w", err)
	}
	if len(b) >= 4 && [4]byte(b[:4]) == stableMagicV1 {
		if err := s.decodeV1(b); err != nil {
			return nil, fmt.Errorf("replication: stable store %s: %w", s.path, err)
		}
		return s, s.create()
	}
	if len(b) != 2*stableSlotSize {
		return nil, fmt.Errorf("replication: stable store %s: %d bytes, not %d", s.path, len(b), 2*stableSlotSize)
	}
	var errs [2]error
	found := false
	for i := range 2 {
		kv, seq, err := decodeSlot(b[i*stableSlotSize : (i+1)*stableSlotSize])
		if errs[i] = err; err != nil {
			continue
		}
		if !found || seq > s.seq {
			s.kv, s.seq, s.slot, found = kv, seq, i, true
		}
	}
	if !found {
		return nil, fmt.Errorf("replication: stable store %s: no valid slot: slot 0: %v; slot 1: %v", s.path, errs[0], errs[1])
	}
	return s, nil
}

// create writes the whole file with the current state in slot 0, through
// a temporary file and a rename.
func (s *stableStore) create() error {
	img := make([]byte, 2*stableSlotSize)
	s.seq, s.slot = s.seq+1, 0
	if err := encodeSlot(img[:stableSlotSize], s.kv, s.seq); err != nil {
		return fmt.Errorf("replication: stable store: %w", err)
	}
	if err := vfs.WriteFileAtomic(s.fs, s.path, img); err != nil {
		return fmt.Errorf("replication: stable store: %w", err)
	}
	return nil
}

func decodeSlot(b []byte) (map[string][]byte, uint64, error) {
	if [4]byte(b[:4]) != stableMagic {
		return nil, 0, errors.New("bad header")
	}
	seq := binary.BigEndian.Uint64(b[4:12])
	n := binary.BigEndian.Uint32(b[12:16])
	if n > stableSlotSize-stableHeader-4 {
		return nil, 0, errors.New("bad length")
	}
	end := stableHeader + int(n)
	if crc32.Checksum(b[:end], crcTable) != binary.BigEndian.Uint32(b[end:]) {
		return nil, 0, errors.New("crc mismatch")
	}
	kv, err := decodeEntries(b[stableHeader:end])
	return kv, seq, err
}

// decodeV1 reads the earlier format: magic, entries, CRC of the rest.
func (s *stableStore) decodeV1(b []byte) error {
	if len(b) < 12 {
		return errors.New("bad header")
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return errors.New("crc mismatch")
	}
	kv, err := decodeEntries(body[4:])
	if err != nil {
		return err
	}
	s.kv = kv
	return nil
}

// decodeEntries reads N and N key-value pairs.
func decodeEntries(p []byte) (map[string][]byte, error) {
	if len(p) < 4 {
		return nil, errors.New("truncated count")
	}
	n := binary.BigEndian.Uint32(p)
	p = p[4:]
	kv := make(map[string][]byte, min(n, 64))
	for i := uint32(0); i < n; i++ {
		k, rest, ok := readBytes(p)
		if !ok {
			return nil, errors.New("truncated key")
		}
		v, rest, ok := readBytes(rest)
		if !ok {
			return nil, errors.New("truncated value")
		}
		kv[string(k)] = append([]byte(nil), v...)
		p = rest
	}
	return kv, nil
}

func readBytes(p []byte) ([]byte, []byte, bool) {
	n, w := binary.Uvarint(p)
	if w <= 0 || uint64(len(p)-w) < n {
		return nil, nil, false
	}
	return p[w : w+int(n)], p[w+int(n):], true
}

// encodeSlot fills slot (stableSlotSize bytes) with kv under seq.
func encodeSlot(slot []byte, kv map[string][]byte, seq uint64) error {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b := append(slot[:0], stableMagic[:]...)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = append(b, 0, 0, 0, 0) // body length, set below
	b = binary.BigEndian.AppendUint32(b, uint32(len(keys)))
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(kv[k])))
		b = append(b, kv[k]...)
	}
	if len(b)+4 > stableSlotSize {
		return fmt.Errorf("%d bytes of keys and values do not fit a %d-byte slot", len(b), stableSlotSize)
	}
	binary.BigEndian.PutUint32(b[12:16], uint32(len(b)-stableHeader))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
	clear(slot[len(b):stableSlotSize])
	return nil
}

// openRW opens the file for a change. Out of file descriptors (EMFILE,
// ENFILE: a node holding more replicas than its limit allows for), it
// tries again for a while: hashicorp/raft panics when it cannot save its
// term or vote, and a node at 5,000 replicas under a limit of 20,000
// descriptors went down so on its first elections.
func (s *stableStore) openRW() (vfs.File, error) {
	wait := 10 * time.Millisecond
	for deadline := time.Now().Add(stableFDWait); ; {
		f, err := s.fs.OpenRW(s.path)
		if err == nil || !(errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)) || time.Now().After(deadline) {
			return f, err
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
}

// stableFDWait bounds how long a change waits for a file descriptor.
const stableFDWait = 10 * time.Second

// persist writes the state in memory to the slot not holding the current
// one and syncs it; only then is that slot current.
func (s *stableStore) persist() error {
	slot := make([]byte, stableSlotSize)
	if err := encodeSlot(slot, s.kv, s.seq+1); err != nil {
		return err
	}
	f, err := s.openRW()
	if err != nil {
		return err
	}
	next := 1 - s.slot
	if err := vfs.WriteSyncClose(f, slot, int64(next*stableSlotSize)); err != nil {
		return err
	}
	s.seq, s.slot = s.seq+1, next
	return nil
}

// Set implements raft.StableStore.
func (s *stableStore) Set(key, val []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.kv[string(key)]
	if string(key) == keyLastVoteTerm && !s.deferred {
		// Written with the candidate that follows (keyLastVoteTerm).
		s.deferred, s.prevVoteTerm = true, old
		s.kv[string(key)] = append([]byte(nil), val...)
		return nil
	}
	if had && bytes.Equal(old, val) && !s.deferred {
		return nil // durable already
	}
	s.kv[string(key)] = append([]byte(nil), val...)
	if err := s.persist(); err != nil {
		if had {
			s.kv[string(key)] = old
		} else {
			delete(s.kv, string(key))
		}
		if s.deferred && string(key) != keyLastVoteTerm {
			s.restoreVoteTermLocked()
		}
		return fmt.Errorf("replication: stable store: %w", err)
	}
	s.deferred, s.prevVoteTerm = false, nil
	return nil
}

// restoreVoteTermLocked puts back the LastVoteTerm a deferred one
// replaced: the write that was to carry it failed.
func (s *stableStore) restoreVoteTermLocked() {
	if s.prevVoteTerm == nil {
		delete(s.kv, keyLastVoteTerm)
	} else {
		s.kv[keyLastVoteTerm] = s.prevVoteTerm
	}
	s.deferred, s.prevVoteTerm = false, nil
}

// Get implements raft.StableStore.
func (s *stableStore) Get(key []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.kv[string(key)]
	if !ok {
		return nil, errStableNotFound
	}
	return append([]byte(nil), v...), nil
}

// SetUint64 implements raft.StableStore.
func (s *stableStore) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 implements raft.StableStore: a missing key is 0.
func (s *stableStore) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if errors.Is(err, errStableNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("replication: stable key %q holds %d bytes, not a uint64", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}
