package log

import (
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlog/raftlog/index"
	"github.com/raftlog/raftlog/log/vfs"
)

// Config holds the per-partition settings, named after Kafka's topic
// configs. The zero value of a field means its default.
type Config struct {
	// SegmentBytes rolls the active segment before it would pass this size
	// (segment.bytes, default 1 GiB, at most 2 GiB - 1 since positions are
	// 32-bit).
	SegmentBytes int64
	// SegmentMs rolls the active segment when its first batch is older
	// than this (segment.ms, default 7 days).
	SegmentMs time.Duration
	// IndexIntervalBytes is the log bytes between two index entries
	// (index.interval.bytes, default 4096).
	IndexIntervalBytes int
	// SegmentIndexBytes is the preallocated size of each index
	// (segment.index.bytes, default 10 MiB).
	SegmentIndexBytes int
	// RetentionMs deletes sealed segments whose newest record is older
	// (retention.ms, default 7 days; negative: keep forever).
	RetentionMs time.Duration
	// RetentionBytes deletes the oldest sealed segments while the log
	// without them would still hold this many bytes (retention.bytes,
	// default -1: no limit).
	RetentionBytes int64
	// FlushMessages fsyncs after this many records (flush.messages,
	// default 0: never on append; replication provides durability).
	FlushMessages int64
	// FlushMs fsyncs unflushed data this often (flush.ms, default 0: never).
	FlushMs time.Duration
	// MaxBatchBytes bounds one record batch (message.max.bytes, default
	// 1048588 as Kafka).
	MaxBatchBytes int
	// WriteBehindBytes starts the writeback of the active segment's newly
	// appended bytes whenever this many have gathered (sync_file_range,
	// in the background), so that the kernel writes the log to the device
	// in small steps behind the appends instead of in bursts of its whole
	// dirty limit, which stall appends and take the CPU while they last.
	// It makes nothing durable and changes no result: a raftlog setting,
	// not Kafka's (default 1 MiB; negative: off).
	WriteBehindBytes int64
}

// Defaults of Config, as Kafka's.
const (
	DefaultSegmentBytes       = 1 << 30
	DefaultSegmentMs          = 7 * 24 * time.Hour
	DefaultIndexIntervalBytes = 4096
	DefaultRetentionMs        = 7 * 24 * time.Hour
	DefaultMaxBatchBytes      = 1048588
	DefaultWriteBehindBytes   = 1 << 20
	maxSegmentBytes           = math.MaxInt32
)

func (c Config) withDefaults() (Config, error) {
	if c.SegmentBytes == 0 {
		c.SegmentBytes = DefaultSegmentBytes
	}
	if c.SegmentMs == 0 {
		c.SegmentMs = DefaultSegmentMs
	}
	if c.IndexIntervalBytes == 0 {
		c.IndexIntervalBytes = DefaultIndexIntervalBytes
	}
	if c.SegmentIndexBytes == 0 {
		c.SegmentIndexBytes = index.DefaultMaxBytes
	}
	if c.RetentionMs == 0 {
		c.RetentionMs = DefaultRetentionMs
	}
	if c.RetentionBytes == 0 {
		c.RetentionBytes = -1
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.WriteBehindBytes == 0 {
		c.WriteBehindBytes = DefaultWriteBehindBytes
	}
	switch {
	case c.SegmentBytes < BatchHeaderSize || c.SegmentBytes > maxSegmentBytes:
		return c, fmt.Errorf("log: segment.bytes %d out of range [%d, %d]", c.SegmentBytes, BatchHeaderSize, maxSegmentBytes)
	case c.IndexIntervalBytes < 0:
		return c, fmt.Errorf("log: index.interval.bytes %d is negative", c.IndexIntervalBytes)
	case c.SegmentIndexBytes < 4*index.TimeEntrySize:
		return c, fmt.Errorf("log: segment.index.bytes %d below %d", c.SegmentIndexBytes, 4*index.TimeEntrySize)
	case c.MaxBatchBytes < BatchHeaderSize:
		return c, fmt.Errorf("log: max batch bytes %d below %d", c.MaxBatchBytes, BatchHeaderSize)
	case c.FlushMessages < 0 || c.FlushMs < 0 || c.SegmentMs < 0:
		return c, fmt.Errorf("log: negative flush or segment time setting")
	}
	return c, nil
}

// Option configures Open.
type Option func(*options)

type options struct {
	fs       vfs.FS
	indexDir string
	cfg      Config
	logger   hclog.Logger
	now      func() time.Time
	// background runs a background task (a sealed segment's fsync); a
	// new goroutine when nil. Crash tests run the tasks at chosen points.
	background func(func())
}

// WithFS sets the file system of the .log files and checkpoints (default
// vfs.OS).
func WithFS(fs vfs.FS) Option { return func(o *options) { o.fs = fs } }

// WithIndexDir puts the .index and .timeindex files in this directory of the
// real file system (they are mmapped, so they cannot live in a MemFS).
// Default: the log directory itself, which requires the OS file system.
func WithIndexDir(dir string) Option { return func(o *options) { o.indexDir = dir } }

// WithConfig sets the partition configuration.
func WithConfig(c Config) Option { return func(o *options) { o.cfg = c } }

// WithLogger routes the log's events (recovery, truncation, roll,
// retention) to l.
func WithLogger(l hclog.Logger) Option { return func(o *options) { o.logger = l } }

// WithClock replaces time.Now (for segment age and retention tests).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }
