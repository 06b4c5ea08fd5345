package replication

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/log/vfs"
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
//
// The steps, in order: the identity (the stable store and the Raft
// server id), the partition log, the state Raft restarts from (snapshots,
// the log store, the FSM, the producers), the vote guard's decision, the
// transport, and Raft itself.
func Open(cfg Config) (*Replica, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Replica{cfg: cfg, logger: withBudget(cfg.Logger.With("group", cfg.Group), cfg.Mux.logs), closed: make(chan struct{})}
	if err := r.openIdentity(); err != nil {
		return nil, err
	}
	if err := r.openLog(); err != nil {
		return nil, err
	}
	fail := func(err error) (*Replica, error) {
		if r.quiesce != nil {
			r.quiesce.close(false)
		}
		r.log.Abort()
		return nil, err
	}
	hw, err := r.openState()
	if err != nil {
		return fail(err)
	}
	gate, why, term, err := r.decideGate()
	if err != nil {
		return fail(err)
	}
	if err := r.openTransport(); err != nil {
		return fail(err)
	}
	if gate {
		r.setGated(true, why)
	}
	if err := r.startRaft(); err != nil {
		return fail(err)
	}
	if gate {
		r.wg.Add(1)
		go r.rejoinLoop()
	}
	r.wg.Add(1)
	go r.watch()
	rec := r.log.Recovery()
	r.logger.Info("replica open", "log_start", r.log.StartOffset(), "log_end", r.log.EndOffset(), "high_watermark", hw,
		"clean", rec.Clean, "gated", gate, "term", term)
	return r, nil
}

// withDefaults checks cfg and fills in what was left unset.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Group == "" || cfg.NodeID == "" || cfg.Dir == "" || cfg.Mux == nil {
		return cfg, errors.New("replication: Config needs Group, NodeID, Dir and Mux")
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
	return cfg, nil
}

// openIdentity creates the replica's folder, opens its stable store and
// reads the Raft server id from it, taking a new one (cfg.ServerID, or
// the node id and a random suffix) on a new replica.
func (r *Replica) openIdentity() error {
	cfg, fsys := r.cfg, r.cfg.FS
	if err := vfs.MkdirAllSync(fsys, cfg.Dir); err != nil {
		return err
	}
	id := cfg.ServerID
	if id == "" {
		var b [4]byte
		rand.Read(b[:])
		id = raft.ServerID(cfg.NodeID + "-" + hex.EncodeToString(b[:]))
	}
	// A new store is created holding the new id: one write and sync.
	var err error
	if r.stable, err = openStableStore(fsys, cfg.Dir, map[string][]byte{keyServerID: []byte(id)}); err != nil {
		return err
	}
	if old, err := r.stable.Get([]byte(keyServerID)); err == nil {
		r.serverID = raft.ServerID(old)
	} else {
		r.serverID = id
		if err := r.stable.Set([]byte(keyServerID), []byte(r.serverID)); err != nil {
			return err
		}
	}
	r.logger = r.logger.With("server", string(r.serverID))
	return nil
}

// openLog opens the partition log (recovering it after an unclean stop).
func (r *Replica) openLog() error {
	opts := []log.Option{log.WithFS(r.cfg.FS), log.WithConfig(r.cfg.Log), log.WithLogger(r.logger.Named("log"))}
	if r.cfg.IndexDir != "" {
		opts = append(opts, log.WithIndexDir(r.cfg.IndexDir))
	}
	var err error
	r.log, err = log.Open(filepath.Join(r.cfg.Dir, "log"), opts...)
	return err
}

