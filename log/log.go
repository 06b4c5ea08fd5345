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
	// A new directory survives a crash only once its parent is synced.
	if err := vfs.MkdirAllSync(l.fs, dir); err != nil {
		return nil, fmt.Errorf("log: %w", err)
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
