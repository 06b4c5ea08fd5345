package log

import (
	"fmt"
	"math"

	"github.com/raftlog/raftlog/index"
)

// mustRoll reports whether batch pb cannot go into seg after runBytes more
// bytes and entries more index entries of the same write.
func (l *Log) mustRoll(seg *segment, pb *pendingBatch, runBytes int64, entries int) bool {
	size := seg.size.Load() + runBytes
	if size == 0 {
		return false // an empty segment takes any one batch
	}
	switch {
	case size+int64(pb.size) > l.cfg.SegmentBytes:
		return true
	case pb.last-seg.base > math.MaxInt32:
		return true
	case seg.firstTs >= 0 && pb.maxTs-seg.firstTs > l.cfg.SegmentMs.Milliseconds():
		return true
	}
	// Room for this run's entries, one more, and the final time entry.
	oiCap := l.cfg.SegmentIndexBytes / index.OffsetEntrySize
	tiCap := l.cfg.SegmentIndexBytes / index.TimeEntrySize
	return seg.oi.Entries()+entries+1 >= oiCap || seg.ti.Entries()+entries+2 >= tiCap
}

// roll seals the active segment and starts a new one at base. The sealed
// segment is fsynced in the background (syncSealed), as Kafka does: an
// fsync of a whole segment's unsynced bytes takes long, and appends wait
// for nothing but the new segment's files. So is the directory, whose
// fsync (the new files' entries) waits on ext4 for a journal commit, and
// with it for the data of every file written back meanwhile: 200-300 ms
// under load, too long for an append to wait. Until it returns a
// crash can lose the new segment's entry, and with it what was appended
// there, which the recovery point never covered.
func (l *Log) roll(base int64) error {
	old := l.segs[len(l.segs)-1]
	seg, err := openSegmentFiles(l.fs, l.dir, l.indexDir, base, l.cfg, true, true)
	if err != nil {
		l.stop(err)
		return err
	}
	l.dirGen++
	l.mu.Lock()
	err = old.seal(false) // its background task syncs the indexes, before its data
	if err == nil {
		l.segs = append(l.segs, seg)
	}
	l.mu.Unlock()
	if err != nil {
		seg.delete(l.fs)
		l.stop(err)
		return err
	}
	l.logger.Info("segment rolled", "dir", l.dir, "sealed", old.base, "size", old.size.Load(), "new", base)
	l.syncSealed(old)
	return nil
}

// syncSealed fsyncs a segment that was just sealed, in the background.
// Once the fsync returns, and nothing was written into the segment since
// (a truncation can reopen it), the segment is synced and the recovery
// point moves past every synced segment. Until then a crash can cost the
// segment's unsynced bytes, as it can cost the active segment's: recovery
// scans from the segment holding the recovery point. A flush (Flush,
// flush.messages, flush.ms, Close) fsyncs it itself. Under wmu.
func (l *Log) syncSealed(seg *segment) {
	if !seg.dirty() && l.dirGen == l.dirSynced {
		return
	}
	writes := seg.writes // what this fsync covers
	gen := l.dirGen      // and the directory's
	l.bg.Add(1)
	l.background(func() {
		defer l.bg.Done()
		// The directory first: the segment's own entry (made by the roll
		// before) must be durable before the recovery point passes it.
		// The checkpoint that then moves the recovery point syncs the
		// directory again (an atomic replace); this sync is what lets a
		// flush skip its own (dirSynced), and the crash tests show the
		// flush's is needed: a hinted checkpoint does not sync it.
		derr := l.fs.SyncDir(l.dir)
		// Under mu, like a reader: cutSegment waits for the references
		// while it holds mu, and no reference may start during that wait.
		l.mu.RLock()
		ok := seg.acquire()
		l.mu.RUnlock()
		var err error
		if ok {
			err = func() error {
				defer seg.release()
				return seg.fsync() // a failure stays on the segment for every later fsync
			}()
		}
		if !l.finishSealedSync(seg, gen, writes, ok, derr, err) {
			return
		}
		// The checkpoint outside wmu: its atomic replace (two fsyncs)
		// took up to 57 ms under load, and appends waited for it.
		if err := l.writeWantedCheckpoint(); err != nil {
			l.wmu.Lock()
			if !l.closed && l.werr == nil {
				l.logger.Error("checkpoint failed", "dir", l.dir, "error", err)
				l.checkpointFailed(err)
			}
			l.wmu.Unlock()
		}
	})
}

// finishSealedSync records what a sealed segment's background fsyncs
// covered (the directory up to gen, the segment up to writes) and moves
// the recovery point; it reports whether a checkpoint is to be written.
func (l *Log) finishSealedSync(seg *segment, gen, writes uint64, acquired bool, derr, err error) bool {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed || l.werr != nil {
		return false
	}
	if derr != nil {
		l.stop(fmt.Errorf("log: sync dir: %w", derr))
		return false
	}
	l.dirSynced = max(l.dirSynced, gen)
	if !acquired {
		return false // deleted or closed: nothing left to sync
	}
	if err != nil {
		l.stop(fmt.Errorf("log: sync %s: %w", seg.logPath, err))
		return false
	}
	// Written since (after a truncation), it stays dirty.
	seg.synced = max(seg.synced, writes)
	return l.advanceRecoveryPoint()
}

// advanceRecoveryPoint moves the recovery point past the sealed segments
// from the one holding it that are fsynced, and asks for its checkpoint;
// it reports whether it did. Under wmu; the caller writes the checkpoint
// after releasing it (writeWantedCheckpoint).
func (l *Log) advanceRecoveryPoint() bool {
	rp := l.recoveryPoint
	for i := l.floorIndex(rp); i < len(l.segs)-1 && !l.segs[i].dirty(); i++ {
		rp = l.segs[i+1].base
	}
	if rp <= l.recoveryPoint {
		return false
	}
	l.recoveryPoint = rp
	l.askCheckpointLocked()
	return true
}
