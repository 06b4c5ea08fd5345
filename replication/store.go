package replication

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/log/vfs"
)

// logStore is raft.LogStore over the partition log: the partition log IS
// the Raft log. Each Raft entry is one RecordBatch; its term is the batch's
// partitionLeaderEpoch; entries that are not produced batches are control
// batches (control.go). Offsets are assigned when an entry is stored, from
// the local log end: Raft appends only after the entry before, and every
// replica's log is a prefix of the same sequence, so every replica assigns
// the same offsets and holds byte-identical batches.
//
// A dense in-memory index maps Raft index → (offset, next offset) for the
// entries Raft still holds, [first, last]. It is rebuilt on open by walking
// batch headers from the anchor: the (Raft index, offset) of the first
// entry, kept in a small file written atomically whenever Raft compacts
// (DeleteRange of a prefix) or the log is restarted from a snapshot. Raft's
// compaction does not delete Kafka data: that is retention's job, and the
// log is pinned at the anchor so retention never removes an entry Raft still
// holds.
type logStore struct {
	log *log.Log
	fs  vfs.FS
	dir string
	// side holds the entries that are not produced batches in the dense
	// layout, where only produced batches take offsets (entryfile.go); an
	// entry there sits at an offset without taking it, (offset, offset)
	// in ents. Nil in the legacy layout, where every entry is a batch of
	// the log and Raft's own take an offset each as control batches.
	side *entryFile
	werr atomic.Pointer[error] // see failed

	mu    sync.RWMutex
	first uint64     // Raft index of ents[0]; meaningful when len(ents) > 0
	ents  []entryPos // dense: ents[i] is entry first+i
	// next is the index the next StoreLogs must start at when ents is empty
	// (0: any).
	next uint64
	// bufs and sides are StoreLogs' scratch: the batches to write and
	// the entries file's records.
	bufs  [][]byte
	sides []sideEntry
	// cache holds the entries stored last, by index modulo its size: a
	// leader's replication reads each back for every follower, a
	// follower's FSM reads each back to apply it. It is bounded in entries
	// and in bytes (cacheBytes ≤ entryCacheBytes). A leader caches its
	// entries as they are: a produced entry's bytes are a slice of the
	// Kafka request that carried it, which the cache keeps alive. A
	// replica that does not lead stores entries its append stream reads
	// into chunks it reuses once the append is answered (entryArena), so
	// it caches copies, and of a produced batch only the header, all its
	// FSM reads (see GetLog). A follower's entries leave it once applied.
	cache      [entryCacheSize]*raft.Log
	cacheBytes int
	cacheUsed  bool // some slot may be set
	// applied is the FSM's last applied index (set once the FSM exists).
	applied func() uint64
	// leader reports whether the replica leads. Only a leader stores
	// entries it proposed itself; in any other state (follower, candidate,
	// starting, shutting down) what it stores came from a leader: checked
	// in full, and each produced batch carries the offset its leader
	// assigned, which must be the one this log assigns (a check that the
	// replicas' offsets never drift). Nil: never the leader.
	leader func() bool
}

const (
	entryCacheSize  = 128
	entryCacheBytes = 8 << 20
)

// headerOnlyMark is the Extensions of a cached entry whose Data is only
// the first log.BatchHeaderSize bytes of a produced batch (a follower's,
// see cache), so that GetLog gives it to no leader and the append
// transport refuses to send it (raftlog's produced entries carry no
// extensions; Raft passes them through).
var headerOnlyMark = []byte("raftlog: batch header only")

// isHeaderOnly reports whether e is a cached header (headerOnlyMark).
func isHeaderOnly(e *raft.Log) bool { return bytes.Equal(e.Extensions, headerOnlyMark) }

type entryPos struct {
	offset, next int64
}

// The anchor file. Frozen.
//
//	offset  size  field
//	     0     4  magic "RLAN"
//	     4     8  Raft index of the first entry
//	    12     8  offset of the first entry (the log end when there is none)
//	    20     4  CRC-32C of bytes [0, 20)
const anchorName = "raft.anchor"

var anchorMagic = [4]byte{'R', 'L', 'A', 'N'}

type anchor struct {
	index  uint64
	offset int64
}