// openState opens what Raft restarts from: the snapshot store, the log
// store over the partition log, the FSM and the producer state. A
// snapshot received but not replayed to the end when the replica stopped
// is replayed here (Raft trusts a snapshot it has and will not restore it
// again). It returns the high watermark the replica starts with.
func (r *Replica) openState() (int64, error) {
	var err error
	if r.snaps, err = openSnapshotStore(r.cfg.FS, r.cfg.Dir, r.log); err != nil {
		return 0, err
	}
	metas, _ := r.snaps.list()
	var pending *snapMeta
	if len(metas) > 0 && metas[0].HasData {
		pending = &metas[0]
	}
	var replaying bool
	if r.store, replaying, err = openLogStore(r.log, r.cfg.FS, r.cfg.Dir, pending, r.cfg.DenseOffsets); err != nil {
		return 0, err
	}
	if pending != nil && !replaying {
		if err := r.snaps.dropData(pending.ID); err != nil {
			r.logger.Warn("dropping a replayed snapshot's data failed", "id", pending.ID, "error", err)
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
		if replaying {
			_, rc, err := r.snaps.Open(metas[0].ID)
			if err != nil {
				return 0, err
			}
			if err := r.fsm.Restore(rc); err != nil {
				return 0, fmt.Errorf("replication: replay received snapshot %s: %w", metas[0].ID, err)
			}
			r.logger.Info("replayed a received snapshot", "id", metas[0].ID, "end", metas[0].End)
			hw = r.log.EndOffset()
		}
	}
	r.fsm.onMarker = r.onMarker
	r.fsm.onError = func(err error) { r.logger.Error("apply failed", "error", err) }
	if err := r.openProducers(hw); err != nil {
		return 0, err
	}
	return hw, nil
}

// openProducers rebuilds the idempotent producers' state from the batch
// headers of what is committed and before the entries Raft will apply
// again (hw, the snapshot's end); the FSM keeps it up to date from there.
func (r *Replica) openProducers(hw int64) error {
	r.prod = newProducers()
	r.prod.setBounds(r.cfg.ProducerIDExpiration, r.cfg.MaxProducerIDs)
	r.fsm.onBatch = r.prod.observe
	from := max(r.log.StartOffset(), r.store.firstOffset())
	if from >= hw {
		return nil
	}
	err := r.log.WalkBatches(from, func(h log.Batch) bool {
		if h.BaseOffset() >= hw {
			return false
		}
		r.prod.observe(h)
		return true
	})
	if err != nil {
		return fmt.Errorf("replication: rebuild producer state: %w", err)
	}
	return nil
}

// decideGate is the vote guard's decision: a replica with state opens
// gated when it was still gated when it stopped (whatever the stop), when
// it stopped uncleanly on an earlier boot (unsynced entries may be lost),
// or when cfg.Gate says so. It records the decision and this boot's id
// before Raft starts, and returns the reason and the stored term.
func (r *Replica) decideGate() (gate bool, why string, term uint64, err error) {
	term, _ = r.stable.GetUint64([]byte(keyCurrentTerm))
	last, _ := r.store.LastIndex()
	hasState := term > 0 || last > 0
	prevBoot, _ := r.stable.Get([]byte(keyBootID))
	rec := r.log.Recovery()
	stillGated, _ := r.stable.GetUint64([]byte(keyGated))
	cfg := r.cfg
	gate = hasState && (stillGated == 1 || (!rec.Clean && string(prevBoot) != cfg.BootID) || cfg.Gate != "")
	if gate && stillGated != 1 {
		if err := r.stable.SetUint64([]byte(keyGated), 1); err != nil {
			return false, "", 0, err
		}
	}
	if err := r.stable.Set([]byte(keyBootID), []byte(cfg.BootID)); err != nil {
		return false, "", 0, err
	}
	why = fmt.Sprintf("unclean shutdown on a new boot (log recovery: truncated=%v at %d); unsynced entries may be lost", rec.Truncated, rec.TruncatedAt)
	if cfg.Gate != "" {
		why = cfg.Gate
	}
	return gate, why, term, nil
}

// openTransport opens the group's Raft streams on the node's mux (one
// for Raft's own RPCs, one for appends) under the vote guard, and draws
// the nonce of this incarnation.
func (r *Replica) openTransport() error {
	layer, err := r.cfg.Mux.Layer(r.cfg.Group)
	if err != nil {
		return err
	}
	appendLayer, err := r.cfg.Mux.layer(r.cfg.Group+appendStreamSuffix, true, false)
	if err != nil {
		layer.Close()
		return err
	}
	// The NetworkTransport keeps no connections: it carries snapshots,
	// which are rare, and the votes and TimeoutNow of peers that predate
	// the vote streams (votes.go); each of its connections holds 512 KiB
	// of buffers on either side.
	const netTimeout, maxPool = 10 * time.Second, 3
	trans := newAppendTransport(raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: layer, MaxPool: 0, Timeout: netTimeout, Logger: r.logger.Named("raft-net"),
	}), appendLayer, netTimeout, maxPool, 2, r.logger.Named("raft-append"))
	if v := r.cfg.Mux.votes; v != nil {
		trans.serveVotes(v, r.cfg.Group)
	}
	if q := r.cfg.Quiescer; q != nil {
		rc := r.cfg.Raft.withDefaults()
		g, err := q.register(r.cfg.Group, r.serverID, raft.ReloadableConfig{
			TrailingLogs: rc.TrailingLogs, SnapshotInterval: rc.SnapshotInterval, SnapshotThreshold: rc.SnapshotThreshold,
			HeartbeatTimeout: rc.HeartbeatTimeout, ElectionTimeout: rc.ElectionTimeout,
		}, rc.LeaderLeaseTimeout, r.logger.Named("quiesce"))
		if err != nil {
			trans.Close()
			return err
		}
		g.takeover, g.votedFor = trans.campaign, r.votedFor
		g.pass = r.passTurn
		r.quiesce, trans.quiesce = g, g
	}
	var hold func([]byte) bool
	if r.quiesce != nil {
		hold = r.quiesce.holdsElection
	}
	r.guard = newGuardTransport(trans, r.serverID, func() uint64 {
		t, _ := r.stable.GetUint64([]byte(keyCurrentTerm))
		return t
	}, hold, r.logger.Named("guard"))
	if r.quiesce != nil {
		r.guard.campaign, r.guard.heard = r.quiesce.q.noteCampaign, r.quiesce.q.heard
	}
	r.guard.start()
	var nb [8]byte
	rand.Read(nb[:])
	r.nonce = binary.BigEndian.Uint64(nb[:])
	return nil
}

// startRaft starts the Raft group over the stores and the transport, and
// the control server beside it.
func (r *Replica) startRaft() error {
	rc := r.cfg.Raft.withDefaults()
	conf := raft.DefaultConfig()
	conf.LocalID = r.serverID
	conf.Logger = newRaftLogger(r.logger.Named("raft"), func() bool {
		last, err := r.store.LastIndex()
		return err == nil && last <= 1
	})
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
	var err error
	if r.raft, err = raft.NewRaft(conf, r.fsm, r.store, r.stable, r.snaps, r.guard); err != nil {
		r.guard.Close()
		return err
	}
	r.raftp.Store(r.raft)
	if r.quiesce != nil {
		r.quiesce.raft.Store(r.raft)
	}
	if r.ctl, err = newCtlServer(r); err != nil {
		r.raft.Shutdown().Error()
		return err
	}
	return nil
}
