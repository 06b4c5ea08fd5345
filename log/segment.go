package log

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/raftlog/raftlog/index"
	"github.com/raftlog/raftlog/log/vfs"
)

// File names of a segment: the base offset, 20 digits, zero padded (frozen).
const (
	logSuffix       = ".log"
	indexSuffix     = ".index"
	timeIndexSuffix = ".timeindex"
)

func segmentName(base int64, suffix string) string {
	return fmt.Sprintf("%020d%s", base, suffix)
}

// parseSegmentName returns the base offset of a "<20 digits>.log" name.
func parseSegmentName(name string) (int64, bool) {
	if !strings.HasSuffix(name, logSuffix) || len(name) != 20+len(logSuffix) {
		return 0, false
	}
	base, err := strconv.ParseInt(name[:20], 10, 64)
	if err != nil || base < 0 {
		return 0, false
	}
	return base, true
}

// segment is one .log file and its two indexes.
//
// The single writer (the Log's append path, holding Log.wmu) appends; it
// publishes size and next with atomic stores after the bytes are written and
// the index entries stored, so a reader that loads them sees only whole
// batches. Structural changes (seal, truncate, delete) happen under Log.mu
// held exclusively; readers hold it shared while they use the indexes, and a
// reference (refs) while they read the file, so a deleted segment's file is
// closed only after its last reader is done.
type segment struct {
	base     int64
	logPath  string
	f        vfs.File
	oi       *index.OffsetIndex
	ti       *index.TimeIndex
	size     atomic.Int64 // bytes of whole batches in the file
	next     atomic.Int64 // offset after the last batch
	maxTs    atomic.Int64 // largest batch max timestamp, -1 when none
	maxTsOff atomic.Int64 // base offset of the batch holding maxTs
	firstTs  int64        // max timestamp of the first batch (segment.ms), -1 when empty

	// Writer-only state.
	sinceIndex int    // bytes appended since the last index entry
	sealed     bool   // indexes trimmed and read-only
	writes     uint64 // writes into the .log so far
	synced     uint64 // writes an fsync has covered (dirty while below writes)
	behind     int64  // the .log's writeback was started below this position (-1: no append since the open)

	// writingBack is set while a write-behind of the .log runs (at most
	// one per segment).
	writingBack atomic.Bool
	// idxSeals counts the seals that left the indexes unsynced (a roll's);
	// idxSynced the count the last index fsync covered (under syncMu).
	idxSeals, idxSynced atomic.Uint64

	// syncMu serialises fsyncs of the .log (a background one and a
	// flush's) and guards syncErr, the first that failed.
	syncMu  sync.Mutex
	syncErr error

	refs    sync.WaitGroup
	closeMu sync.Mutex
	closed  bool
}

// openSegmentFiles opens or creates the files of a segment. The .log file
// comes from fsys; the index files are real files under idxDir. With
// create the .log is created empty; with freshIndexes (implied by create)
// the index files are recreated empty whatever they held.
func openSegmentFiles(fsys vfs.FS, dir, idxDir string, base int64, cfg Config, create, writable bool, freshIndexes ...bool) (*segment, error) {
	s := &segment{base: base, logPath: filepath.Join(dir, segmentName(base, logSuffix))}
	var err error
	if create {
		s.f, err = fsys.Create(s.logPath)
	} else {
		s.f, err = fsys.OpenRW(s.logPath)
	}
	if err != nil {
		return nil, fmt.Errorf("log: open segment: %w", err)
	}
	fresh := create || (len(freshIndexes) > 0 && freshIndexes[0])
	if err := s.openIndexes(idxDir, cfg, fresh, writable); err != nil {
		s.f.Close()
		return nil, err
	}
	s.next.Store(base)
	s.maxTs.Store(-1)
	s.maxTsOff.Store(base)
	s.firstTs = -1
	s.behind = -1
	s.sealed = !writable
	return s, nil
}

func (s *segment) openIndexes(idxDir string, cfg Config, create, writable bool) error {
	oiPath := filepath.Join(idxDir, segmentName(s.base, indexSuffix))
	tiPath := filepath.Join(idxDir, segmentName(s.base, timeIndexSuffix))
	if create {
		// A fresh segment must not inherit stale index files.
		removeFile(oiPath)
		removeFile(tiPath)
	}
	oi, err := index.OpenOffsetIndex(oiPath, s.base, cfg.SegmentIndexBytes, writable)
	if err != nil {
		return fmt.Errorf("log: open index: %w", err)
	}
	ti, err := index.OpenTimeIndex(tiPath, s.base, cfg.SegmentIndexBytes, writable)
	if err != nil {
		oi.Close()
		return fmt.Errorf("log: open time index: %w", err)
	}
	s.oi, s.ti = oi, ti
	return nil
}

