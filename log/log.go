// Package log is the partition log: a directory of segments, each a .log
// file of Kafka RecordBatch v2 bytes exactly as Kafka stores them, with a
// sparse .index (offset → position) and .timeindex (timestamp → offset) over
// mmap beside it.
//
// Appends go through the file sequentially without fsync (replication is
// what makes a write durable); a flush policy can add fsyncs. On open after
// an unclean shutdown every segment after the recovery point is scanned, a
// torn or corrupt tail is truncated and reported, and the indexes are
// rebuilt: indexes are derived data, never trusted over the log.
//
// One goroutine at a time appends (Append serialises callers); any number
// read concurrently and never see a half-written batch.
package log

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlog/raftlog/index"
	"github.com/raftlog/raftlog/log/vfs"
)

// Errors callers branch on.
var (
	// ErrOffsetOutOfRange: a read below the log start or past the end.
	ErrOffsetOutOfRange = errors.New("log: offset out of range")
	// ErrClosed: the log is closed.
	ErrClosed = errors.New("log: closed")
	// ErrOffsetMismatch: AppendAssigned got a batch that does not start at
	// the log end offset.
	ErrOffsetMismatch = errors.New("log: batch offset does not follow the log end")
)

// Log is one partition's log.
type Log struct {
	dir      string
	indexDir string
	fs       vfs.FS
	cfg      Config
	logger   hclog.Logger
	now      func() time.Time

	// wmu serialises writers: append, flush, roll, truncation, retention.
	wmu sync.Mutex
	// mu guards segs; readers hold it shared while they use an index.
	mu   sync.RWMutex
	segs []*segment

	// failed is werr for readers that do not take wmu (Err).
	failed atomic.Pointer[error]

	start atomic.Int64 // log start offset
	pin   atomic.Int64 // segments holding offsets at or past it are never deleted from the front

	// Writer state, under wmu.
	werr          error // sticky write error (set through stop)
	closed        bool
	unflushedMsgs int64
	recoveryPoint int64
	// dirGen counts the rolls; dirSynced is the count a directory fsync
	// covered last. A roll does not fsync the directory itself: the
	// background task of the segment it sealed does, before that
	// segment's fsync, and so does a flush (see syncSealed).
	dirGen, dirSynced uint64
	cuts              uint64 // truncations and resets so far
	pending           []pendingBatch
	iov               [][]byte
	one               [1][]byte

	recovery RecoveryReport

	// The checkpoint file. ckWanted is the newest checkpoint asked for
	// (set under wmu and ckWantMu); checkpointed is what the file holds
	// (under ckMu). Every write of the file holds ckMu and writes the
	// newest ckWanted when it starts, so a write that was slow never
	// replaces a newer checkpoint with its older one (a truncation's
	// lowered recovery point with a higher one that no longer holds).
	// Lock order: wmu, ckMu, ckWantMu.
	ckMu         sync.Mutex
	checkpointed checkpoint
	ckWantMu     sync.Mutex
	ckWanted     checkpoint

	// writeBehindFailed turns the write-behind off after it failed once.
	writeBehindFailed atomic.Bool

	stopFlush  chan struct{}
	flushDone  chan struct{}
	bg         sync.WaitGroup // background fsyncs of sealed segments
	background func(func())
	stopOnce   sync.Once
}

type pendingBatch struct {
	buf, start, size int
	base, last       int64
	maxTs            int64
	records          int32
}

// AppendInfo describes what an append wrote.
type AppendInfo struct {
	BaseOffset int64 // offset of the first record written
	LastOffset int64 // offset of the last record written
	Batches    int
	Records    int64
	Bytes      int64
}

// Open opens (creating if needed) the partition log in dir, recovering it
// when it was not closed cleanly.
func Open(dir string, opts ...Option) (*Log, error) {
	o := options{fs: vfs.OS, logger: hclog.NewNullLogger(), now: time.Now}
	for _, fn := range opts {
		fn(&o)
	}
	cfg, err := o.cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if o.indexDir == "" {
		if o.fs != vfs.OS {
			return nil, fmt.Errorf("log: WithIndexDir is required with a file system other than vfs.OS")
		}
		o.indexDir = dir
	}
	l := &Log{dir: dir, indexDir: o.indexDir, fs: o.fs, cfg: cfg, logger: o.logger, now: o.now, background: o.background}
	if l.background == nil {
		l.background = func(fn func()) { go fn() }
	}
	l.pin.Store(math.MaxInt64)
	if err := l.fs.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	// A new directory survives a crash only once its parent is synced.
	for d := filepath.Clean(dir); filepath.Dir(d) != d; d = filepath.Dir(d) {
		if err := l.fs.SyncDir(filepath.Dir(d)); err != nil {
			return nil, fmt.Errorf("log: sync dir: %w", err)
		}
	}
	if err := os.MkdirAll(l.indexDir, 0o755); err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	if err := l.recover(); err != nil {
		l.closeSegments()
		return nil, err
	}
	if cfg.FlushMs > 0 {
		l.stopFlush = make(chan struct{})
		l.flushDone = make(chan struct{})
		go l.flushLoop(cfg.FlushMs)
	}
	return l, nil
}

