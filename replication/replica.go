// Package replication replicates a partition with hashicorp/raft: one Raft
// group per partition, whose Raft log is the partition log itself (each
// entry one Kafka RecordBatch, written once per replica), over one
// node-wide transport (Mux), with a vote guard that keeps the group safe
// although appends are never fsynced.
package replication

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log"
)

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
	quiesce  *groupQuiesce // nil unless the node quiesces idle groups

	nonce     uint64
	recovered atomic.Bool
	prod      *producers
	appendMu  sync.Mutex // checks and enqueues in one order
	// readyTerm is the last term in which this replica, leading, applied
	// everything before the term (a barrier), so that its high watermark
	// covers every entry earlier leaders may have served. A term, not a
	// flag: Raft's leadership notifications coalesce, so a leadership lost
	// and won again may be told as one "won", and the barrier of an
	// earlier term must not make a later one ready.
	readyTerm atomic.Uint64
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

// ServerID is the Raft server id of this replica.
func (r *Replica) ServerID() raft.ServerID { return r.serverID }

// Address is the Raft address of this replica's node.
func (r *Replica) Address() raft.ServerAddress { return r.cfg.Mux.Addr() }

// votedFor is the candidate (its address) the replica voted for in its
// current term, "" if none: hashicorp/raft's own record in the stable
// store.
func (r *Replica) votedFor() raft.ServerAddress {
	rf := r.raftp.Load()
	if rf == nil {
		return ""
	}
	term := rf.CurrentTerm()
	if vt, err := r.stable.GetUint64([]byte("LastVoteTerm")); err != nil || vt != term {
		return ""
	}
	cand, err := r.stable.Get([]byte("LastVoteCand"))
	if err != nil {
		return ""
	}
	return raft.ServerAddress(cand)
}

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
	if rf := r.raftp.Load(); rf != nil {
		return rf.CurrentTerm() // what Raft stored, without reading the store
	}
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
		r.leaveQuiescence()
		err = r.raft.Shutdown().Error()
		r.wg.Wait()
		if e := r.log.Close(); err == nil {
			err = e
		}
	})
	return err
}

// WriteError is the write error that stopped the replica's log or the
// files kept beside it (a full disk, an I/O error), nil while it writes.
// The replica then stores nothing more until it is closed and opened
// again (cluster reopens it).
func (r *Replica) WriteError() error {
	if err := r.log.Err(); err != nil {
		return err
	}
	return r.store.writeErr()
}

// Kill stops the replica as a crash would: no fsync, no clean marker.
// Tests use it before dropping unsynced bytes to simulate power loss.
func (r *Replica) Kill() {
	r.closeOnce.Do(func() {
		close(r.closed)
		r.ctl.close()
		r.leaveQuiescence()
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
	if epoch < 0 {
		return -1, -1, nil // no epoch has no end, as in Kafka's epoch cache
	}
	start, hw := r.log.StartOffset(), r.fsm.HighWatermark()
	if start >= hw {
		// Nothing readable (a new partition, or every record deleted):
		// as Kafka's epoch cache answers then, the current epoch ends at
		// the log end and an earlier one ended where the log starts.
		if term := int32(r.Term()); epoch >= term {
			return hw, term, nil
		}
		return start, epoch, nil
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

// Campaign makes a follower start an election now rather than when its
// heartbeat timeout runs out, if it has heard from no leader for that
// long: a new group's preferred replica, just bootstrapped, leads at
// once instead of after a second or two (when every replica waits out
// its randomized timeout) and the group gets the leader placement asked
// for. Raft offers no call for it; lowering the heartbeat timeout
// (ReloadConfig) has the follower check its timer at once, so the
// timeout is raised by a hair and set back.
func (r *Replica) Campaign() error {
	cur := r.raft.ReloadableConfig()
	up := cur
	up.HeartbeatTimeout += time.Millisecond
	up.ElectionTimeout = max(up.ElectionTimeout, up.HeartbeatTimeout)
	if err := r.raft.ReloadConfig(up); err != nil {
		return err
	}
	return r.raft.ReloadConfig(cur)
}

// LastContact is when this replica last heard from its leader: Raft's
// own time, or, while it follows quiesced, when the leader's node last
// spoke on its link (a quiesced follower is sent nothing while that link
// lives; see Quiescer).
func (r *Replica) LastContact() time.Time {
	last := r.raft.LastContact()
	if r.quiesce != nil {
		if t := r.quiesce.leaderHeard(); t.After(last) {
			return t
		}
	}
	return last
}

// leaveQuiescence tells the peers that this replica is going: those it
// led wake, and its leader stops answering for it.
func (r *Replica) leaveQuiescence() {
	if r.quiesce != nil {
		r.quiesce.close(r.raft.State() == raft.Leader)
	}
}

// watch follows the replica's Raft: it tells quiescence each state the
// replica enters, and keeps ready, with a barrier after each election
// won. One goroutine for both: a node holds thousands of replicas.
func (r *Replica) watch() {
	defer r.wg.Done()
	var states chan raft.Observation // nil without quiescence: never ready
	var prev raft.RaftState
	if r.quiesce != nil {
		states = make(chan raft.Observation, 16)
		obs := raft.NewObserver(states, false, func(o *raft.Observation) bool {
			_, ok := o.Data.(raft.RaftState)
			return ok
		})
		r.raft.RegisterObserver(obs)
		defer r.raft.DeregisterObserver(obs)
		prev = r.raft.State()
	}
	leader := r.raft.LeaderCh()
	for {
		select {
		case <-r.closed:
			return
		case o := <-states:
			st := o.Data.(raft.RaftState)
			r.quiesce.stateChanged(prev, st)
			prev = st
		case isLeader := <-leader:
			if r.cfg.OnLeadership != nil {
				r.cfg.OnLeadership()
			}
			if !isLeader {
				r.logger.Info("leadership lost", "term", r.Term())
				r.prod.dropPending(r.notLeader())
				continue
			}
			term := r.raft.CurrentTerm()
			r.logger.Info("leadership won", "term", term)
			go func() {
				// The barrier is an entry of term or later: once applied,
				// every entry before term is.
				if err := r.raft.Barrier(applyTimeout).Error(); err == nil && r.raft.State() == raft.Leader && r.raft.CurrentTerm() == term {
					r.readyTerm.Store(term)
					r.logger.Info("leader ready: every earlier entry applied", "term", term)
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
func (r *Replica) LeaderReady() bool {
	return r.raft.State() == raft.Leader && r.readyTerm.Load() == r.raft.CurrentTerm()
}

// passTurn asks the group's voter id at addr to campaign at once, as a
// leadership transfer's TimeoutNow does (quiescence's takeover passes
// its turn on so).
func (r *Replica) passTurn(id raft.ServerID, addr raft.ServerAddress) error {
	req := raft.TimeoutNowRequest{RPCHeader: r.guard.header()}
	var resp raft.TimeoutNowResponse
	return r.guard.TimeoutNow(id, addr, &req, &resp)
}
