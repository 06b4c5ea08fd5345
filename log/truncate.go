package log

import (
	"fmt"
)

// TruncateTo drops every batch whose last offset is at least offset (a
// batch holding offset goes whole, as in Kafka) and returns the new end
// offset. A Raft follower uses it to cut a tail that conflicts with its
// leader. The recovery point is lowered and checkpointed first and the cut
// is fsynced, so a crash can neither resurrect the dropped batches nor
// leave stale index entries trusted. Offsets at or past the end are a no-op;
// offsets before the first segment empty the log and restart it there.
func (l *Log) TruncateTo(offset int64) (int64, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	if l.werr != nil {
		return 0, l.werr
	}
	end := l.segs[len(l.segs)-1].next.Load()
	if offset >= end {
		return end, nil
	}
	if offset <= l.segs[0].base || offset < l.start.Load() {
		return offset, l.resetLocked(offset)
	}
	l.mu.RLock()
	i := l.floorIndex(offset)
	seg := l.segs[i]
	pos, hdr, ok, err := l.locate(seg, offset, seg.size.Load())
	l.mu.RUnlock()
	if err != nil {
		return 0, fmt.Errorf("log: truncate: %w", err)
	}
	newEnd := seg.next.Load()
	if ok {
		newEnd = Batch(hdr[:]).BaseOffset()
	} else {
		pos = seg.size.Load()
	}
	// The recovery point goes down to the new end, not to offset: what is
	// appended from the new end on is not synced, and a segment sealed
	// below the recovery point would be trusted without a scan.
	if l.recoveryPoint > newEnd {
		l.recoveryPoint = newEnd
		if err := l.writeCheckpointLocked(); err != nil {
			return 0, err
		}
	}

	l.cuts++
	l.mu.Lock()
	dropped := append([]*segment(nil), l.segs[i+1:]...)
	l.segs = l.segs[:i+1]
	err = l.cutSegment(seg, pos, newEnd)
	l.mu.Unlock()
	if err != nil {
		l.stop(err)
		return 0, err
	}
	if err := l.deleteSegments(dropped); err != nil {
		return 0, err
	}
	l.logger.Info("log truncated", "dir", l.dir, "offset", offset, "new_end", newEnd, "old_end", end, "deleted_segments", len(dropped))
	return newEnd, nil
}

// cutSegment makes seg the active segment ending at pos / next. Under mu.
func (l *Log) cutSegment(seg *segment, pos, next int64) error {
	// Readers that located a batch in this segment read outside mu: let
	// them finish before the bytes under them change. New ones cannot
	// start while mu is held.
	seg.refs.Wait()
	if err := seg.failedSync(); err != nil {
		return fmt.Errorf("log: sync %s: %w", seg.logPath, err)
	}
	if err := seg.unseal(); err != nil {
		return fmt.Errorf("log: truncate %s: %w", seg.logPath, err)
	}
	if err := seg.f.Truncate(pos); err != nil {
		return fmt.Errorf("log: truncate %s: %w", seg.logPath, err)
	}
	if err := seg.f.Sync(); err != nil {
		return fmt.Errorf("log: sync %s: %w", seg.logPath, err)
	}
	seg.oi.TruncateTo(next)
	seg.ti.TruncateTo(next)
	var buf []byte
	if err := l.recoverTail(seg, pos, &buf); err != nil {
		return fmt.Errorf("log: truncate %s: %w", seg.logPath, err)
	}
	return nil
}

// deleteSegments removes segments already taken out of l.segs, then makes
// the removal durable.
func (l *Log) deleteSegments(segs []*segment) error {
	if len(segs) == 0 {
		return nil
	}
	for _, s := range segs {
		if err := s.delete(l.fs); err != nil {
			l.stop(fmt.Errorf("log: delete %s: %w", s.logPath, err))
			return l.werr
		}
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		l.stop(fmt.Errorf("log: sync dir: %w", err))
		return l.werr
	}
	return nil
}

// Reset deletes every segment and restarts the log empty at offset (a Raft
// replica installing a snapshot past its log).
func (l *Log) Reset(offset int64) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if l.werr != nil {
		return l.werr
	}
	return l.resetLocked(offset)
}

