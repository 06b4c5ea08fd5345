package log

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/raftlog/raftlog/log/vfs"
)

// askCheckpointLocked makes the recovery point and log start the newest
// checkpoint asked for, and returns it. Under wmu.
func (l *Log) askCheckpointLocked() checkpoint {
	c := checkpoint{recoveryPoint: l.recoveryPoint, logStart: l.start.Load()}
	l.ckWantMu.Lock()
	l.ckWanted = c
	l.ckWantMu.Unlock()
	return c
}

// writeCheckpointLocked writes the checkpoint of the recovery point and
// log start durably before it returns (after a write already under way,
// if one is). A failure stops the log. Under wmu.
func (l *Log) writeCheckpointLocked() error {
	l.askCheckpointLocked()
	if err := l.writeWantedCheckpoint(); err != nil {
		return l.checkpointFailed(err)
	}
	return nil
}

// checkpointFailed stops the log with a failed checkpoint write and
// returns the log's error. Under wmu.
func (l *Log) checkpointFailed(err error) error {
	l.stop(fmt.Errorf("log: checkpoint: %w", err))
	return l.werr
}

// writeWantedCheckpoint replaces the checkpoint file, atomically and
// durably, with the newest checkpoint asked for, unless it holds that
// already. With or without wmu.
func (l *Log) writeWantedCheckpoint() error {
	l.ckMu.Lock()
	defer l.ckMu.Unlock()
	return l.writeWantedCheckpointCkLocked()
}

func (l *Log) writeWantedCheckpointCkLocked() error {
	l.ckWantMu.Lock()
	c := l.ckWanted
	l.ckWantMu.Unlock()
	if c == l.checkpointed {
		return nil
	}
	if err := writeCheckpoint(l.fs, l.dir, c); err != nil {
		return err
	}
	l.checkpointed = c
	return nil
}

// Flush fsyncs what was appended before it was called and advances the
// recovery point. The fsyncs run outside the write lock, so appends go on
// while they run: a Raft snapshot flushes what its partition took in since
// the last one, and the partition's producers must not wait for that.
func (l *Log) Flush() error {
	l.wmu.Lock()
	if l.closed {
		l.wmu.Unlock()
		return ErrClosed
	}
	if l.werr != nil {
		l.wmu.Unlock()
		return l.werr
	}
	p := l.planFlush()
	l.wmu.Unlock()
	p.sync()
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed && l.werr == nil && p.err == nil {
		return nil // Close flushed everything
	}
	return l.finishFlush(&p)
}

// FlushTo makes the log durable below offset: a no-op when the recovery
// point is already there (a Raft snapshot flushed the log just before the
// compaction that follows it), a Flush otherwise.
func (l *Log) FlushTo(offset int64) error {
	l.wmu.Lock()
	done := !l.closed && l.werr == nil && l.recoveryPoint >= offset
	l.wmu.Unlock()
	if done {
		return nil
	}
	return l.Flush()
}

// flushLocked is Flush with the fsyncs under wmu too (an append of
// flush.messages, Close).
func (l *Log) flushLocked() error {
	if l.werr != nil {
		return l.werr
	}
	p := l.planFlush()
	p.sync()
	return l.finishFlush(&p)
}

// flushPlan is what a flush covers: the log's end, truncations and
// unflushed records when it began, and the segments it fsyncs.
type flushPlan struct {
	end    int64
	cuts   uint64
	msgs   int64
	fs     vfs.FS
	dir    string // to fsync first, when a roll's entry may not be durable ("" not)
	gen    uint64 // the rolls that fsync covers
	dirErr error
	segs   []*segment // dirty from the recovery point's segment on, each acquired
	upto   []uint64   // the writes each one's fsync covers
	err    error      // the first fsync failure, a background one's included
	where  *segment   // the segment that failed
}

// planFlush takes the segments a flush must fsync: the active one, and
// sealed ones whose background fsync has not returned yet. Under wmu.
func (l *Log) planFlush() flushPlan {
	p := flushPlan{end: l.segs[len(l.segs)-1].next.Load(), cuts: l.cuts, msgs: l.unflushedMsgs, fs: l.fs, gen: l.dirGen}
	if l.dirGen != l.dirSynced {
		p.dir = l.dir
	}
	// Under mu, like a reader: cutSegment waits for the references while
	// it holds mu, and no reference may start during that wait.
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, seg := range l.segs[l.floorIndex(l.recoveryPoint):] {
		if !seg.dirty() {
			if err := seg.failedSync(); err != nil && p.err == nil {
				p.err, p.where = err, seg
			}
		} else if seg.acquire() {
			p.segs, p.upto = append(p.segs, seg), append(p.upto, seg.writes)
		}
	}
	return p
}

