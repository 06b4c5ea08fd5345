package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"path/filepath"
	"sort"
	"sync"

	"github.com/raftlog/raftlog/log/vfs"
)

// stableStore is raft.StableStore as one small file (current term, last
// vote, and the replica's own keys) that is replaced atomically with fsync
// on every change: it changes rarely, and Raft is unsafe without it.
//
//	offset  size  field
//	     0     4  magic "RLSS"
//	     4     4  number of entries N
//	     8     …  N × (uvarint key length, key, uvarint value length, value)
//	   end-4   4  CRC-32C of everything before it
//
// Frozen.
type stableStore struct {
	fs   vfs.FS
	path string
	mu   sync.Mutex
	kv   map[string][]byte
}

const stableName = "raft.stable"

var (
	stableMagic = [4]byte{'R', 'L', 'S', 'S'}
	crcTable    = crc32.MakeTable(crc32.Castagnoli)
	// errStableNotFound is what raft expects for a missing key: it compares
	// the text "not found".
	errStableNotFound = errors.New("not found")
)

func openStableStore(fsys vfs.FS, dir string) (*stableStore, error) {
	s := &stableStore{fs: fsys, path: filepath.Join(dir, stableName), kv: map[string][]byte{}}
	b, err := vfs.ReadFile(fsys, s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("replication: stable store: %w", err)
	}
	if err := s.decode(b); err != nil {
		return nil, fmt.Errorf("replication: stable store %s: %w", s.path, err)
	}
	return s, nil
}

func (s *stableStore) decode(b []byte) error {
	if len(b) < 12 || [4]byte(b[:4]) != stableMagic {
		return errors.New("bad header")
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return errors.New("crc mismatch")
	}
	n := binary.BigEndian.Uint32(b[4:8])
	p := body[8:]
	for i := uint32(0); i < n; i++ {
		k, rest, ok := readBytes(p)
		if !ok {
			return errors.New("truncated key")
		}
		v, rest, ok := readBytes(rest)
		if !ok {
			return errors.New("truncated value")
		}
		s.kv[string(k)] = append([]byte(nil), v...)
		p = rest
	}
	return nil
}

func readBytes(p []byte) ([]byte, []byte, bool) {
	n, w := binary.Uvarint(p)
	if w <= 0 || uint64(len(p)-w) < n {
		return nil, nil, false
	}
	return p[w : w+int(n)], p[w+int(n):], true
}

func (s *stableStore) persist() error {
	keys := make([]string, 0, len(s.kv))
	for k := range s.kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b := append([]byte(nil), stableMagic[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(keys)))
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(s.kv[k])))
		b = append(b, s.kv[k]...)
	}
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
	return vfs.WriteFileAtomic(s.fs, s.path, b)
}

// Set implements raft.StableStore.
func (s *stableStore) Set(key, val []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.kv[string(key)]
	s.kv[string(key)] = append([]byte(nil), val...)
	if err := s.persist(); err != nil {
		if had {
			s.kv[string(key)] = old
		} else {
			delete(s.kv, string(key))
		}
		return fmt.Errorf("replication: stable store: %w", err)
	}
	return nil
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