// Dir is the log's directory.
func (l *Log) Dir() string { return l.dir }

// Config is the effective configuration.
func (l *Log) Config() Config { return l.cfg }

// StartOffset is the first offset that can be read.
func (l *Log) StartOffset() int64 { return l.start.Load() }

// EndOffset is the offset the next appended record gets.
func (l *Log) EndOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.segs[len(l.segs)-1].next.Load()
}

// Recovery reports what the last Open found and did.
func (l *Log) Recovery() RecoveryReport { return l.recovery }

// Append validates the v2 batches in p (SplitBatches) and appends them
// as AppendValidated does. It is for callers that hold raw bytes; the
// replicas' write path validates where the batches enter the node and
// calls AppendValidated.
func (l *Log) Append(p []byte, leaderEpoch int32) (AppendInfo, error) {
	if _, err := SplitBatches(p, l.cfg.MaxBatchBytes); err != nil {
		return AppendInfo{}, fmt.Errorf("log: %w", err)
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.one[0] = p
	return l.appendLocked(l.one[:], true, leaderEpoch)
}

// AppendValidated appends the batches held in bufs (each buffer holds
// whole batches that SplitBatches or ValidateBatch accepted): it assigns
// them offsets from the log end by rewriting baseOffset, stamps
// partitionLeaderEpoch with leaderEpoch (both outside the CRC, so nothing
// is re-encoded: the buffers are changed in place), and writes them with
// one vectored write per run of batches that fit the active segment. A
// negative leaderEpoch keeps the epoch each batch already carries (a Raft
// log whose batches carry their entries' terms). The batches are not
// checked again: only a length that runs past its buffer, or past
// MaxBatchBytes, stops the append before anything is written.
func (l *Log) AppendValidated(bufs [][]byte, leaderEpoch int32) (AppendInfo, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.appendLocked(bufs, true, leaderEpoch)
}

// AppendAssigned appends validated batches whose offsets are already
// assigned (a replica replaying a snapshot stream): the first must start
// at the log end offset and each must follow the one before. Bytes are
// written unchanged.
func (l *Log) AppendAssigned(bufs ...[]byte) (AppendInfo, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.appendLocked(bufs, false, 0)
}

func (l *Log) appendLocked(bufs [][]byte, assign bool, epoch int32) (AppendInfo, error) {
	if l.closed {
		return AppendInfo{}, ErrClosed
	}
	if l.werr != nil {
		return AppendInfo{}, l.werr
	}
	active := l.segs[len(l.segs)-1]
	next := active.next.Load()
	info := AppendInfo{BaseOffset: next}
	l.pending = l.pending[:0]
	for bi, p := range bufs {
		for at := 0; at < len(p); {
			size, err := frameSize(p[at:], l.cfg.MaxBatchBytes)
			if err != nil {
				return AppendInfo{}, fmt.Errorf("log: batch %d: %w", len(l.pending), err)
			}
			b := Batch(p[at : at+size])
			if assign {
				b.SetBaseOffset(next)
				if epoch >= 0 {
					b.SetLeaderEpoch(epoch)
				}
			} else if b.BaseOffset() != next {
				return AppendInfo{}, fmt.Errorf("%w: batch at %d, expected %d", ErrOffsetMismatch, b.BaseOffset(), next)
			}
			last := b.LastOffset()
			if last < next || last == math.MaxInt64 {
				return AppendInfo{}, fmt.Errorf("log: batch %d: %w: offsets overflow", len(l.pending), ErrCorruptBatch)
			}
			l.pending = append(l.pending, pendingBatch{buf: bi, start: at, size: size, base: next, last: last, maxTs: b.MaxTimestamp(), records: b.RecordCount()})
			next = last + 1
			at += size
			info.Records += int64(b.RecordCount())
			info.Bytes += int64(size)
		}
	}
	if len(l.pending) == 0 {
		return AppendInfo{}, fmt.Errorf("log: %w: no batches", ErrCorruptBatch)
	}
	info.Batches = len(l.pending)
	info.LastOffset = next - 1
	if err := l.writePending(bufs); err != nil {
		return AppendInfo{}, err
	}
	l.unflushedMsgs += info.Records
	if l.cfg.FlushMessages > 0 && l.unflushedMsgs >= l.cfg.FlushMessages {
		if err := l.flushLocked(); err != nil {
			return AppendInfo{}, err
		}
	}
	return info, nil
}

// writePending writes l.pending into the active segment, rolling when a
// batch would not fit.
func (l *Log) writePending(bufs [][]byte) error {
	interval := l.cfg.IndexIntervalBytes
	for i := 0; i < len(l.pending); {
		seg := l.segs[len(l.segs)-1]
		if l.mustRoll(seg, &l.pending[i], 0, 0) {
			if err := l.roll(l.pending[i].base); err != nil {
				return err
			}
			continue
		}
		// The run [i, j) goes into seg.
		runBytes, entries := int64(0), 0
		since := seg.sinceIndex
		j := i
		for j < len(l.pending) {
			pb := &l.pending[j]
			if j > i && l.mustRoll(seg, pb, runBytes, entries) {
				break
			}
			if since >= interval && seg.size.Load()+runBytes > 0 {
				entries++
				since = 0
			}
			since += pb.size
			runBytes += int64(pb.size)
			j++
		}
		l.iov = l.iov[:0]
		for k := i; k < j; k++ {
			pb := &l.pending[k]
			p := bufs[pb.buf][pb.start : pb.start+pb.size]
			if n := len(l.iov); n > 0 && k > i && l.pending[k-1].buf == pb.buf {
				prev := l.iov[n-1]
				l.iov[n-1] = prev[:len(prev)+pb.size] // contiguous in the same buffer
			} else {
				l.iov = append(l.iov, p)
			}
		}
		pos := seg.size.Load()
		start := pos
		if err := vfs.WriteVecAt(seg.f, l.iov, pos); err != nil {
			l.stop(fmt.Errorf("log: write %s at %d: %w", seg.logPath, pos, err))
			return l.werr
		}
		seg.markWritten()
		for k := i; k < j; k++ {
			pb := &l.pending[k]
			b := Batch(bufs[pb.buf][pb.start : pb.start+pb.size])
			if err := seg.observe(b, pos, interval); err != nil && !errors.Is(err, index.ErrFull) {
				l.stop(fmt.Errorf("log: index %s: %w", seg.logPath, err))
				return l.werr
			}
			pos += int64(pb.size)
		}
		// Publish: readers see the run only now.
		seg.size.Store(pos)
		seg.next.Store(l.pending[j-1].last + 1)
		l.writeBehind(seg, start, pos)
		i = j
	}
	return nil
}

// writeBehindSlots bounds the write-behinds running at once in the
// process: on a device that cannot keep up, each waits in the kernel for
// room in its queue, and a thread per partition waiting there is what the
// bound prevents. One that finds no slot is skipped, never waited for.
var writeBehindSlots = make(chan struct{}, 4)

// writeBehindPage aligns write-behind ranges: the page holding the end
// of the log is written again by the next append, so it is left dirty.
const writeBehindPage = 4096

// writeBehind starts, in the background, the writeback of seg's .log up
// to end (rounded down to a page) once WriteBehindBytes have gathered
// since the last start, unless one is still running (the next append's
// covers this range too). start is where the append that ended at end
// began: what a segment held when it was opened is not written behind.
// It is what keeps the kernel's writeback of the log in small steps: left
// alone, it writes nothing until the dirty pages pass
// vm.dirty_background_ratio (gigabytes), and then all at once, while ext4
// allocates their blocks under the lock that appends to the same file
// take. Under wmu.
func (l *Log) writeBehind(seg *segment, start, end int64) {
	if l.cfg.WriteBehindBytes < 0 || l.writeBehindFailed.Load() {
		return
	}
	wb, ok := seg.f.(vfs.Writebacker)
	if !ok {
		return
	}
	if seg.behind < 0 || seg.behind > start { // opened, or truncated since
		seg.behind = start &^ (writeBehindPage - 1)
	}
	to := end &^ (writeBehindPage - 1)
	if to-seg.behind < l.cfg.WriteBehindBytes || !seg.writingBack.CompareAndSwap(false, true) {
		return
	}
	select {
	case writeBehindSlots <- struct{}{}:
	default: // as many run as may: a later append covers this range
		seg.writingBack.Store(false)
		return
	}
	from := seg.behind
	seg.behind = to
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		defer func() { <-writeBehindSlots }()
		defer seg.writingBack.Store(false)
		// A segment closed meanwhile fails with os.ErrClosed. Any other
		// error (a file system without the call, an I/O error the next
		// fsync reports too) turns the write-behind off for this log,
		// which costs latency, not data: said once, not at every MiB.
		if err := wb.StartWriteback(from, to-from); err != nil && !errors.Is(err, os.ErrClosed) && !l.writeBehindFailed.Swap(true) {
			l.logger.Warn("write-behind failed; the kernel writes this log back on its own from now on", "file", seg.logPath, "error", err)
		}
	}()
}

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
// under load, which the appends used to wait for. Until it returns a
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

// ErrWrite matches (errors.Is) every error of a write that failed and
// stopped the log: Kafka's KAFKA_STORAGE_ERROR.
var ErrWrite = errors.New("log: write failed")

// writeError is a write error that stopped the log; its text is the
// cause's.
type writeError struct{ error }

func (e writeError) Unwrap() error        { return e.error }
func (e writeError) Is(target error) bool { return target == ErrWrite }

// Err is the write error that stopped the log, nil while it writes. After
// a failed write (a full disk, an I/O error) every write fails the same
// way until the log is closed and opened again: the recovery of the open
// repairs whatever the failed write left behind.
func (l *Log) Err() error {
	if p := l.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// Close fsyncs the log, trims the indexes, writes the checkpoint and the
// clean-shutdown marker, and closes every file. The marker is written only
// when everything before it succeeded.
func (l *Log) Close() error {
	l.stopFlusher()
	defer l.bg.Wait() // after wmu is released: a background fsync ends under it
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	err := l.werr
	if err == nil {
		err = l.flushLocked()
		if err == nil {
			l.recoveryPoint = l.segs[len(l.segs)-1].next.Load()
			err = l.writeCheckpointLocked()
		}
	}
	if cerr := l.closeSegments(); err == nil {
		err = cerr
	}
	if err == nil {
		err = l.writeCleanMarker()
	}
	return err
}

func (l *Log) closeSegments() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	for _, s := range l.segs {
		if e := s.close(); err == nil {
			err = e
		}
	}
	return err
}