// sync fsyncs the plan's segments and releases them, from any goroutine.
func (p *flushPlan) sync() {
	if p.dir != "" {
		p.dirErr = p.fs.SyncDir(p.dir)
	}
	for _, seg := range p.segs {
		if p.err == nil {
			if err := seg.fsync(); err != nil {
				p.err, p.where = err, seg
			}
		}
		seg.release()
	}
}

// finishFlush records what a flush's fsyncs covered and moves the
// recovery point to where the log ended when it began. Under wmu.
func (l *Log) finishFlush(p *flushPlan) error {
	switch {
	case l.werr != nil:
		return l.werr
	case p.dirErr != nil:
		l.stop(fmt.Errorf("log: sync dir: %w", p.dirErr))
		return l.werr
	case p.err != nil:
		l.stop(fmt.Errorf("log: sync %s: %w", p.where.logPath, p.err))
		return l.werr
	case l.cuts != p.cuts:
		// Truncated or reset meanwhile: offsets below end may hold new,
		// unsynced data now. The cut made itself durable and moved the
		// recovery point; leave it there.
		return nil
	}
	l.dirSynced = max(l.dirSynced, p.gen)
	for i, seg := range p.segs {
		seg.synced = max(seg.synced, p.upto[i]) // written since, it stays dirty
	}
	l.unflushedMsgs = max(0, l.unflushedMsgs-p.msgs)
	l.recoveryPoint = max(l.recoveryPoint, p.end)
	return l.checkpointFlushedLocked()
}

// checkpointFlushedLocked records the recovery point a flush moved. The
// checkpoint matters at segment granularity (recovery scans from the
// segment holding the recovery point), so it is rewritten durably only
// when that segment changed, and hinted in place otherwise. Under wmu.
func (l *Log) checkpointFlushedLocked() error {
	l.ckWantMu.Lock()
	w := l.ckWanted
	l.ckWantMu.Unlock()
	if l.floorIndex(w.recoveryPoint) != l.floorIndex(l.recoveryPoint) || w.logStart != l.start.Load() {
		return l.writeCheckpointLocked()
	}
	return l.hintCheckpointLocked()
}

// hintCheckpointLocked overwrites the checkpoint in place with the new
// recovery point, without an fsync of its own: it saves recovery a scan
// and tells whoever reads the directory where the fsynced prefix ends.
// The data it covers was fsynced before it is written, so whichever
// version of it survives a crash is true; a torn one fails its CRC and
// recovery scans every segment. While a checkpoint write is under way it
// is skipped: whoever asked for that one writes the newest asked for.
// When the file does not hold the same segment and log start yet (or
// does not exist), it is written atomically; a failed overwrite is left
// to the next atomic write. Under wmu.
func (l *Log) hintCheckpointLocked() error {
	c := l.askCheckpointLocked()
	if !l.ckMu.TryLock() {
		return nil
	}
	defer l.ckMu.Unlock()
	if c == l.checkpointed {
		return nil
	}
	var f vfs.File
	var err error
	if l.floorIndex(l.checkpointed.recoveryPoint) == l.floorIndex(c.recoveryPoint) && l.checkpointed.logStart == c.logStart {
		f, err = l.fs.OpenRW(filepath.Join(l.dir, checkpointName))
	}
	if f == nil || err != nil {
		if err := l.writeWantedCheckpointCkLocked(); err != nil {
			return l.checkpointFailed(err)
		}
		return nil
	}
	_, err = f.WriteAt(c.encode(), 0)
	if f.Close() == nil && err == nil {
		l.checkpointed = c
	}
	return nil
}

func (l *Log) flushLoop(every time.Duration) {
	defer close(l.flushDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stopFlush:
			return
		case <-t.C:
			l.wmu.Lock()
			due := !l.closed && l.unflushedMsgs > 0
			l.wmu.Unlock()
			if !due {
				continue
			}
			if err := l.Flush(); err != nil && !errors.Is(err, ErrClosed) {
				l.logger.Error("flush failed", "dir", l.dir, "error", err)
			}
		}
	}
}

// stop makes err the log's sticky write error: every later write fails
// with it, since what the failed write left on disk is not known until a
// recovery has scanned it.
func (l *Log) stop(err error) {
	err = writeError{err}
	l.werr = err
	l.failed.Store(&err)
}

func (l *Log) stopFlusher() {
	l.stopOnce.Do(func() {
		if l.stopFlush != nil {
			close(l.stopFlush)
			<-l.flushDone
		}
	})
}
