// Package replication replicates a partition with hashicorp/raft: one Raft
// group per partition, whose Raft log is the partition log itself (each
// entry one Kafka RecordBatch, written once per replica), over one
// node-wide transport (Mux), with a vote guard that keeps the group safe
// although appends are never fsynced.
package replication

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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
	// Mux is the node's shared Raft transport.
	Mux *Mux
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
	// DisableVoteGuard turns the guard off. Only tests that show what the
	// guard prevents set it.
	DisableVoteGuard bool
	// Gate opens the replica gated by the vote guard for this reason
	// whatever its recovery found (when it holds any state): a replica
	// reopened after its log failed a write, which may have been an fsync
	// whose error told that unsynced pages were dropped, so that even on
	// the same boot the log may lack what it once acknowledged.
	Gate string
}

// RaftConfig holds the Raft settings a deployment may tune.
type RaftConfig struct {
	HeartbeatTimeout   time.Duration // default 1s
	ElectionTimeout    time.Duration // default 1s
	LeaderLeaseTimeout time.Duration // default 500ms
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
	def(&c.LeaderLeaseTimeout, 500*time.Millisecond)
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

// Acks of Kafka's produce request.
const (
	AcksNone   = 0
	AcksLeader = 1
	AcksAll    = -1
)

// NotLeaderError is returned by Append on a replica that does not lead; it
// names the leader when one is known.
type NotLeaderError struct {
	LeaderID   raft.ServerID
	LeaderAddr raft.ServerAddress
}

func (e *NotLeaderError) Error() string {
	if e.LeaderID == "" {
		return "replication: not the leader, no leader known"
	}
	return fmt.Sprintf("replication: not the leader; the leader is %s at %s", e.LeaderID, e.LeaderAddr)
}

// Replica is one replica of a partition on this node.
type Replica struct {
	cfg      Config
	logger   hclog.Logger
	log      *log.Log
	store    *logStore
	stable   *stableStore
	snaps    *snapshotStore
	fsm      *fsm
	guard    *guardTransport
	raft     *raft.Raft
	serverID raft.ServerID
	ctl      *ctlServer

	nonce     uint64
	recovered atomic.Bool
	prod      *producers
	appendMu  sync.Mutex // checks and enqueues in one order
	// ready is set once a new leader has applied everything before its
	// term (a barrier), so its high watermark covers every entry earlier
	// leaders may have served; cleared when leadership goes.
	ready     atomic.Bool
	raftp     atomic.Pointer[raft.Raft] // r.raft for goroutines that may run before NewRaft returns
	gateMu    sync.Mutex
	gateSince time.Time
	gateWhy   string

	closeOnce sync.Once
	closed    chan struct{}
	wg        sync.WaitGroup
}

const (
	keyServerID    = "raftlog.server_id"
	keyBootID      = "raftlog.boot_id"
	keyGated       = "raftlog.gated"
	keyCurrentTerm = "CurrentTerm" // raft's own key
	applyTimeout   = 10 * time.Second
)

// ReadBootID returns the kernel boot id, or "" where there is none.
func ReadBootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Open opens (creating if needed) the replica in cfg.Dir and starts its
// Raft group. A new group must then be bootstrapped on one replica
// (Bootstrap) or this replica added to an existing group by its leader.
func Open(cfg Config) (*Replica, error) {
	if cfg.Group == "" || cfg.NodeID == "" || cfg.Dir == "" || cfg.Mux == nil {
		return nil, errors.New("replication: Config needs Group, NodeID, Dir and Mux")
	}
	if cfg.FS == nil {
		cfg.FS = vfs.OS
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.BootID == "" {
		cfg.BootID = ReadBootID()
	}
	logger := cfg.Logger.With("group", cfg.Group)
	r := &Replica{cfg: cfg, logger: logger, closed: make(chan struct{})}
	fsys := cfg.FS
	if err := fsys.MkdirAll(cfg.Dir); err != nil {
		return nil, err
	}
	if err := fsys.SyncDir(filepath.Dir(cfg.Dir)); err != nil {
		return nil, err
	}
	var err error
	if r.stable, err = openStableStore(fsys, cfg.Dir); err != nil {
		return nil, err
	}
	if id, err := r.stable.Get([]byte(keyServerID)); err == nil {
		r.serverID = raft.ServerID(id)
	} else {
		r.serverID = cfg.ServerID
		if r.serverID == "" {
			var b [4]byte
			rand.Read(b[:])
			r.serverID = raft.ServerID(cfg.NodeID + "-" + hex.EncodeToString(b[:]))
		}
		if err := r.stable.Set([]byte(keyServerID), []byte(r.serverID)); err != nil {
			return nil, err
		}
	}
	logger = logger.With("server", string(r.serverID))
	r.logger = logger

	logDir := filepath.Join(cfg.Dir, "log")
	opts := []log.Option{log.WithFS(fsys), log.WithConfig(cfg.Log), log.WithLogger(logger.Named("log"))}
	if cfg.IndexDir != "" {
		opts = append(opts, log.WithIndexDir(cfg.IndexDir))
	}
	if r.log, err = log.Open(logDir, opts...); err != nil {
		return nil, err
	}
	fail := func(err error) (*Replica, error) {
		r.log.Abort()
		return nil, err
	}
	if r.snaps, err = openSnapshotStore(fsys, cfg.Dir, r.log); err != nil {
		return fail(err)
	}
	metas, _ := r.snaps.list()
	var pending *snapMeta
	if len(metas) > 0 && metas[0].HasData {
		pending = &metas[0]
	}
	var replaying bool
	if r.store, replaying, err = openLogStore(r.log, fsys, cfg.Dir, pending); err != nil {
		return fail(err)
	}
	if pending != nil && !replaying {
		if err := r.snaps.dropData(pending.ID); err != nil {
			logger.Warn("dropping a replayed snapshot's data failed", "id", pending.ID, "error", err)
		}
	}
	r.snaps.store = r.store
	hw := r.log.StartOffset()
	if len(metas) > 0 && metas[0].End > hw {
		hw = metas[0].End
	}
	if end := r.log.EndOffset(); hw > end {
		hw = end
	}
	r.fsm = newFSM(r.store, r.snaps, r.log, hw)
	r.store.applied = r.fsm.appliedIndex
	if len(metas) > 0 {
		r.fsm.applied = metas[0].Index
		// A snapshot received but not yet replayed, or not to the end,
		// when the replica stopped: Raft will not restore it again (it
		// trusts the snapshot), so it is replayed here.
		if replaying {
			_, rc, err := r.snaps.Open(metas[0].ID)
			if err != nil {
				return fail(err)
			}
			if err := r.fsm.Restore(rc); err != nil {
				return fail(fmt.Errorf("replication: replay received snapshot %s: %w", metas[0].ID, err))
			}
			logger.Info("replayed a received snapshot", "id", metas[0].ID, "end", metas[0].End)
			hw = r.log.EndOffset()
		}
	}
	r.fsm.onMarker = r.onMarker
	r.prod = newProducers()
	r.prod.setBounds(cfg.ProducerIDExpiration, cfg.MaxProducerIDs)
	r.fsm.onBatch = r.prod.observe
	// The producer state of what is committed and before the entries Raft
	// will apply again (the snapshot's end): rebuilt from batch headers.
	if from := max(r.log.StartOffset(), r.store.firstOffset()); from < hw {
		if err := r.log.WalkBatches(from, func(h log.Batch) bool {
			if h.BaseOffset() >= hw {
				return false
			}
			r.prod.observe(h)
			return true
		}); err != nil {
			return fail(fmt.Errorf("replication: rebuild producer state: %w", err))
		}
	}
	r.fsm.onError = func(err error) { r.logger.Error("apply failed", "error", err) }

	// The vote guard's decision.
	term, _ := r.stable.GetUint64([]byte(keyCurrentTerm))
	last, _ := r.store.LastIndex()
	hasState := term > 0 || last > 0
	prevBoot, _ := r.stable.Get([]byte(keyBootID))
	rec := r.log.Recovery()
	// A replica still gated when it stopped (whatever the stop) stays
	// gated: its loss is not repaired until a rejoin marker says so.
	stillGated, _ := r.stable.GetUint64([]byte(keyGated))
	gate := !cfg.DisableVoteGuard && hasState && (stillGated == 1 || (!rec.Clean && string(prevBoot) != cfg.BootID) || cfg.Gate != "")
	if gate && stillGated != 1 {
		if err := r.stable.SetUint64([]byte(keyGated), 1); err != nil {
			return fail(err)
		}
	}
	if err := r.stable.Set([]byte(keyBootID), []byte(cfg.BootID)); err != nil {
		return fail(err)
	}

	layer, err := cfg.Mux.Layer(cfg.Group)
	if err != nil {
		return fail(err)
	}
	appendLayer, err := cfg.Mux.DirectLayer(cfg.Group + appendStreamSuffix)
	if err != nil {
		layer.Close()
		return fail(err)
	}
	const netTimeout, maxPool = 10 * time.Second, 3
	trans := newAppendTransport(raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: layer, MaxPool: maxPool, Timeout: netTimeout, Logger: logger.Named("raft-net"),
	}), appendLayer, netTimeout, maxPool, 2, logger.Named("raft-append"))
	r.guard = newGuardTransport(trans, r.serverID, func() uint64 {
		t, _ := r.stable.GetUint64([]byte(keyCurrentTerm))
		return t
	}, logger.Named("guard"))
	var nb [8]byte
	rand.Read(nb[:])
	r.nonce = uint64(nb[0])<<56 | uint64(nb[1])<<48 | uint64(nb[2])<<40 | uint64(nb[3])<<32 | uint64(nb[4])<<24 | uint64(nb[5])<<16 | uint64(nb[6])<<8 | uint64(nb[7])
	if gate {
		why := fmt.Sprintf("unclean shutdown on a new boot (log recovery: truncated=%v at %d); unsynced entries may be lost", rec.Truncated, rec.TruncatedAt)
		if cfg.Gate != "" {
			why = cfg.Gate
		}
		r.setGated(true, why)
	}

	rc := cfg.Raft.withDefaults()
	conf := raft.DefaultConfig()
	conf.LocalID = r.serverID
	conf.Logger = logger.Named("raft")
	conf.HeartbeatTimeout = rc.HeartbeatTimeout
	conf.ElectionTimeout = rc.ElectionTimeout
	conf.LeaderLeaseTimeout = rc.LeaderLeaseTimeout
	conf.CommitTimeout = rc.CommitTimeout
	conf.SnapshotInterval = rc.SnapshotInterval
	conf.SnapshotThreshold = rc.SnapshotThreshold
	conf.TrailingLogs = rc.TrailingLogs
	conf.MaxAppendEntries = rc.MaxAppendEntries
	conf.BatchApplyCh = true
	conf.NoSnapshotRestoreOnStart = true
	conf.ShutdownOnRemove = false
	r.store.leader = func() bool {
		rf := r.raftp.Load()
		return rf != nil && rf.State() == raft.Leader
	}
	if r.raft, err = raft.NewRaft(conf, r.fsm, r.store, r.stable, r.snaps, r.guard); err != nil {
		r.guard.Close()
		return fail(err)
	}
	r.raftp.Store(r.raft)
	if r.ctl, err = newCtlServer(r); err != nil {
		r.raft.Shutdown().Error()
		return fail(err)
	}
	if gate {
		r.wg.Add(1)
		go r.rejoinLoop()
	}
	r.wg.Add(1)
	go r.watchLeadership()
	logger.Info("replica open", "log_start", r.log.StartOffset(), "log_end", r.log.EndOffset(), "high_watermark", hw,
		"clean", rec.Clean, "gated", gate, "term", term)
	return r, nil
}