func (l *Log) resetLocked(offset int64) error {
	if offset < 0 {
		return fmt.Errorf("log: reset to negative offset %d", offset)
	}
	// Checkpoint first: after a crash in the middle, nothing of the old
	// segments is trusted or reachable below the new start.
	l.cuts++
	l.recoveryPoint = offset
	l.start.Store(offset)
	if err := l.writeCheckpointLocked(); err != nil {
		return err
	}
	// Readers keep a non-empty list throughout: the segments go newest
	// first (a crash leaves a prefix of the old log), and the oldest is
	// either emptied in place (when it has the new base) or replaced by the
	// new segment in one step.
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.segs) > 1 {
		s := l.segs[len(l.segs)-1]
		if err := s.delete(l.fs); err != nil {
			l.stop(fmt.Errorf("log: reset: delete %s: %w", s.logPath, err))
			return l.werr
		}
		l.segs = l.segs[:len(l.segs)-1]
	}
	oldest := l.segs[0]
	if oldest.base == offset {
		if err := l.cutSegment(oldest, 0, offset); err != nil {
			l.stop(err)
			return err
		}
	} else {
		seg, err := openSegmentFiles(l.fs, l.dir, l.indexDir, offset, l.cfg, true, true)
		if err != nil {
			l.stop(err)
			return err
		}
		l.segs[0] = seg
		if err := oldest.delete(l.fs); err != nil {
			l.stop(fmt.Errorf("log: reset: delete %s: %w", oldest.logPath, err))
			return l.werr
		}
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		l.stop(err)
		return err
	}
	l.unflushedMsgs = 0
	l.logger.Info("log reset", "dir", l.dir, "offset", offset)
	return nil
}

// AdvanceStart moves the log start offset up to offset (Kafka's
// DeleteRecords, or a Raft snapshot's compaction) and deletes the segments
// wholly below it. The active segment is never deleted.
func (l *Log) AdvanceStart(offset int64) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if l.werr != nil {
		return l.werr
	}
	return l.advanceStartLocked(offset)
}

func (l *Log) advanceStartLocked(offset int64) error {
	if end := l.segs[len(l.segs)-1].next.Load(); offset > end {
		return fmt.Errorf("%w: log start %d past the end %d", ErrOffsetOutOfRange, offset, end)
	}
	if offset > l.start.Load() {
		l.start.Store(offset)
		if err := l.writeCheckpointLocked(); err != nil {
			return err
		}
	}
	start := l.start.Load()
	if pin := l.pin.Load(); pin < start {
		start = pin
	}
	l.mu.Lock()
	n := 0
	for n < len(l.segs)-1 && l.segs[n+1].base <= start {
		n++
	}
	dropped := append([]*segment(nil), l.segs[:n]...)
	l.segs = append(l.segs[:0:0], l.segs[n:]...)
	l.mu.Unlock()
	if n > 0 {
		l.logger.Info("segments deleted below log start", "dir", l.dir, "log_start", start, "segments", n)
	}
	return l.deleteSegments(dropped)
}

// ApplyRetention deletes sealed segments from the front as retention.ms
// and retention.bytes require, and those wholly below the log start that
// a pin kept when the start moved (Kafka deletes a segment once the log
// start offset is past it), and returns how many went.
func (l *Log) ApplyRetention() (int, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	if l.werr != nil {
		return 0, l.werr
	}
	now := l.now().UnixMilli()
	l.mu.RLock()
	var total int64
	for _, s := range l.segs {
		total += s.size.Load()
	}
	n := 0
	pin, start := l.pin.Load(), l.start.Load()
	for n < len(l.segs)-1 && l.segs[n+1].base <= pin {
		s := l.segs[n]
		byTime := l.cfg.RetentionMs > 0 && s.maxTs.Load() >= 0 && now-s.maxTs.Load() > l.cfg.RetentionMs.Milliseconds()
		bySize := l.cfg.RetentionBytes >= 0 && total-s.size.Load() >= l.cfg.RetentionBytes
		byStart := l.segs[n+1].base <= start
		if !byTime && !bySize && !byStart {
			break
		}
		total -= s.size.Load()
		n++
	}
	var newStart int64
	if n > 0 {
		newStart = l.segs[n].base
	}
	l.mu.RUnlock()
	if n == 0 {
		return 0, nil
	}
	l.logger.Info("retention", "dir", l.dir, "segments", n, "log_start", newStart)
	return n, l.advanceStartLocked(newStart)
}

// Pin keeps every segment holding offset or later from deletion by
// retention and AdvanceStart (the log start may still move past it: reads
// below the start are refused, but the bytes stay). A Raft log pins its
// first entry. math.MaxInt64 (the default) pins nothing.
func (l *Log) Pin(offset int64) { l.pin.Store(offset) }