// acquire takes a read reference; false when the segment is closed.
func (s *segment) acquire() bool {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return false
	}
	s.refs.Add(1)
	return true
}

func (s *segment) release() { s.refs.Done() }

// close waits for readers and closes the files. The indexes are trimmed to
// their real size (a clean close).
func (s *segment) close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	s.closeMu.Unlock()
	s.refs.Wait()
	err := s.oi.Close()
	if e := s.ti.Close(); err == nil {
		err = e
	}
	if e := s.f.Close(); err == nil {
		err = e
	}
	return err
}

// delete closes the segment and removes its files.
func (s *segment) delete(fsys vfs.FS) error {
	s.closeMu.Lock()
	s.closed = true
	s.closeMu.Unlock()
	s.refs.Wait()
	err := s.oi.Delete()
	if e := s.ti.Delete(); err == nil {
		err = e
	}
	if e := s.f.Close(); err == nil {
		err = e
	}
	if e := fsys.Remove(s.logPath); err == nil {
		err = e
	}
	return err
}

// observe updates the in-memory summary with a batch just appended or
// scanned, and adds index entries as index.interval.bytes requires. pos is
// the batch's position in the file.
func (s *segment) observe(b Batch, pos int64, interval int) error {
	if s.sinceIndex >= interval && pos > 0 {
		if err := s.addIndexEntry(b.BaseOffset(), pos); err != nil {
			return err
		}
	}
	s.sinceIndex += b.Size()
	if ts := b.MaxTimestamp(); ts > s.maxTs.Load() {
		s.maxTs.Store(ts)
		s.maxTsOff.Store(b.BaseOffset())
	}
	if s.firstTs < 0 {
		s.firstTs = b.MaxTimestamp()
	}
	return nil
}

// addIndexEntry records that the batch with base offset off starts at pos,
// and that every record before off has a timestamp at most maxTs.
func (s *segment) addIndexEntry(off, pos int64) error {
	if err := s.oi.Append(off, uint32(pos)); err != nil {
		return err
	}
	if ts := s.maxTs.Load(); ts >= 0 {
		if _, err := s.ti.MaybeAppend(ts, off); err != nil {
			return err
		}
	}
	s.sinceIndex = 0
	return nil
}

// seal makes the segment immutable: fsync the .log, add the final time
// index entry, trim both indexes and remap them read-only.
func (s *segment) seal(sync bool) error {
	if s.sealed {
		return nil
	}
	if ts := s.maxTs.Load(); ts >= 0 {
		if _, err := s.ti.MaybeAppend(ts, s.next.Load()); err != nil && !errors.Is(err, index.ErrFull) {
			return fmt.Errorf("log: seal %s: %w", s.logPath, err)
		}
	}
	seal := (*index.OffsetIndex).Seal
	sealTime := (*index.TimeIndex).Seal
	if !sync {
		seal, sealTime = (*index.OffsetIndex).SealNoSync, (*index.TimeIndex).SealNoSync
	}
	if err := seal(s.oi); err != nil {
		return fmt.Errorf("log: seal %s: %w", s.logPath, err)
	}
	if err := sealTime(s.ti); err != nil {
		return fmt.Errorf("log: seal %s: %w", s.logPath, err)
	}
	if !sync {
		s.idxSeals.Add(1) // fsync syncs them
	}
	s.sealed = true
	return nil
}

// unseal makes a sealed segment the active one again (after a suffix
// truncation).
func (s *segment) unseal() error {
	if !s.sealed {
		return nil
	}
	if err := s.oi.Unseal(); err != nil {
		return err
	}
	if err := s.ti.Unseal(); err != nil {
		return err
	}
	s.sealed = false
	return nil
}

// markWritten counts a write into the .log. Under wmu.
func (s *segment) markWritten() { s.writes++ }

// dirty reports writes no fsync has covered yet. Under wmu.
func (s *segment) dirty() bool {
	return s.synced != s.writes || s.idxSynced.Load() != s.idxSeals.Load()
}