// ServerID is the Raft server id of this replica.
func (r *Replica) ServerID() raft.ServerID { return r.serverID }

// Address is the Raft address of this replica's node.
func (r *Replica) Address() raft.ServerAddress { return r.cfg.Mux.Addr() }

// Log is the partition log (for reads; writes go through Append).
func (r *Replica) Log() *log.Log { return r.log }

// Raft exposes the Raft group (state, stats, configuration).
func (r *Replica) Raft() *raft.Raft { return r.raft }

// Bootstrap starts a new group with servers (once, on one replica).
func (r *Replica) Bootstrap(servers []raft.Server) error {
	return r.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
}

// IsLeader reports whether this replica leads its group.
func (r *Replica) IsLeader() bool { return r.raft.State() == raft.Leader }

// Leader returns the known leader.
func (r *Replica) Leader() (raft.ServerID, raft.ServerAddress) {
	addr, id := r.raft.LeaderWithID()
	return id, addr
}

// Term is the current Raft term (the partition leader epoch).
func (r *Replica) Term() uint64 {
	t, _ := r.stable.GetUint64([]byte(keyCurrentTerm))
	return t
}

// HighWatermark is the offset below which every batch is committed.
func (r *Replica) HighWatermark() int64 { return r.fsm.HighWatermark() }

// CommitLag is how many offsets of the local log are not yet known to be
// committed: the log end minus the end of the entry at Raft's commit
// index. Unlike the log end minus the high watermark it is 0 on an idle
// partition whose last entries are Raft's own (an election's no-op and
// barrier), which are committed but never applied, so never move the
// high watermark.
func (r *Replica) CommitLag() int64 {
	end := r.log.EndOffset()
	rf := r.raftp.Load()
	if rf == nil {
		return end - r.HighWatermark()
	}
	committed := r.HighWatermark()
	if pos, ok := r.store.entryAt(rf.CommitIndex()); ok && pos.next > committed {
		committed = pos.next
	}
	return max(0, end-committed)
}

// WaitHighWatermark blocks until the high watermark passes past or ctx
// ends, and returns it.
func (r *Replica) WaitHighWatermark(ctx context.Context, past int64) int64 {
	for {
		ch, hw := r.fsm.waitChan()
		if hw > past {
			return hw
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return r.fsm.HighWatermark()
		case <-r.closed:
			return r.fsm.HighWatermark()
		}
	}
}

// Read returns committed batches from offset (see log.Read), bounded by
// the high watermark.
func (r *Replica) Read(offset int64, maxBytes int) ([]byte, error) {
	return r.log.Read(offset, maxBytes, r.fsm.HighWatermark())
}