func (a anchor) encode() []byte {
	b := append([]byte(nil), anchorMagic[:]...)
	b = binary.BigEndian.AppendUint64(b, a.index)
	b = binary.BigEndian.AppendUint64(b, uint64(a.offset))
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

func readAnchor(fsys vfs.FS, dir string) (anchor, bool, error) {
	b, err := vfs.ReadFile(fsys, filepath.Join(dir, anchorName))
	if errors.Is(err, fs.ErrNotExist) {
		return anchor{}, false, nil
	}
	if err != nil {
		return anchor{}, false, err
	}
	a, ok := decodeAnchor(b)
	if !ok {
		return anchor{}, false, fmt.Errorf("replication: anchor in %s is corrupt", dir)
	}
	return a, true, nil
}

// decodeAnchor decodes the anchor file's bytes, false when they are not
// one (a wrong size, magic or CRC).
func decodeAnchor(b []byte) (anchor, bool) {
	if len(b) != 24 || [4]byte(b[:4]) != anchorMagic || crc32.Checksum(b[:20], crcTable) != binary.BigEndian.Uint32(b[20:]) {
		return anchor{}, false
	}
	return anchor{index: binary.BigEndian.Uint64(b[4:]), offset: int64(binary.BigEndian.Uint64(b[12:]))}, true
}

// openLogStore loads the dense index from the anchor to the log end.
//
// pending is the newest snapshot when it still has its data file (one
// received from a leader), else nil. Unless the anchor is the one its
// replay writes last ((index + 1, end): the replay ended, only dropping
// the data file did not, and the entries stored since must stay), the
// snapshot is to be replayed before Raft starts and the store opens empty
// (replay is true), trusting neither the log nor the anchor: a replay cut
// short by a crash leaves the log restarted and partly rewritten while the
// anchor still maps the old log, past the new end or, worse, onto batches
// that are not the entries it names. The replay resets the log and writes
// the anchor anew.
func openLogStore(l *log.Log, fsys vfs.FS, dir string, pending *snapMeta, dense bool) (s *logStore, replay bool, err error) {
	s = &logStore{log: l, fs: fsys, dir: dir}
	a, ok, err := readAnchor(fsys, dir)
	if err := s.openLayout(dense, ok); err != nil {
		return nil, false, err
	}
	if pending != nil && !(err == nil && ok && a.index == pending.Index+1 && a.offset == pending.End && l.EndOffset() >= a.offset) {
		return s, true, nil
	}
	if err != nil {
		return s, false, err
	}
	if !ok {
		if l.EndOffset() != l.StartOffset() {
			return s, false, fmt.Errorf("replication: %s holds data but no Raft anchor", l.Dir())
		}
		return s, false, nil
	}
	end := l.EndOffset()
	if a.offset > end {
		// The anchor is written only at fsynced points, so this is damage.
		return s, false, fmt.Errorf("replication: anchor offset %d past the log end %d", a.offset, end)
	}
	s.first, s.next = a.index, a.index
	if s.side != nil {
		err = s.merge(a)
	} else if a.offset < end {
		err = l.WalkBatches(a.offset, func(h log.Batch) bool {
			s.ents = append(s.ents, entryPos{offset: h.BaseOffset(), next: h.NextOffset()})
			return true
		})
	}
	if err != nil {
		return s, false, fmt.Errorf("replication: rebuild Raft index: %w", err)
	}
	l.Pin(a.offset)
	return s, false, nil
}

// openLayout finds which layout the replica's files are in and opens the
// entries file of the dense one. A replica with an entries file is dense;
// one without it but with an anchor or data is legacy, written before the
// dense layout existed, and keeps it (renumbering its records would move
// offsets consumers committed); a new replica takes the layout dense
// asks for, which must be every replica's of the group: the offsets
// would otherwise differ between them. A replica whose files are not in
// the layout asked for is refused.
func (s *logStore) openLayout(dense, anchored bool) error {
	has, err := entryFileExists(s.fs, s.dir)
	if err != nil {
		return fmt.Errorf("replication: %w", err)
	}
	legacy := !has && (anchored || s.log.EndOffset() != s.log.StartOffset())
	switch {
	case has && !dense:
		return fmt.Errorf("replication: %s is in the dense offset layout, the partition's is legacy", s.dir)
	case legacy && dense:
		return fmt.Errorf("replication: %s is in the legacy offset layout (Raft entries take offsets), the partition's is dense", s.dir)
	case !dense:
		return nil
	}
	s.side, err = openEntryFile(s.fs, s.dir)
	return err
}

// merge rebuilds ents in the dense layout from the anchor: the produced
// batches of the log from the anchor's offset, with the entries file's
// records between them by index, each at the offset it names (before
// the batch starting there). A record past the log end is of an entry
// the crash lost with the log's tail, stored after the batches that
// remain: it is cut. Anything else out of place is damage: a record at
// an offset the batches do not reach by its index, or a batch of a
// later term with no entry of that term before it (every term's entries
// start with its leader's no-op, in the entries file).
func (s *logStore) merge(a anchor) error {
	side := s.side.ents[s.side.find(a.index):]
	idx, pos, term, k := a.index, a.offset, uint64(0), 0
	takeSide := func() error {
		for k < len(side) && side[k].Index == idx {
			if side[k].offset != pos {
				return fmt.Errorf("entry %d of the entries file is at offset %d, the log reaches %d", idx, side[k].offset, pos)
			}
			s.ents = append(s.ents, entryPos{offset: pos, next: pos})
			term = side[k].Term
			idx++
			k++
		}
		return nil
	}
	var ferr error
	err := s.log.WalkBatches(a.offset, func(h log.Batch) bool {
		if ferr = takeSide(); ferr != nil {
			return false
		}
		if k < len(side) && side[k].offset < h.NextOffset() {
			ferr = fmt.Errorf("entry %d of the entries file is at offset %d, inside entry %d's batch at [%d, %d)", side[k].Index, side[k].offset, idx, h.BaseOffset(), h.NextOffset())
			return false
		}
		if t := uint64(uint32(h.LeaderEpoch())); term != 0 && t > term {
			ferr = fmt.Errorf("entry %d (offset %d) is of term %d, the entry before it of term %d: the entries file lost the entries between", idx, h.BaseOffset(), t, term)
			return false
		} else {
			term = t
		}
		s.ents = append(s.ents, entryPos{offset: h.BaseOffset(), next: h.NextOffset()})
		idx++
		pos = h.NextOffset()
		return true
	})
	if err == nil {
		err = ferr
	}
	if err == nil {
		err = takeSide()
	}
	if err != nil {
		return err
	}
	if k < len(side) {
		if side[k].offset <= pos {
			return fmt.Errorf("entry %d of the entries file is at offset %d, the entry before it is %d", side[k].Index, side[k].offset, idx-1)
		}
		return s.side.truncateFrom(side[k].Index)
	}
	return nil
}

// failed records a write of the store's own files (the anchor, the
// entries file) that failed: as a failed write of the log, it stops the
// replica until it is reopened (writeErr).
func (s *logStore) failed(err error) {
	s.werr.CompareAndSwap(nil, &err)
}

// writeErr is the first write of the store's own files that failed.
func (s *logStore) writeErr() error {
	if p := s.werr.Load(); p != nil {
		return *p
	}
	return nil
}

// writeAnchor records that entry a.index is at offset a.offset, once the
// log is durable below that offset: an anchor only ever names a point on
// disk, which openLogStore relies on.
func (s *logStore) writeAnchor(a anchor) error {
	if err := s.log.FlushTo(a.offset); err != nil {
		return err
	}
	if err := vfs.WriteFileAtomic(s.fs, filepath.Join(s.dir, anchorName), a.encode()); err != nil {
		return fmt.Errorf("replication: write anchor: %w", err)
	}
	s.log.Pin(a.offset)
	return nil
}

// FirstIndex implements raft.LogStore.
func (s *logStore) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.ents) == 0 {
		return 0, nil
	}
	return s.first, nil
}

// LastIndex implements raft.LogStore.
func (s *logStore) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.ents) == 0 {
		return 0, nil
	}
	return s.first + uint64(len(s.ents)) - 1, nil
}

// leading reports whether the replica leads (see leader).
func (s *logStore) leading() bool { return s.leader != nil && s.leader() }

// IsMonotonic implements raft.MonotonicLogStore: indexes are dense.
func (s *logStore) IsMonotonic() bool { return true }

// GetLog implements raft.LogStore. raft.ErrLogNotFound is returned
// unwrapped: raft compares with ==.
//
// On a replica that does not lead, a produced batch still in the cache
// comes back as its header only (log.BatchHeaderSize bytes): all that
// Raft reads of an entry there is its term (checking a leader's append)
// and, to apply it, what the FSM reads, which of a produced batch is the
// header (producer state, offsets); its Extensions are headerOnlyMark. A
// leader, whose replication sends entries on, reads every entry in full.
// A replication goroutine still running for a replica that just stepped
// down may read a header: the append transport refuses to send it.
func (s *logStore) GetLog(index uint64, out *raft.Log) error {
	s.mu.RLock()
	if len(s.ents) == 0 || index < s.first || index >= s.first+uint64(len(s.ents)) {
		s.mu.RUnlock()
		return raft.ErrLogNotFound
	}
	pos := s.ents[index-s.first]
	if c := s.cache[index%entryCacheSize]; c != nil && c.Index == index && (!isHeaderOnly(c) || !s.leading()) {
		*out = *c
		s.mu.RUnlock()
		return nil
	}
	if pos.next == pos.offset {
		// In the entries file (a batch always takes an offset).
		se, ok := s.side.get(index)
		s.mu.RUnlock()
		if !ok {
			return fmt.Errorf("replication: entry %d is not in the entries file", index)
		}
		*out = se.Log
		return nil
	}
	s.mu.RUnlock()
	b, err := s.log.ReadBatch(pos.offset)
	if err != nil {
		return fmt.Errorf("replication: read entry %d at offset %d: %w", index, pos.offset, err)
	}
	*out = raft.Log{Index: index, Term: uint64(uint32(b.LeaderEpoch()))}
	if b.IsControl() {
		err := decodeControl(b, out)
		switch {
		case err == nil && isCommandControl(out.Type):
			out.Type, out.Data, out.AppendedAt, out.Extensions = raft.LogCommand, b, timeZero, nil
			return nil
		case err == nil:
			return nil
		case !errors.Is(err, errNotControl):
			return err
		}
	}
	out.Type = raft.LogCommand
	out.Data = b
	return nil
}