// fsync fsyncs the .log, from any goroutine (a background fsync holds no
// lock of the log), and keeps a failure: Linux reports a writeback error
// to one fsync of a file description only, so a later fsync through the
// same file would succeed over pages that were lost.
func (s *segment) fsync() error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	// Indexes sealed without a sync first: they must be durable before the
	// recovery point passes the segment, as its data.
	if seals := s.idxSeals.Load(); s.syncErr == nil && seals != s.idxSynced.Load() {
		// SyncFile, not Sync: a truncation may unseal and a roll seal
		// the indexes again meanwhile (then the count stays behind).
		if s.syncErr = s.oi.SyncFile(); s.syncErr == nil {
			s.syncErr = s.ti.SyncFile()
		}
		if s.syncErr == nil {
			s.idxSynced.Store(seals)
		}
	}
	if s.syncErr == nil {
		s.syncErr = s.f.Sync()
	}
	return s.syncErr
}

// failedSync is the error of a failed fsync of the .log, if any.
func (s *segment) failedSync() error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	return s.syncErr
}

// scanner walks the batches of a segment file from a position, reading in
// large chunks so that a walk over many small batches costs few reads.
type scanner struct {
	f   vfs.File
	buf []byte
	// window: buf[lo:hi] holds file bytes [at, at+hi-lo).
	at, lo, hi int64
	pos        int64 // position of the next batch
	limit      int64 // file size to stop at
	err        error
}

// scanChunk is the read size of a recovery scan.
const scanChunk = 256 << 10

// newScanner walks f from position from to limit, reading len(buf) bytes at
// a time (scanChunk when buf is nil).
func newScanner(f vfs.File, from, limit int64, buf []byte) *scanner {
	if cap(buf) == 0 {
		buf = make([]byte, scanChunk)
	}
	return &scanner{f: f, buf: buf[:cap(buf)], pos: from, limit: limit, at: from}
}

// next returns the next batch (valid until the following call), its
// position, and whether one was read. When it returns false, sc.err says
// why: nil at a clean end of data, or what is torn or corrupt at sc.pos.
// With full, the whole batch is read and validated (CRC, records);
// without, only its header is read and checked, and the returned Batch
// holds just the header.
func (sc *scanner) next(full bool, maxSize int) (Batch, int64, bool) {
	if sc.pos >= sc.limit {
		return nil, sc.pos, false
	}
	hdr, ok := sc.window(LogOverhead)
	if !ok {
		return nil, sc.pos, false
	}
	size, err := peekBatchSize(hdr)
	if err != nil {
		sc.err = err
		return nil, sc.pos, false
	}
	if sc.pos+int64(size) > sc.limit {
		sc.err = fmt.Errorf("%w: batch of %d bytes at %d runs past the end (%d)", ErrCorruptBatch, size, sc.pos, sc.limit)
		return nil, sc.pos, false
	}
	n := BatchHeaderSize
	if full {
		n = size
	}
	p, ok := sc.window(n)
	if !ok {
		return nil, sc.pos, false
	}
	if full {
		if _, err := ValidateBatch(p, maxSize); err != nil {
			sc.err = err
			return nil, sc.pos, false
		}
	} else if Batch(p).Magic() != 2 {
		sc.err = fmt.Errorf("%w: bad magic at %d", ErrCorruptBatch, sc.pos)
		return nil, sc.pos, false
	}
	pos := sc.pos
	sc.pos += int64(size)
	return Batch(p), pos, true
}

// window returns n bytes at sc.pos, reading more of the file when needed.
func (sc *scanner) window(n int) ([]byte, bool) {
	start := sc.pos - sc.at + sc.lo
	if sc.pos >= sc.at && start+int64(n) <= sc.hi {
		return sc.buf[start : start+int64(n)], true
	}
	if n > len(sc.buf) {
		sc.buf = make([]byte, n)
	}
	want := int64(len(sc.buf))
	if rem := sc.limit - sc.pos; rem < want {
		want = rem
	}
	if want < int64(n) {
		sc.err = fmt.Errorf("%w: %d bytes at %d, file ends at %d", ErrCorruptBatch, n, sc.pos, sc.limit)
		return nil, false
	}
	m, err := sc.f.ReadAt(sc.buf[:want], sc.pos)
	if int64(m) < want {
		if err == nil || err == io.EOF {
			err = fmt.Errorf("%w: short read at %d", ErrCorruptBatch, sc.pos)
		}
		sc.err = err
		return nil, false
	}
	sc.at, sc.lo, sc.hi = sc.pos, 0, want
	return sc.buf[:n], true
}

func removeFile(path string) { _ = vfs.OS.RemoveAll(path) }