func (r *Replica) notLeader() error {
	id, addr := r.Leader()
	return &NotLeaderError{LeaderID: id, LeaderAddr: addr}
}

// Append replicates one record batch and returns its base offset. The
// batch must be one whole v2 batch that log.SplitBatches (or
// ValidateBatch) accepted: the replica checks only its size against the
// log's limit and refuses control batches, which are Raft's and the
// replica's own. With acks=-1 and acks=1 it returns after the batch is
// committed on a quorum (raftlog does not acknowledge a write a single
// node holds: acks=1 is served as acks=all); with acks=0 it returns once the
// batch is handed to Raft, with offset -1. batch is rewritten in place
// (baseOffset, partitionLeaderEpoch) and must not be reused. When ctx ends
// before the commit, Append returns its error; the batch may still be
// committed (Kafka's REQUEST_TIMED_OUT), and a retry of an idempotent
// producer's batch is then answered with its offset.
func (r *Replica) Append(ctx context.Context, batch []byte, acks int) (int64, error) {
	p, err := r.StartAppend(ctx, batch, acks)
	if err != nil {
		return -1, err
	}
	if ctx.Done() == nil {
		return p.Wait()
	}
	type result struct {
		off int64
		err error
	}
	// Raft's future has no channel to select on: a goroutine waits for it.
	done := make(chan result, 1)
	go func() {
		off, err := p.Wait()
		done <- result{off, err}
	}()
	select {
	case res := <-done:
		return res.off, res.err
	case <-ctx.Done():
		select {
		case res := <-done: // both at once: the outcome wins
			return res.off, res.err
		default:
		}
		return -1, fmt.Errorf("replication: waiting for the commit: %w", ctx.Err())
	}
}

// PendingAppend is a batch StartAppend handed to Raft; Wait returns its
// outcome.
type PendingAppend struct {
	ctx context.Context
	r   *Replica
	// One of: dup, a retry of a batch already written or in flight;
	// f, the batch's own Raft entry; neither, acks=0 (offset -1).
	dup *seqRange
	f   raft.ApplyFuture
	reg *seqRange // the producer-state entry f settles, nil if none
	pid int64
}

