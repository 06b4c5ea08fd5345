package replication

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log"
)

// fsm is the Raft state machine of a partition. It copies nothing: the
// entries are already in the log, so applying one only advances the high
// watermark (the commit point readers may see up to) and, for a rejoin
// marker, tells the vote guard.
type fsm struct {
	store *logStore
	snaps *snapshotStore
	log   *log.Log
	// onMarker is called with each applied rejoin marker's payload.
	onMarker func(m marker)
	onError  func(error)
	onBatch  func(b log.Batch) // every applied produced batch

	mu      sync.Mutex
	hw      int64         // high watermark: offsets below it are committed
	applied uint64        // last applied Raft index
	changed chan struct{} // closed and replaced when hw moves
}

// AppliedEntry is what Apply returns for a produced batch: where it is.
type AppliedEntry struct {
	BaseOffset, NextOffset int64
}

func newFSM(store *logStore, snaps *snapshotStore, l *log.Log, hw int64) *fsm {
	return &fsm{store: store, snaps: snaps, log: l, hw: hw, changed: make(chan struct{})}
}

// HighWatermark is the offset below which everything is committed.
func (f *fsm) HighWatermark() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hw
}

// appliedIndex is the last applied Raft index (0 before any).
func (f *fsm) appliedIndex() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied
}

// waitChan is closed when the high watermark next moves.
func (f *fsm) waitChan() (<-chan struct{}, int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed, f.hw
}

func (f *fsm) advance(hw int64, index uint64) {
	f.mu.Lock()
	if index > f.applied {
		f.applied = index
	}
	if hw > f.hw {
		f.hw = hw
		close(f.changed)
		f.changed = make(chan struct{})
	}
	f.mu.Unlock()
}

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) interface{} { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch implements raft.BatchingFSM.
func (f *fsm) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	var hw int64
	var last uint64
	for i, l := range logs {
		pos, ok := f.store.entryAt(l.Index)
		if !ok {
			out[i] = fmt.Errorf("replication: applied entry %d is not in the log", l.Index)
			continue
		}
		hw, last = pos.next, l.Index
		if l.Type != raft.LogCommand {
			continue
		}
		out[i] = AppliedEntry{BaseOffset: pos.offset, NextOffset: pos.next}
		if b := log.Batch(l.Data); len(b) >= log.BatchHeaderSize && b.IsControl() {
			f.applyCommand(b)
		} else if len(b) >= log.BatchHeaderSize && f.onBatch != nil {
			f.onBatch(b)
		}
	}
	if last > 0 {
		f.advance(hw, last)
		f.store.releaseApplied(last)
	}
	return out
}

// Snapshot implements raft.FSM: the range of the log up to the last
// applied entry. Raft calls it on the FSM goroutine, so hw is exactly the
// end of the last applied entry.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	hw := f.hw
	f.mu.Unlock()
	if f.snaps != nil {
		f.snaps.local.Store(true) // the Create that follows is this replica's own
	}
	return &fsmSnapshot{log: f.log, start: f.log.StartOffset(), end: hw}, nil
}

type fsmSnapshot struct {
	log        *log.Log
	start, end int64
}

// Persist fsyncs the log up to the snapshot's end (Raft trusts a snapshot
// as much as its log) and writes the metadata-only header.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.log.Flush(); err != nil {
		sink.Cancel()
		return err
	}
	start := s.start
	if start > s.end {
		start = s.end
	}
	if _, err := sink.Write(snapHeader{start: start, end: s.end}.encode()); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}

// Restore implements raft.FSM: replay a leader's snapshot stream into the
// log. When the local log already holds the snapshot's entry with its term
// (Raft's log matching: then it holds everything before), nothing is
// rewritten.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	hb := make([]byte, snapHeaderSize)
	if _, err := io.ReadFull(rc, hb); err != nil {
		return fmt.Errorf("replication: restore: %w", err)
	}
	h, err := decodeSnapHeader(hb)
	if err != nil {
		return err
	}
	if pos, ok := f.store.entryAt(h.index); ok && pos.next == h.end && f.store.holds(h.index, h.term) {
		if _, err := io.Copy(io.Discard, rc); err != nil {
			return err
		}
		f.advance(h.end, h.index)
		return nil
	}
	if err := f.replay(rc, h); err != nil {
		return err
	}
	if err := f.store.reset(h.index); err != nil {
		return err
	}
	f.mu.Lock()
	f.hw, f.applied = h.end, h.index
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
	// Raft hands Restore a wrapped reader: drop the data of every
	// received snapshot, all of it is in the log now.
	if f.snaps != nil {
		if err := f.snaps.dropAllData(); err != nil && f.onError != nil {
			f.onError(err)
		}
	}
	return nil
}

// replay restarts the log with the stream's batches.
func (f *fsm) replay(r io.Reader, h snapHeader) error {
	var pending []byte
	buf := make([]byte, 1<<20)
	started := false
	for {
		n, err := r.Read(buf)
		pending = append(pending, buf[:n]...)
		// Append every whole batch in pending.
		at := 0
		for {
			size, verr := log.ValidateBatch(pending[at:], 0)
			if verr != nil {
				break
			}
			b := log.Batch(pending[at : at+size])
			if !started {
				if err := f.log.Reset(b.BaseOffset()); err != nil {
					return err
				}
				started = true
			}
			at += size
		}
		if at > 0 {
			if _, err := f.log.AppendAssigned(pending[:at]); err != nil {
				return fmt.Errorf("replication: restore: %w", err)
			}
			pending = append(pending[:0], pending[at:]...)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("replication: restore: %w", err)
		}
	}
	if len(pending) > 0 {
		if size, err := log.ValidateBatch(pending, 0); err != nil || size != len(pending) {
			return fmt.Errorf("replication: restore: stream ends with %d bytes that are not a whole batch: %v", len(pending), err)
		}
	}
	if !started {
		if err := f.log.Reset(h.end); err != nil {
			return err
		}
	}
	if end := f.log.EndOffset(); end != h.end {
		return fmt.Errorf("replication: restore: log ends at %d, snapshot at %d", end, h.end)
	}
	if err := f.log.AdvanceStart(h.start); err != nil && h.start <= h.end {
		return err
	}
	return f.log.Flush()
}

// applyCommand applies one of raftlog's own command entries.
func (f *fsm) applyCommand(b log.Batch) {
	var e raft.Log
	if err := decodeControl(b, &e); err != nil {
		return
	}
	switch e.Type {
	case entryRejoin:
		if m, ok := decodeMarker(b); ok && f.onMarker != nil {
			f.onMarker(m)
		}
	case entryDeleteRecords:
		if len(e.Data) == 8 {
			off := int64(binary.BigEndian.Uint64(e.Data))
			if end := f.log.EndOffset(); off > end {
				off = end
			}
			// The new start is persisted at once (the log's checkpoint):
			// make the log durable past it first, or a power loss brings
			// the log back shorter than its start, which then falls to
			// that end, and what it pointed at (the controller's metadata
			// snapshot) is gone from this replica.
			err := f.log.FlushTo(off + 1)
			if err == nil {
				err = f.log.AdvanceStart(off)
			}
			if err != nil && f.onError != nil {
				f.onError(fmt.Errorf("replication: delete records to %d: %w", off, err))
			}
		}
	}
}
