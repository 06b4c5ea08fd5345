package replication

import (
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/log/vfs"
)

// Config configures a Replica.
type Config struct {
	// Group names the Raft group, unique in the cluster ("topic-3").
	Group string
	// NodeID is the node's identity; the Raft server id is derived from it
	// and the replica's incarnation (a wiped disk gets a new one).
	NodeID string
	// ServerID, when set, is the Raft server id a new replica takes (the
	// cluster derives it from the node id and the node's incarnation, so
	// peers can name it before it exists). A replica that already has one
	// keeps it.
	ServerID raft.ServerID
	// Dir holds the replica: log/ (the partition log), raft.stable,
	// raft.anchor, snapshots/.
	Dir string
	// FS is the file system of Dir (default vfs.OS).
	FS vfs.FS
	// IndexDir holds the mmapped indexes on the real file system (default
	// Dir/log; required when FS is not vfs.OS).
	IndexDir string
	// Log is the partition configuration.
	Log log.Config
	// DenseOffsets is the partition's offset layout, the same on every
	// replica of the group: true, only produced batches take offsets
	// (dense from 0, as in Kafka) and Raft's own entries are kept in an
	// entries file beside the log; false, the legacy layout, where they
	// are control batches taking an offset each. A replica already on
	// disk must be in the layout asked for (Open refuses it otherwise).
	DenseOffsets bool
	// Mux is the node's shared Raft transport.
	Mux *Mux
	// Quiescer, when set, quiesces the group while it is idle (see
	// Quiescer); it must be on Mux.
	Quiescer *Quiescer
	// Logger receives everything, Raft's own lines included.
	Logger hclog.Logger
	// BootID identifies the kernel boot (default: read from
	// /proc/sys/kernel/random/boot_id). A restart after an unclean shutdown
	// with a new boot id may have lost unsynced data: the vote guard gates
	// the replica. Tests inject it to simulate a power loss.
	BootID string
	// Timing and snapshot cadence of Raft; zero fields take defaults.
	Raft RaftConfig
	// ProducerIDExpiration forgets an idempotent producer that has written
	// nothing for this long (default DefaultProducerIDExpiration, Kafka's
	// producer.id.expiration.ms); MaxProducerIDs caps the producers a
	// partition remembers (default DefaultMaxProducerIDs), forgetting the
	// least recently written first.
	ProducerIDExpiration time.Duration
	MaxProducerIDs       int
	// Gate opens the replica gated by the vote guard for this reason
	// whatever its recovery found (when it holds any state): a replica
	// reopened after its log failed a write, which may have been an fsync
	// whose error told that unsynced pages were dropped, so that even on
	// the same boot the log may lack what it once acknowledged.
	Gate string
	// OnLeadership, when set, is called each time the replica wins or
	// loses leadership, from the goroutine watching it: it must not
	// block.
	OnLeadership func()
}

// RaftConfig holds the Raft settings a deployment may tune.
type RaftConfig struct {
	HeartbeatTimeout   time.Duration // default 1s
	ElectionTimeout    time.Duration // default 1s
	LeaderLeaseTimeout time.Duration // default HeartbeatTimeout
	CommitTimeout      time.Duration // default 20ms
	SnapshotInterval   time.Duration // default 30s
	SnapshotThreshold  uint64        // default 8192 entries
	TrailingLogs       uint64        // default 4096 entries
	MaxAppendEntries   int           // default 256
}

func (c RaftConfig) withDefaults() RaftConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.HeartbeatTimeout, time.Second)
	def(&c.ElectionTimeout, time.Second)
	// A lease as long as the heartbeat timeout: a shorter one stepped
	// leaders down across a node starved of CPU for a few hundred
	// milliseconds.
	def(&c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	def(&c.CommitTimeout, 20*time.Millisecond)
	def(&c.SnapshotInterval, 30*time.Second)
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = 8192
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = 4096
	}
	if c.MaxAppendEntries == 0 {
		c.MaxAppendEntries = 256
	}
	return c
}