// StartAppend is the first half of Append: it checks the batch's size
// and kind (not its contents: see Append) and the producer's sequence,
// and hands the batch to Raft, in the order of the
// calls, and returns without waiting for the commit. Wait, called from
// any goroutine, is the second half. A caller can so keep several
// appends of one producer in flight (Produce requests pipelined on a
// connection) and still have them written in the order it started them.
func (r *Replica) StartAppend(ctx context.Context, batch []byte, acks int) (*PendingAppend, error) {
	if max := r.log.Config().MaxBatchBytes; max > 0 && len(batch) > max {
		return nil, fmt.Errorf("replication: %w: %d bytes, limit %d", log.ErrBatchTooLarge, len(batch), max)
	}
	if len(batch) < log.BatchHeaderSize || log.Batch(batch).Size() != len(batch) {
		return nil, fmt.Errorf("replication: %w: %d bytes are not one whole batch", log.ErrCorruptBatch, len(batch))
	}
	if log.Batch(batch).IsControl() {
		return nil, fmt.Errorf("replication: %w: producers may not write control batches", log.ErrCorruptBatch)
	}
	if r.raft.State() != raft.Leader {
		return nil, r.notLeader()
	}
	timeout := applyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	b := log.Batch(batch)
	r.appendMu.Lock()
	dup, reg, err := r.prod.check(b)
	if err != nil {
		r.appendMu.Unlock()
		return nil, err
	}
	if dup != nil {
		r.appendMu.Unlock()
		return &PendingAppend{ctx: ctx, r: r, dup: dup}, nil
	}
	f := r.raft.Apply(batch, timeout)
	r.appendMu.Unlock()
	pid := b.ProducerID()
	if acks == AcksNone {
		if reg != nil {
			go func() {
				if err := f.Error(); err != nil {
					r.prod.fail(reg, pid, err)
				}
			}()
		}
		return &PendingAppend{ctx: ctx, r: r}, nil
	}
	return &PendingAppend{ctx: ctx, r: r, f: f, reg: reg, pid: pid}, nil
}

// Wait blocks until the batch is committed on a quorum (acks 1 and -1)
// and returns its base offset; -1 at once for acks=0. For the batch's own
// entry it waits however long the outcome takes (Raft's future cannot be
// abandoned without a goroutine per wait, a hand-off on every produce): a
// caller with a deadline answers on its own when it passes, as the rpc
// server does for Produce, and still calls Wait, whose failure settles
// the producer state of the batch.
func (p *PendingAppend) Wait() (int64, error) {
	r := p.r
	if p.dup != nil {
		// A retry of a batch already written (or in flight): its offset.
		if p.dup.done != nil {
			select {
			case <-p.dup.done:
			case <-p.ctx.Done():
				return -1, p.ctx.Err()
			}
		}
		if p.dup.err != nil {
			return -1, r.notLeader()
		}
		return p.dup.offset, nil
	}
	if p.f == nil {
		return -1, nil
	}
	if err := p.f.Error(); err != nil {
		if p.reg != nil {
			r.prod.fail(p.reg, p.pid, err)
		}
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return -1, r.notLeader()
		}
		return -1, err
	}
	switch res := p.f.Response().(type) {
	case AppliedEntry:
		return res.BaseOffset, nil
	case error:
		return -1, res
	default:
		return -1, fmt.Errorf("replication: unexpected apply result %T", res)
	}
}

// AddVoter adds (or promotes) a voting replica.
func (r *Replica) AddVoter(id raft.ServerID, addr raft.ServerAddress) error {
	return r.raft.AddVoter(id, addr, 0, applyTimeout).Error()
}

// AddNonvoter adds a replica that receives the log but does not vote (a
// new replica catching up before it becomes a voter).
func (r *Replica) AddNonvoter(id raft.ServerID, addr raft.ServerAddress) error {
	return r.raft.AddNonvoter(id, addr, 0, applyTimeout).Error()
}

// RemoveServer removes a replica from the group.
func (r *Replica) RemoveServer(id raft.ServerID) error {
	return r.raft.RemoveServer(id, 0, applyTimeout).Error()
}