func (l *Log) writeCleanMarker() error {
	name := filepath.Join(l.dir, cleanShutdownName)
	f, err := l.fs.Create(name)
	if err != nil {
		return err
	}
	if err := vfs.WriteSyncClose(f, nil, 0); err != nil {
		return err
	}
	return l.fs.SyncDir(l.dir)
}

// floorIndex is the index of the segment holding offset (the last one whose
// base is at most offset), or 0. Callers hold wmu or mu.
func (l *Log) floorIndex(offset int64) int {
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > offset })
	if i == 0 {
		return 0
	}
	return i - 1
}

// SegmentInfo describes one segment.
type SegmentInfo struct {
	BaseOffset   int64
	NextOffset   int64
	Size         int64
	MaxTimestamp int64
	Sealed       bool
	LogPath      string
	IndexEntries int
	TimeEntries  int
}

// Segments lists the segments, oldest first.
func (l *Log) Segments() []SegmentInfo {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]SegmentInfo, len(l.segs))
	for i, s := range l.segs {
		out[i] = SegmentInfo{
			BaseOffset: s.base, NextOffset: s.next.Load(), Size: s.size.Load(),
			MaxTimestamp: s.maxTs.Load(), Sealed: i < len(l.segs)-1, LogPath: s.logPath,
			IndexEntries: s.oi.Entries(), TimeEntries: s.ti.Entries(),
		}
	}
	return out
}

// Size is the total bytes of the log's segments.
func (l *Log) Size() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var n int64
	for _, s := range l.segs {
		n += s.size.Load()
	}
	return n
}

// MaxTimestamp is the largest batch timestamp in the log, -1 when empty.
func (l *Log) MaxTimestamp() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	m := int64(-1)
	for _, s := range l.segs {
		if ts := s.maxTs.Load(); ts > m {
			m = ts
		}
	}
	return m
}

// isSegmentFile reports whether a directory entry belongs to a segment
// (used to clean up orphans).
func isIndexFile(name string) bool {
	return strings.HasSuffix(name, indexSuffix) || strings.HasSuffix(name, timeIndexSuffix)
}

// Abort closes every file without fsync, checkpoint or clean-shutdown
// marker: what a crash leaves. Tests of crash recovery use it; so does a
// node that must stop after a fatal error.
func (l *Log) Abort() {
	l.stopFlusher()
	defer l.bg.Wait() // as in Close
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.segs {
		s.closeMu.Lock()
		s.closed = true
		s.closeMu.Unlock()
		s.refs.Wait()
		s.oi.Abort()
		s.ti.Abort()
		s.f.Close()
	}
}

func (l *Log) stopFlusher() {
	l.stopOnce.Do(func() {
		if l.stopFlush != nil {
			close(l.stopFlush)
			<-l.flushDone
		}
	})
}