// StoreLog implements raft.LogStore.
func (s *logStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore: one vectored write for all
// produced batches, and, in the dense layout, one fsynced append to the
// entries file for all other entries, made first: a crash then loses a
// record of the entries file only with every batch stored after it.
func (s *logStore) StoreLogs(logs []*raft.Log) (err error) {
	if len(logs) == 0 {
		return nil
	}
	if err := s.writeErr(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	held := len(s.ents)
	want := s.next
	if held > 0 {
		want = s.first + uint64(held)
	}
	if want != 0 && logs[0].Index != want {
		return fmt.Errorf("replication: store entry %d, expected %d", logs[0].Index, want)
	}
	// The entries' positions go into ents as they are worked out; on an
	// error they go again.
	defer func() {
		if err != nil {
			s.ents = s.ents[:held]
		}
		clear(s.bufs) // keeps no request (or arena chunk) alive
		clear(s.sides)
		s.bufs, s.sides = s.bufs[:0], s.sides[:0]
	}()
	durable := false
	// A leader's batches were validated where they entered the node
	// (log.SplitBatches, for a Produce request) and since then only
	// their offsets and epochs (outside the CRC) are rewritten: they are
	// not checked again. A follower's entries enter the node here, from
	// its leader: each is validated in full, and each produced batch
	// carries the offset its leader gave it, which must be the one this
	// log gives it (a check that the replicas' offsets never drift).
	leading := s.leading()
	next := s.log.EndOffset()
	for i, l := range logs {
		if i > 0 && l.Index != logs[i-1].Index+1 {
			return fmt.Errorf("replication: entries %d and %d not contiguous", logs[i-1].Index, l.Index)
		}
		if l.Type == raft.LogCommand && !leading {
			size, err := log.ValidateBatch(l.Data, 0)
			if err != nil {
				return fmt.Errorf("replication: entry %d: %w", l.Index, err)
			}
			if size != len(l.Data) {
				return fmt.Errorf("replication: entry %d holds %d bytes after its batch", l.Index, len(l.Data)-size)
			}
		}
		produced := l.Type == raft.LogCommand && !log.Batch(l.Data).IsControl()
		if s.side != nil && !produced {
			// Dense layout: Raft's own entries and raftlog's commands
			// take no offset.
			s.sides = append(s.sides, sideEntry{Log: *l, offset: next})
			s.ents = append(s.ents, entryPos{offset: next, next: next})
			continue
		}
		var b []byte
		switch {
		case produced:
			b = l.Data
			if bb := log.Batch(b); !leading && bb.BaseOffset() != 0 && bb.BaseOffset() != next {
				return fmt.Errorf("replication: entry %d was written at offset %d by the leader, this log would put it at %d: the replicas' offsets drifted apart", l.Index, bb.BaseOffset(), next)
			}
			log.Batch(b).SetLeaderEpoch(int32(l.Term))
		case l.Type == raft.LogCommand:
			b = l.Data // a command's control batch, stored as it is
			log.Batch(b).SetLeaderEpoch(int32(l.Term))
		default:
			b = encodeControl(l)
			// Membership must survive a power loss: without its
			// configuration a replica cannot even take part in the
			// recovery of the group. It changes rarely, so it is fsynced.
			durable = durable || l.Type == raft.LogConfiguration
		}
		s.bufs = append(s.bufs, b)
		n := next + int64(log.Batch(b).LastOffsetDelta()) + 1
		s.ents = append(s.ents, entryPos{offset: next, next: n})
		next = n
	}
	span := func(err error) error {
		return fmt.Errorf("replication: store entries %d-%d: %w", logs[0].Index, logs[len(logs)-1].Index, err)
	}
	if held == 0 {
		// A new run of entries: anchor it first.
		if err := s.writeAnchor(anchor{index: logs[0].Index, offset: s.log.EndOffset()}); err != nil {
			s.failed(err)
			return err
		}
		s.first = logs[0].Index
	}
	if len(s.sides) > 0 {
		if err := s.side.append(s.sides); err != nil {
			s.failed(err)
			return span(err)
		}
	}
	if len(s.bufs) > 0 {
		if _, err := s.log.AppendValidated(s.bufs, -1); err != nil {
			if len(s.sides) > 0 {
				// Raft will store these entries again: their records go.
				if terr := s.side.truncateFrom(logs[0].Index); terr != nil {
					err = errors.Join(err, terr)
				}
			}
			return span(err)
		}
	}
	if end := s.log.EndOffset(); end != next {
		return span(fmt.Errorf("the log ends at %d, the entries at %d", end, next))
	}
	s.cacheEntries(logs, leading)
	if durable {
		return s.log.Flush()
	}
	return nil
}

// cacheEntries puts the entries just stored into the cache, then drops
// the oldest cached entries while the cache holds more than
// entryCacheBytes (the newest entry always stays: replication reads it
// next). A replica that does not lead (leading false) caches copies,
// and of a produced batch only its header. Called with s.mu held.
func (s *logStore) cacheEntries(logs []*raft.Log, leading bool) {
	s.cacheUsed = true
	for _, l := range logs {
		slot := &s.cache[l.Index%entryCacheSize]
		if *slot != nil {
			s.cacheBytes -= len((*slot).Data)
		}
		// A copy of the Log: l may sit in a block of entries decoded
		// together, which a pointer to it would keep alive with every
		// entry's data.
		c := *l
		if !leading {
			// The bytes are the append stream's, reused once it answers.
			if l.Type == raft.LogCommand && len(l.Data) >= log.BatchHeaderSize && !log.Batch(l.Data).IsControl() {
				c.Data, c.Extensions = bytes.Clone(l.Data[:log.BatchHeaderSize]), headerOnlyMark
			} else {
				c.Data, c.Extensions = bytes.Clone(l.Data), bytes.Clone(l.Extensions)
			}
		}
		*slot = &c
		s.cacheBytes += len(c.Data)
	}
	last := logs[len(logs)-1].Index
	for i := last - min(last, entryCacheSize-1); i < last && s.cacheBytes > entryCacheBytes; i++ {
		slot := &s.cache[i%entryCacheSize]
		if *slot != nil && (*slot).Index == i {
			s.cacheBytes -= len((*slot).Data)
			*slot = nil
		}
	}
}

// releaseApplied drops the cached entries up to index once the FSM has
// applied them, on a follower: nothing reads them again there (a leader
// keeps them for followers that lag).
func (s *logStore) releaseApplied(index uint64) {
	if s.leading() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cacheBytes == 0 && !s.cacheUsed {
		return
	}
	for i, c := range s.cache {
		if c != nil && c.Index <= index {
			s.cacheBytes -= len(c.Data)
			s.cache[i] = nil
		}
	}
}

// clearCache empties the cache. Called with s.mu held.
func (s *logStore) clearCache() {
	if s.cacheUsed {
		s.cache = [entryCacheSize]*raft.Log{}
	}
	s.cacheBytes, s.cacheUsed = 0, false
}

// DeleteRange implements raft.LogStore: a prefix after a snapshot (the
// Kafka data stays; the anchor moves), a conflicting suffix on a follower
// (the partition log is truncated), or everything after a snapshot was
// installed.
func (s *logStore) DeleteRange(min, max uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ents) == 0 {
		return nil
	}
	s.clearCache()
	last := s.first + uint64(len(s.ents)) - 1
	if min < s.first {
		min = s.first
	}
	if max > last {
		max = last
	}
	if min > max {
		return nil
	}
	// Raft deletes a prefix only of entries it has applied (compaction
	// after a snapshot: the Kafka data stays), and a suffix only of entries
	// it has not committed (a conflict: the data goes). A range that is the
	// whole store is one or the other by that rule.
	compaction := s.applied != nil && max <= s.applied()
	switch {
	case min == s.first && max == last && compaction:
		end := s.ents[len(s.ents)-1].next
		s.next = last + 1
		s.ents = s.ents[:0]
		if err := s.writeAnchor(anchor{index: s.next, offset: end}); err != nil {
			return err
		}
		return s.dropSide(s.next)
	case min == s.first && max == last:
		cut := s.ents[0].offset
		if err := s.truncate(min, cut); err != nil {
			return err
		}
		s.next = min
		s.ents = s.ents[:0]
		return s.writeAnchor(anchor{index: min, offset: cut})
	case min == s.first:
		keep := s.ents[max-s.first+1:]
		a := anchor{index: max + 1, offset: keep[0].offset}
		if err := s.writeAnchor(a); err != nil {
			return err
		}
		s.ents = append(s.ents[:0:0], keep...)
		s.first = max + 1
		return s.dropSide(s.first)
	case max == last:
		cut := s.ents[min-s.first].offset
		if err := s.truncate(min, cut); err != nil {
			return err
		}
		s.ents = s.ents[:min-s.first]
		return nil
	}
	return fmt.Errorf("replication: delete of entries %d-%d inside [%d, %d]", min, max, s.first, last)
}

// truncate removes entry min and every later one: the log's batches from
// offset cut (fsynced), then the entries file's records from min. A crash
// between the two leaves records only of entries before the cut.
func (s *logStore) truncate(min uint64, cut int64) error {
	if _, err := s.log.TruncateTo(cut); err != nil {
		return fmt.Errorf("replication: truncate to entry %d (offset %d): %w", min, cut, err)
	}
	if s.side != nil {
		return s.side.truncateFrom(min)
	}
	return nil
}

// dropSide forgets the entries file's records below index (compacted
// away by Raft).
func (s *logStore) dropSide(index uint64) error {
	if s.side == nil {
		return nil
	}
	return s.side.dropBefore(index)
}

// holds reports whether the store holds entry index with that term: then,
// by Raft's log matching, it holds everything a snapshot ending there
// stands for.
func (s *logStore) holds(index, term uint64) bool {
	var l raft.Log
	return s.GetLog(index, &l) == nil && l.Term == term
}

// offsetAfter is the offset following entry index, when the store holds it.
func (s *logStore) offsetAfter(index uint64) (int64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.ents) == 0 || index < s.first || index >= s.first+uint64(len(s.ents)) {
		return 0, false
	}
	return s.ents[index-s.first].next, true
}

// entryAt returns the position of entry index.
func (s *logStore) entryAt(index uint64) (entryPos, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.ents) == 0 || index < s.first || index >= s.first+uint64(len(s.ents)) {
		return entryPos{}, false
	}
	return s.ents[index-s.first], true
}

// reset empties the store after the log was restarted from a snapshot
// ending at entry index (the log end is that entry's next offset).
func (s *logStore) reset(index uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ents = s.ents[:0]
	s.clearCache()
	s.next = index + 1
	if s.side != nil {
		// Before the anchor: records of the old log above index must not
		// meet the new anchor.
		if err := s.side.reset(); err != nil {
			return err
		}
	}
	return s.writeAnchor(anchor{index: index + 1, offset: s.log.EndOffset()})
}

// firstOffset is the offset of the first entry the store holds (the log
// end when it holds none).
func (s *logStore) firstOffset() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.ents) == 0 {
		return s.log.EndOffset()
	}
	return s.ents[0].offset
}