// TransferLeadership hands leadership to id (any caught-up voter when id
// is empty).
func (r *Replica) TransferLeadership(id raft.ServerID, addr raft.ServerAddress) error {
	if id == "" {
		return r.raft.LeadershipTransfer().Error()
	}
	return r.raft.LeadershipTransferToServer(id, addr).Error()
}

// Configuration is the group's latest configuration.
func (r *Replica) Configuration() (raft.Configuration, error) {
	f := r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return raft.Configuration{}, err
	}
	return f.Configuration(), nil
}

// Snapshot takes a snapshot now (normally Raft takes them on its own).
func (r *Replica) Snapshot() error { return r.raft.Snapshot().Error() }

// Close shuts the replica down cleanly: Raft stops, the log is fsynced and
// marked clean.
func (r *Replica) Close() error {
	var err error
	r.closeOnce.Do(func() {
		close(r.closed)
		r.ctl.close()
		err = r.raft.Shutdown().Error()
		r.wg.Wait()
		if e := r.log.Close(); err == nil {
			err = e
		}
	})
	return err
}

// WriteError is the write error that stopped the replica's log (a full
// disk, an I/O error), nil while it writes. The replica then stores
// nothing more until it is closed and opened again (cluster reopens it).
func (r *Replica) WriteError() error { return r.log.Err() }

// Kill stops the replica as a crash would: no fsync, no clean marker.
// Tests use it before dropping unsynced bytes to simulate power loss.
func (r *Replica) Kill() {
	r.closeOnce.Do(func() {
		close(r.closed)
		r.ctl.close()
		r.raft.Shutdown().Error()
		r.wg.Wait()
		r.log.Abort()
	})
}

// ApplyRetention deletes what retention.ms and retention.bytes allow of
// the log's sealed segments (never an entry Raft still holds: the log is
// pinned at Raft's first entry) and returns how many segments went.
func (r *Replica) ApplyRetention() (int, error) { return r.log.ApplyRetention() }

// DeleteRecords moves the log start of every replica up to offset (-1:
// the high watermark), through Raft so it survives a leader change, and
// returns the new log start. Kafka's DeleteRecords.
func (r *Replica) DeleteRecords(ctx context.Context, offset int64) (int64, error) {
	if r.raft.State() != raft.Leader {
		return -1, r.notLeader()
	}
	hw := r.fsm.HighWatermark()
	if offset < 0 {
		offset = hw
	}
	if offset > hw {
		return -1, fmt.Errorf("%w: %d past the high watermark %d", log.ErrOffsetOutOfRange, offset, hw)
	}
	if offset <= r.log.StartOffset() {
		return r.log.StartOffset(), nil
	}
	data := binary.BigEndian.AppendUint64(nil, uint64(offset))
	b := encodeControl(&raft.Log{Type: entryDeleteRecords, Data: data, AppendedAt: time.Now()})
	timeout := applyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if err := r.raft.Apply(b, timeout).Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return -1, r.notLeader()
		}
		return -1, err
	}
	return r.log.StartOffset(), nil
}

// EndOffsetForEpoch answers OffsetForLeaderEpoch: the end offset of the
// largest leader epoch at most epoch, and that epoch; (-1, -1) when the
// log has nothing of such an epoch. Epochs are Raft terms, so they never
// fall along the log: a binary search over the offsets below the high
// watermark finds the first batch of a later epoch, each step reading one
// batch header through the offset index (a few dozen reads however long
// the log).
func (r *Replica) EndOffsetForEpoch(epoch int32) (int64, int32, error) {
	start, hw := r.log.StartOffset(), r.fsm.HighWatermark()
	if start >= hw {
		return -1, -1, nil
	}
	first, err := r.batchAt(start)
	if err != nil {
		return -1, -1, err
	}
	if first.epoch > epoch {
		return -1, -1, nil
	}
	var best int32
	end := hw
	if last, err := r.batchAt(hw - 1); err != nil {
		return -1, -1, err
	} else if last.epoch <= epoch {
		best, end = last.epoch, last.next
	} else {
		// lo is the last offset of a batch of epoch loEpoch, at most
		// epoch; hi is the first offset of a batch of a later one; the
		// first such batch is found when they meet.
		lo, loEpoch, hi := first.next-1, first.epoch, last.base
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			b, err := r.batchAt(mid)
			if err != nil {
				return -1, -1, err
			}
			if b.base > mid || b.next <= mid {
				// Offsets are contiguous; a gap would stall the search.
				return -1, -1, fmt.Errorf("replication: the batch read for offset %d holds [%d, %d)", mid, b.base, b.next)
			}
			if b.epoch > epoch {
				hi = b.base
			} else {
				lo, loEpoch = b.next-1, b.epoch
			}
		}
		best, end = loEpoch, hi
	}
	if best == int32(r.Term()) || end > hw {
		end = hw
	}
	return end, best, nil
}

