package log

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/raftlog/raftlog/index"
)

// RecoveryReport says what Open found and did.
type RecoveryReport struct {
	Clean           bool          // the clean-shutdown marker was present
	RecoveryPoint   int64         // from the checkpoint (0 when absent or corrupt)
	CheckpointError string        // why the checkpoint could not be used, if so
	ScannedSegments int           // segments whose every batch was checked
	ScannedBytes    int64         // bytes those held
	RebuiltIndexes  int           // segments whose indexes were rebuilt
	Truncated       bool          // a torn or corrupt tail was cut
	TruncatedAt     int64         // offset of the first batch lost (when Truncated)
	TruncatedBytes  int64         // bytes cut, including deleted segments
	DeletedSegments int           // whole segments after the cut
	Corruption      string        // what was wrong at the cut
	Duration        time.Duration // time Open spent recovering
}

// recover loads the segments of l.dir.
func (l *Log) recover() error {
	began := time.Now()
	rep := &l.recovery
	names, err := l.fs.List(l.dir)
	if err != nil {
		return fmt.Errorf("log: list %s: %w", l.dir, err)
	}
	var bases []int64
	marker := false
	hasLog := map[int64]bool{}
	for _, n := range names {
		switch {
		case n == cleanShutdownName:
			rep.Clean = true
			marker = true
		case strings.HasSuffix(n, ".tmp"):
			_ = l.fs.Remove(filepath.Join(l.dir, n))
		default:
			if b, ok := parseSegmentName(n); ok {
				bases = append(bases, b)
				hasLog[b] = true
			}
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	l.removeOrphanIndexes(hasLog)

	ck, err := readCheckpoint(l.fs, l.dir)
	switch {
	case errors.Is(err, errNoCheckpoint):
		if len(bases) > 0 {
			rep.Clean = false // segments without a checkpoint: trust nothing
		}
	case err != nil:
		rep.CheckpointError = err.Error()
		rep.Clean = false
		ck = checkpoint{}
		l.logger.Warn("checkpoint unusable, scanning every segment", "dir", l.dir, "error", err)
	}
	l.checkpointed, l.ckWanted = ck, ck
	rep.RecoveryPoint = ck.recoveryPoint

	if len(bases) == 0 {
		seg, err := openSegmentFiles(l.fs, l.dir, l.indexDir, ck.logStart, l.cfg, true, true)
		if err != nil {
			return err
		}
		l.segs = []*segment{seg}
	} else if err := l.loadSegments(bases, ck, rep); err != nil {
		return err
	}

	start := ck.logStart
	if b := l.segs[0].base; b > start {
		start = b
	}
	end := l.segs[len(l.segs)-1].next.Load()
	if start > end {
		start = end
	}
	l.start.Store(start)

	// From here on this run's writes are not covered by a clean shutdown.
	if marker {
		if err := l.fs.Remove(filepath.Join(l.dir, cleanShutdownName)); err != nil {
			return fmt.Errorf("log: remove clean-shutdown marker: %w", err)
		}
	}
	// What was scanned may be only in the page cache: make it durable
	// before the recovery point moves past it.
	for _, s := range l.segs {
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("log: sync %s: %w", s.logPath, err)
		}
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return fmt.Errorf("log: sync dir: %w", err)
	}
	l.recoveryPoint = end
	if err := l.writeCheckpointLocked(); err != nil {
		return err
	}
	rep.Duration = time.Since(began)
	if !rep.Clean || rep.Truncated || rep.RebuiltIndexes > 0 {
		l.logger.Info("log recovered", "dir", l.dir, "clean", rep.Clean, "scanned_segments", rep.ScannedSegments,
			"scanned_bytes", rep.ScannedBytes, "rebuilt_indexes", rep.RebuiltIndexes, "truncated", rep.Truncated,
			"truncated_at", rep.TruncatedAt, "truncated_bytes", rep.TruncatedBytes, "deleted_segments", rep.DeletedSegments,
			"corruption", rep.Corruption, "duration", rep.Duration)
	}
	if rep.Truncated {
		l.logger.Warn("torn or corrupt log tail truncated", "dir", l.dir, "offset", rep.TruncatedAt, "bytes", rep.TruncatedBytes, "reason", rep.Corruption)
	}
	return nil
}

// removeOrphanIndexes deletes index files whose .log is gone (a segment
// deletion cut short by a crash).
func (l *Log) removeOrphanIndexes(hasLog map[int64]bool) {
	ents, err := os.ReadDir(l.indexDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		if !isIndexFile(n) || len(n) < 20 {
			continue
		}
		b, ok := parseSegmentName(n[:20] + logSuffix)
		if ok && !hasLog[b] {
			removeFile(filepath.Join(l.indexDir, n))
		}
	}
}

// loadSegments opens the segments in order, scanning those that may hold
// unsynced data and checking the rest.
func (l *Log) loadSegments(bases []int64, ck checkpoint, rep *RecoveryReport) error {
	scanFrom := len(bases) // index of the first segment to scan fully
	if !rep.Clean {
		scanFrom = sort.Search(len(bases), func(i int) bool { return bases[i] > ck.recoveryPoint }) - 1
		if scanFrom < 0 {
			scanFrom = 0
		}
	}
	var buf []byte
	for i := 0; i < len(bases); i++ {
		base := bases[i]
		last := i == len(bases)-1
		var (
			seg *segment
			err error
		)
		if i < scanFrom {
			next := int64(-1)
			if !last {
				next = bases[i+1]
			}
			seg, err = l.openTrusted(base, next, last, &buf, rep)
		} else {
			seg, err = l.openScanned(base, &buf, rep)
		}
		if err != nil {
			return err
		}
		if prev := len(l.segs) - 1; prev >= 0 && l.segs[prev].next.Load() != base {
			// A gap or overlap: what follows the previous segment's end
			// cannot be trusted.
			seg.close()
			l.cutAfter(prev, bases[i:], fmt.Sprintf("segment %d does not follow the previous segment's end %d", base, l.segs[prev].next.Load()), rep)
			break
		}
		l.segs = append(l.segs, seg)
		if rep.Truncated && !last {
			l.cutAfter(len(l.segs)-1, bases[i+1:], rep.Corruption, rep)
			break
		}
	}
	// All but the last are sealed; the last is the active segment.
	for i, s := range l.segs {
		if i < len(l.segs)-1 {
			if err := s.seal(true); err != nil {
				return err
			}
		} else if err := s.unseal(); err != nil {
			return err
		}
	}
	return nil
}

// cutAfter deletes the segment files of bases (which follow segment keep)
// and records it.
func (l *Log) cutAfter(keep int, bases []int64, why string, rep *RecoveryReport) {
	if !rep.Truncated {
		rep.Truncated = true
		rep.TruncatedAt = l.segs[keep].next.Load()
		rep.Corruption = why
	}
	for _, b := range bases {
		p := filepath.Join(l.dir, segmentName(b, logSuffix))
		if f, err := l.fs.Open(p); err == nil {
			if n, err := f.Size(); err == nil {
				rep.TruncatedBytes += n
			}
			f.Close()
		}
		_ = l.fs.Remove(p)
		removeFile(filepath.Join(l.indexDir, segmentName(b, indexSuffix)))
		removeFile(filepath.Join(l.indexDir, segmentName(b, timeIndexSuffix)))
		rep.DeletedSegments++
	}
}

// openTrusted opens a segment that was fsynced before the recovery point (or
// after a clean shutdown) and checks that its indexes agree with the log,
// rebuilding them when they do not. next is the following segment's base.
func (l *Log) openTrusted(base, next int64, last bool, buf *[]byte, rep *RecoveryReport) (*segment, error) {
	var seg *segment
	err := l.indexFilesExist(base)
	if err == nil {
		seg, err = openSegmentFiles(l.fs, l.dir, l.indexDir, base, l.cfg, false, last)
	}
	if err == nil {
		size, serr := seg.f.Size()
		if serr != nil {
			seg.close()
			return nil, fmt.Errorf("log: %s: %w", seg.logPath, serr)
		}
		if last {
			err = l.recoverTail(seg, size, buf)
		} else {
			err = l.checkSealed(seg, size, next)
		}
		if err == nil {
			return seg, nil
		}
		seg.close()
	}
	l.logger.Warn("index does not agree with the log, rebuilding", "segment", filepath.Join(l.dir, segmentName(base, logSuffix)), "error", err)
	rep.RebuiltIndexes++
	return l.openScanned(base, buf, rep)
}

func (l *Log) indexFilesExist(base int64) error {
	for _, suffix := range []string{indexSuffix, timeIndexSuffix} {
		if _, err := os.Stat(filepath.Join(l.indexDir, segmentName(base, suffix))); err != nil {
			return err
		}
	}
	return nil
}

// checkSealed checks a sealed segment's indexes against the log with a few
// reads: the last offset-index entry points at a batch starting at its
// offset, and the time index has an entry within the segment. Its last
// entry holds the segment's max timestamp: seal appends the running max
// unless it equals the last entry's already.
func (l *Log) checkSealed(seg *segment, size, next int64) error {
	if err := seg.oi.Check(); err != nil {
		return err
	}
	if off, pos, ok := seg.oi.LastEntry(); ok {
		if int64(pos) >= size {
			return fmt.Errorf("index entry at %d past the end %d", pos, size)
		}
		var hdr [BatchHeaderSize]byte
		if _, err := seg.f.ReadAt(hdr[:], int64(pos)); err != nil {
			return err
		}
		if b := Batch(hdr[:]); b.BaseOffset() != off || b.Magic() != 2 {
			return fmt.Errorf("index entry %d→%d: batch there has offset %d magic %d", off, pos, b.BaseOffset(), b.Magic())
		}
	}
	ts, off, ok := seg.ti.LastEntry()
	if size > 0 && (!ok || off > next) {
		return fmt.Errorf("time index last entry (%d, %d, present %v) not within the segment ending at %d", ts, off, ok, next)
	}
	seg.size.Store(size)
	seg.next.Store(next)
	if ok {
		seg.maxTs.Store(ts)
	}
	seg.sealed = true
	return nil
}

// recoverTail rebuilds the writer state of a trusted active segment: from
// its last index entry it checks every batch to the end of the file.
func (l *Log) recoverTail(seg *segment, size int64, buf *[]byte) error {
	if err := seg.oi.Check(); err != nil {
		return err
	}
	if err := seg.ti.Check(); err != nil {
		return err
	}
	if seg.oi.Entries() > 0 && seg.ti.Entries() == 0 {
		return errors.New("offset index has entries, time index none")
	}
	from, next := int64(0), seg.base
	if off, pos, ok := seg.oi.LastEntry(); ok {
		from, next = int64(pos), off
	}
	seg.maxTs.Store(-1)
	if ts, _, ok := seg.ti.LastEntry(); ok {
		seg.maxTs.Store(ts)
	}
	seg.firstTs = -1
	if from > 0 {
		var hdr [BatchHeaderSize]byte
		if _, err := seg.f.ReadAt(hdr[:], 0); err != nil {
			return err
		}
		seg.firstTs = Batch(hdr[:]).MaxTimestamp()
	}
	seg.sinceIndex = 0
	sc := newScanner(seg.f, from, size, *buf)
	defer func() { *buf = sc.buf }()
	for {
		b, pos, ok := sc.next(true, 0)
		if !ok {
			break
		}
		if b.BaseOffset() != next {
			return fmt.Errorf("batch at %d has offset %d, expected %d", pos, b.BaseOffset(), next)
		}
		if err := seg.observe(b, pos, l.cfg.IndexIntervalBytes); err != nil && !errors.Is(err, index.ErrFull) {
			return err
		}
		next = b.NextOffset()
	}
	if sc.err != nil || sc.pos != size {
		return fmt.Errorf("tail after a clean shutdown is bad at %d: %v", sc.pos, sc.err)
	}
	seg.size.Store(size)
	seg.next.Store(next)
	return nil
}

// openScanned opens a segment, checks every batch, cuts a torn or corrupt
// tail and rebuilds both indexes.
func (l *Log) openScanned(base int64, buf *[]byte, rep *RecoveryReport) (*segment, error) {
	// The indexes are rebuilt from nothing: whatever the files held (even
	// a damaged size) is not read.
	seg, err := openSegmentFiles(l.fs, l.dir, l.indexDir, base, l.cfg, false, true, true)
	if err != nil {
		return nil, err
	}
	size, err := seg.f.Size()
	if err != nil {
		seg.close()
		return nil, fmt.Errorf("log: %s: %w", seg.logPath, err)
	}
	sc := newScanner(seg.f, 0, size, *buf)
	defer func() { *buf = sc.buf }()
	next := base
	var bad error
	for {
		b, pos, ok := sc.next(true, 0)
		if !ok {
			bad = sc.err
			break
		}
		if b.BaseOffset() != next {
			bad = fmt.Errorf("batch at %d has offset %d, expected %d", pos, b.BaseOffset(), next)
			sc.pos = pos
			break
		}
		// A full index only makes the rebuilt index sparser (the interval
		// may have been lowered since the segment was written).
		if err := seg.observe(b, pos, l.cfg.IndexIntervalBytes); err != nil && !errors.Is(err, index.ErrFull) {
			seg.close()
			return nil, fmt.Errorf("log: rebuild index of %s: %w", seg.logPath, err)
		}
		next = b.NextOffset()
	}
	rep.ScannedSegments++
	rep.ScannedBytes += sc.pos
	if sc.pos < size {
		if bad == nil {
			bad = errors.New("unreadable tail")
		}
		if err := seg.f.Truncate(sc.pos); err != nil {
			seg.close()
			return nil, fmt.Errorf("log: truncate %s: %w", seg.logPath, err)
		}
		if !rep.Truncated {
			rep.Truncated = true
			rep.TruncatedAt = next
			rep.Corruption = fmt.Sprintf("%s at position %d: %v", seg.logPath, sc.pos, bad)
		}
		rep.TruncatedBytes += size - sc.pos
	}
	seg.size.Store(sc.pos)
	seg.next.Store(next)
	seg.sealed = false
	seg.markWritten()
	return seg, nil
}
