package replication

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/log/vfs"
)

// Snapshots. The data of a partition is its log, so a snapshot on disk is
// metadata only: the Raft index and term it covers, and the log range
// [start, end) it stands for (end is the offset after the entry at the
// index; start the log start when it was taken). The segments up to end
// are fsynced before the metadata is written, since Raft trusts the larger
// of its last log entry and last snapshot.
//
// When Raft sends a snapshot to a follower that is behind the leader's log
// start (or new), Open streams the retained batches of [start, end) from
// the log behind a header; the follower's sink keeps the stream in a data
// file until Restore has replayed it into the follower's log, then drops it.
//
// Stream header (frozen):
//
//	offset  size  field
//	     0     4  magic "RLSN"
//	     4     1  version (1)
//	     5     1  flags: 1 = batches follow the header
//	     6     2  zero
//	     8     8  Raft index
//	    16     8  Raft term
//	    24     8  log start offset
//	    32     8  end offset
//	    40     4  CRC-32C of bytes [0, 40)
const (
	snapHeaderSize = 44
	snapHasData    = 1
	snapDir        = "snapshots"
	snapRetain     = 2
)

var snapMagic = [4]byte{'R', 'L', 'S', 'N'}

type snapHeader struct {
	flags      byte
	index      uint64
	term       uint64
	start, end int64
}

func (h snapHeader) encode() []byte {
	b := make([]byte, snapHeaderSize)
	copy(b, snapMagic[:])
	b[4] = 1
	b[5] = h.flags
	binary.BigEndian.PutUint64(b[8:], h.index)
	binary.BigEndian.PutUint64(b[16:], h.term)
	binary.BigEndian.PutUint64(b[24:], uint64(h.start))
	binary.BigEndian.PutUint64(b[32:], uint64(h.end))
	binary.BigEndian.PutUint32(b[40:], crc32.Checksum(b[:40], crcTable))
	return b
}

func decodeSnapHeader(b []byte) (snapHeader, error) {
	if len(b) != snapHeaderSize || [4]byte(b[:4]) != snapMagic || b[4] != 1 {
		return snapHeader{}, errors.New("replication: not a raftlog snapshot stream")
	}
	if crc32.Checksum(b[:40], crcTable) != binary.BigEndian.Uint32(b[40:]) {
		return snapHeader{}, errors.New("replication: snapshot header crc mismatch")
	}
	return snapHeader{
		flags: b[5], index: binary.BigEndian.Uint64(b[8:]), term: binary.BigEndian.Uint64(b[16:]),
		start: int64(binary.BigEndian.Uint64(b[24:])), end: int64(binary.BigEndian.Uint64(b[32:])),
	}, nil
}

// snapMeta is the metadata file of one snapshot (JSON: small and rare).
type snapMeta struct {
	raft.SnapshotMeta
	Start   int64 `json:"start"`
	End     int64 `json:"end"`
	HasData bool  `json:"has_data"` // a received stream kept until Restore replayed it
}

// snapshotStore is raft.SnapshotStore for a partition.
type snapshotStore struct {
	fs  vfs.FS
	dir string
	log *log.Log
	// store locates the snapshot's entry: its end offset is where the
	// snapshot ends (Raft's own entries after the last applied command,
	// a noop or a barrier, included: they hold offsets too).
	store *logStore
	mu    sync.Mutex
	// local is set by the FSM's Snapshot: Raft calls Create with the same
	// arguments for its own snapshots and for installs from a leader, and
	// only the latter are checked (redundantInstall).
	local atomic.Bool
}

func openSnapshotStore(fsys vfs.FS, replicaDir string, l *log.Log) (*snapshotStore, error) {
	return &snapshotStore{fs: fsys, dir: filepath.Join(replicaDir, snapDir), log: l}, nil
}

func (s *snapshotStore) metaPath(id string) string { return filepath.Join(s.dir, id+".meta") }
func (s *snapshotStore) dataPath(id string) string { return filepath.Join(s.dir, id+".data") }

// Create implements raft.SnapshotStore.
func (s *snapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	if version != 1 {
		return nil, fmt.Errorf("replication: snapshot version %d not supported", version)
	}
	if !s.local.Swap(false) { // installed from a leader
		if err := s.redundantInstall(index, term); err != nil {
			return nil, err
		}
	}
	// The directory is made with the first snapshot: a new replica's
	// creation costs a directory and an fsync less.
	if err := vfs.MkdirAllSync(s.fs, s.dir); err != nil {
		return nil, err
	}
	id := fmt.Sprintf("%020d-%020d-%d", term, index, time.Now().UnixNano())
	meta := snapMeta{SnapshotMeta: raft.SnapshotMeta{
		Version: version, ID: id, Index: index, Term: term,
		Configuration: configuration, ConfigurationIndex: configurationIndex,
		Peers: raft.EncodeConfiguration(configuration),
	}}
	return &snapSink{store: s, meta: meta}, nil
}

// redundantInstall refuses the install of a snapshot that ends at an
// entry this replica holds with the same term, when it holds entries past
// it too. Such an install comes from a replication goroutine of the
// leader's for a server id that is gone, at the address of its new
// incarnation (hashicorp/raft's best-effort replication as it stops a
// removed server's), after the new one was already brought further.
// Installed, it would empty the log store while Raft's own last index
// stays past the snapshot (raft.installSnapshot resets neither), and the
// replica could then neither take the next entries nor apply the
// committed ones (raft panics when a committed entry is not found).
// Where the terms differ the install goes ahead.
func (s *snapshotStore) redundantInstall(index, term uint64) error {
	if s.store == nil {
		return nil
	}
	last, err := s.store.LastIndex()
	if err != nil || last <= index {
		return err
	}
	first, err := s.store.FirstIndex()
	if err != nil {
		return err
	}
	held := false
	switch {
	case index >= first:
		held = s.store.holds(index, term)
	case index+1 == first:
		// The entry before the first held is the newest snapshot's.
		if metas, err := s.list(); err == nil && len(metas) > 0 {
			held = metas[0].Index == index && metas[0].Term == term
		}
	}
	if held {
		return fmt.Errorf("replication: refusing to install snapshot %d (term %d): this replica holds it and entries up to %d", index, term, last)
	}
	return nil
}

// List implements raft.SnapshotStore: newest first.
func (s *snapshotStore) List() ([]*raft.SnapshotMeta, error) {
	metas, err := s.list()
	if err != nil {
		return nil, err
	}
	out := make([]*raft.SnapshotMeta, len(metas))
	for i := range metas {
		m := metas[i].SnapshotMeta
		out[i] = &m
	}
	return out, nil
}

func (s *snapshotStore) list() ([]snapMeta, error) {
	names, err := s.fs.List(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // none taken yet
	}
	if err != nil {
		return nil, err
	}
	var metas []snapMeta
	for _, n := range names {
		if !strings.HasSuffix(n, ".meta") {
			continue
		}
		m, err := s.readMeta(strings.TrimSuffix(n, ".meta"))
		if err != nil {
			continue // a damaged snapshot is skipped; an older one serves
		}
		metas = append(metas, m)
	}
	sort.Slice(metas, func(i, j int) bool {
		if metas[i].Term != metas[j].Term {
			return metas[i].Term > metas[j].Term
		}
		if metas[i].Index != metas[j].Index {
			return metas[i].Index > metas[j].Index
		}
		return metas[i].ID > metas[j].ID
	})
	return metas, nil
}

func (s *snapshotStore) readMeta(id string) (snapMeta, error) {
	b, err := vfs.ReadFile(s.fs, s.metaPath(id))
	if err != nil {
		return snapMeta{}, err
	}
	var m snapMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return snapMeta{}, fmt.Errorf("replication: snapshot %s: %w", id, err)
	}
	return m, nil
}

func (s *snapshotStore) writeMeta(m snapMeta) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return vfs.WriteFileAtomic(s.fs, s.metaPath(m.ID), b)
}

// prune deletes all but the newest snapRetain snapshots.
func (s *snapshotStore) prune() {
	metas, err := s.list()
	if err != nil {
		return
	}
	for i := snapRetain; i < len(metas); i++ {
		_ = s.fs.Remove(s.metaPath(metas[i].ID))
		_ = s.fs.RemoveAll(s.dataPath(metas[i].ID))
	}
}

// Open implements raft.SnapshotStore.
func (s *snapshotStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	m, err := s.readMeta(id)
	if err != nil {
		return nil, nil, err
	}
	h := snapHeader{flags: snapHasData, index: m.Index, term: m.Term, start: m.Start, end: m.End}
	rm := m.SnapshotMeta
	if m.HasData {
		f, err := s.fs.Open(s.dataPath(id))
		if err != nil {
			return nil, nil, err
		}
		size, _ := f.Size()
		rm.Size = snapHeaderSize + size
		return &rm, &snapReader{id: id, header: h.encode(), data: &fileReader{f: f}}, nil
	}
	start := m.Start
	if ls := s.log.StartOffset(); ls > start {
		start = ls // retention moved on; what is retained is what is sent
	}
	h.start = start
	// Raft sends exactly Size bytes: the stream's length must be known.
	n, err := s.log.BytesBetween(start, m.End)
	if err != nil {
		return nil, nil, fmt.Errorf("replication: snapshot %s: %w", id, err)
	}
	rm.Size = snapHeaderSize + n
	return &rm, &snapReader{id: id, header: h.encode(), data: &logReader{log: s.log, next: start, end: m.End, left: n}}, nil
}

// snapSink receives a snapshot: from Persist (the header only) or from a
// leader's stream (header and batches).
type snapSink struct {
	store  *snapshotStore
	meta   snapMeta
	header []byte
	data   vfs.File
	size   int64
	err    error
	done   bool
}

func (k *snapSink) ID() string { return k.meta.ID }

func (k *snapSink) Write(p []byte) (int, error) {
	if k.err != nil {
		return 0, k.err
	}
	n := len(p)
	if len(k.header) < snapHeaderSize {
		take := min(snapHeaderSize-len(k.header), len(p))
		k.header = append(k.header, p[:take]...)
		p = p[take:]
		if len(k.header) == snapHeaderSize {
			h, err := decodeSnapHeader(k.header)
			if err != nil {
				k.err = err
				return 0, err
			}
			k.meta.Start, k.meta.End = h.start, h.end
			if h.flags&snapHasData == 0 && k.store.store != nil {
				// A local snapshot ends after the entry at its index, which
				// the high watermark may not cover (Raft applies noops and
				// barriers without the FSM). A follower restoring it must
				// end its log exactly there, or later offsets shift.
				if end, ok := k.store.store.offsetAfter(k.meta.Index); ok && end > k.meta.End {
					k.meta.End = end
				}
			}
			if h.flags&snapHasData != 0 {
				k.meta.HasData = true
				if k.data, err = k.store.fs.Create(k.store.dataPath(k.meta.ID)); err != nil {
					k.err = err
					return 0, err
				}
			}
		}
	}
	if len(p) > 0 {
		if k.data == nil {
			k.err = errors.New("replication: snapshot bytes after a metadata-only header")
			return 0, k.err
		}
		if _, err := k.data.WriteAt(p, k.size); err != nil {
			k.err = err
			return 0, err
		}
		k.size += int64(len(p))
	}
	return n, nil
}

func (k *snapSink) Close() error {
	if k.done {
		return nil
	}
	k.done = true
	if k.err == nil && len(k.header) != snapHeaderSize {
		k.err = errors.New("replication: snapshot without a header")
	}
	if k.data != nil {
		if k.err == nil {
			k.err = k.data.Sync()
		}
		k.data.Close()
	}
	if k.err != nil {
		k.cleanup()
		return k.err
	}
	k.meta.Size = snapHeaderSize + k.size
	if err := k.store.fs.SyncDir(k.store.dir); err != nil {
		return err
	}
	if err := k.store.writeMeta(k.meta); err != nil {
		k.cleanup()
		return err
	}
	k.store.prune()
	return nil
}

func (k *snapSink) Cancel() error {
	k.done = true
	if k.data != nil {
		k.data.Close()
	}
	k.cleanup()
	return nil
}

func (k *snapSink) cleanup() {
	_ = k.store.fs.RemoveAll(k.store.dataPath(k.meta.ID))
	_ = k.store.fs.RemoveAll(k.store.metaPath(k.meta.ID))
}

// dropData turns a received snapshot into a metadata-only one once its
// batches are in the log.
func (s *snapshotStore) dropData(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.readMeta(id)
	if err != nil || !m.HasData {
		return err
	}
	m.HasData = false
	if err := s.writeMeta(m); err != nil {
		return err
	}
	return s.fs.RemoveAll(s.dataPath(id))
}

// dropAllData makes every received snapshot metadata-only. A failure
// leaves a snapshot with data behind, which Open recognises as replayed
// by the anchor the replay wrote.
func (s *snapshotStore) dropAllData() error {
	metas, err := s.list()
	if err != nil {
		return err
	}
	for _, m := range metas {
		if m.HasData {
			if err := s.dropData(m.ID); err != nil {
				return fmt.Errorf("replication: drop the data of snapshot %s: %w", m.ID, err)
			}
		}
	}
	return nil
}

// snapReader is the stream of a snapshot: header, then batches.
type snapReader struct {
	id     string
	header []byte
	data   io.ReadCloser
}

func (r *snapReader) Read(p []byte) (int, error) {
	if len(r.header) > 0 {
		n := copy(p, r.header)
		r.header = r.header[n:]
		return n, nil
	}
	return r.data.Read(p)
}

func (r *snapReader) Close() error { return r.data.Close() }

type fileReader struct {
	f   vfs.File
	off int64
}

func (r *fileReader) Read(p []byte) (int, error) {
	n, err := r.f.ReadAt(p, r.off)
	r.off += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

func (r *fileReader) Close() error { return r.f.Close() }

// logReader streams whole batches of [next, end) from the log.
type logReader struct {
	log       *log.Log
	next, end int64
	left      int64 // bytes the stream promised
	buf       []byte
}

const snapChunk = 1 << 20

func (r *logReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.next >= r.end || r.left <= 0 {
			if r.left != 0 {
				return 0, fmt.Errorf("replication: snapshot stream ended %d bytes short", r.left)
			}
			return 0, io.EOF
		}
		b, err := r.log.Read(r.next, snapChunk, r.end)
		if err != nil {
			return 0, fmt.Errorf("replication: snapshot stream at %d: %w", r.next, err)
		}
		if len(b) == 0 {
			return 0, fmt.Errorf("replication: snapshot stream: no batch at %d before %d", r.next, r.end)
		}
		var last log.Batch
		log.Batches(b, func(x log.Batch) bool { last = x; return true })
		r.next = last.NextOffset()
		if int64(len(b)) > r.left {
			return 0, fmt.Errorf("replication: snapshot stream changed under it (retention or truncation)")
		}
		r.left -= int64(len(b))
		r.buf = b
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *logReader) Close() error { return nil }