// batchSpan is where a batch lies and its leader epoch.
type batchSpan struct {
	base, next int64
	epoch      int32
}

// batchAt reads the header of the batch holding offset.
func (r *Replica) batchAt(offset int64) (batchSpan, error) {
	var b batchSpan
	found := false
	err := r.log.WalkBatches(offset, func(h log.Batch) bool {
		b, found = batchSpan{h.BaseOffset(), h.NextOffset(), h.LeaderEpoch()}, true
		return false
	})
	if err == nil && !found {
		err = fmt.Errorf("replication: no batch holds offset %d", offset)
	}
	return b, err
}

// ReadRecords is Read for Kafka consumers: each run of control batches of
// Raft and raftlog (configuration, markers) is handed out as one empty
// batch (no records, same offsets), since some clients (segmentio/kafka-go) give
// control records to the application. Clients step over empty batches as
// they do after compaction, so a consumer moves past the offsets they
// hold even at the end of the log.
func (r *Replica) ReadRecords(offset int64, maxBytes int) ([]byte, error) {
	p, err := r.Read(offset, maxBytes)
	if err != nil || len(p) == 0 {
		return p, err
	}
	return emptyControlBatches(p), nil
}

// emptyControlBatches rewrites p in place: each run of consecutive control
// batches becomes one empty batch spanning their offsets. One, not one
// each: segmentio/kafka-go's reader reads at most two batch headers in a
// row before it reads a record, so three empty batches at the start of a
// response, or two between records (the two entries of a Raft election),
// made it read a record out of the next header and panic
// ("markRead: negative count").
func emptyControlBatches(p []byte) []byte {
	out := p[:0]
	empty := -1 // where in out the empty batch of the current run starts
	log.Batches(p, func(b log.Batch) bool {
		if !b.IsControl() {
			out = append(out, b...) // moves left within p: out never passes the batch being read
			empty = -1
			return true
		}
		if empty >= 0 {
			log.ExtendEmptyBatch(log.Batch(out[empty:]), b.LastOffset(), b.MaxTimestamp())
			return true
		}
		empty = len(out)
		out = append(out, b[:log.BatchHeaderSize]...)
		log.EmptyBatch(log.Batch(out[empty:]))
		return true
	})
	return out
}

// watchLeadership keeps ready: a barrier after each election won.
func (r *Replica) watchLeadership() {
	defer r.wg.Done()
	ch := r.raft.LeaderCh()
	for {
		select {
		case <-r.closed:
			return
		case isLeader := <-ch:
			r.ready.Store(false)
			if !isLeader {
				r.logger.Info("leadership lost", "term", r.Term())
				r.prod.dropPending(r.notLeader())
				continue
			}
			r.logger.Info("leadership won", "term", r.Term())
			go func() {
				if err := r.raft.Barrier(applyTimeout).Error(); err == nil && r.raft.State() == raft.Leader {
					r.ready.Store(true)
					r.logger.Info("leader ready: every earlier entry applied", "term", r.Term())
				}
			}()
		}
	}
}

// ProducerIDs is the number of idempotent producers whose state the
// partition holds, and how many it has forgotten (expired or capped).
func (r *Replica) ProducerIDs() (held, forgotten int) { return r.prod.count() }

// LeaderReady reports whether this replica leads and has applied every
// entry of earlier terms: only then may it serve reads and offsets (its
// high watermark would otherwise lag what the previous leader served).
func (r *Replica) LeaderReady() bool { return r.ready.Load() && r.raft.State() == raft.Leader }
