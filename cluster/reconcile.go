package cluster

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/log/vfs"
	"github.com/raftlog/raftlog/replication"
)

// reconcileLoop makes the local replicas match the metadata, on every
// metadata or membership change and once a second.
func (n *Node) reconcileLoop() {
	defer n.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	retention := time.NewTicker(30 * time.Second)
	defer retention.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-n.kick:
		case <-t.C:
		case <-retention.C:
			n.applyRetention()
			continue
		}
		n.reconcile()
	}
}

func (n *Node) reconcile() {
	n.reopenStopped(time.Now())
	n.ctl.bootstrap()
	if n.ctl.r.IsLeader() {
		n.ctl.lead()
	}
	if n.meta.ClusterID() == "" {
		return
	}
	brokers := map[int32]BrokerInfo{}
	for _, b := range n.Brokers() {
		brokers[b.NodeID] = b
	}
	n.openMissing()
	want := map[string]bool{}
	var fresh []newGroup
	for _, t := range n.meta.Topics() {
		for p, reps := range t.Partitions {
			g := groupName(t, int32(p))
			mine := false
			for _, r := range reps {
				mine = mine || r == n.cfg.NodeID
			}
			if !mine {
				continue
			}
			want[g] = true
			r := n.ensureReplica(g, t, int32(p))
			if r == nil {
				continue
			}
			// What follows concerns a partition's first replica while its
			// group is new, and leaders: a node's other replicas (most,
			// at thousands of partitions) cost nothing more here.
			term, leader, first := r.Term(), r.IsLeader(), reps[0] == n.cfg.NodeID
			if !leader && !(first && term <= 1) {
				continue
			}
			var wanted []BrokerInfo
			complete := true
			for _, id := range reps {
				b, ok := brokers[id]
				if !ok {
					complete = false
					continue
				}
				wanted = append(wanted, b)
			}
			// Only a new partition's group is bootstrapped: never one
			// being reassigned (its new replicas join the existing
			// group) nor one that leads somewhere.
			if first && term == 0 && unstarted(r) {
				_, moving := t.Reassigning[int32(p)]
				_, led := n.leaders.get(g)
				if complete && !moving && !led {
					fresh = append(fresh, newGroup{g, r, wanted})
				}
			} else if first && term <= 1 && r.Raft().State() == raft.Follower && r.LastContact().IsZero() {
				// Bootstrapped here, and its campaign found the other
				// replicas not open yet: again, now that they may be.
				r.Campaign()
			}
			if leader {
				if rs, moving := t.Reassigning[int32(p)]; moving {
					n.driveReassignment(r, t, int32(p), rs, brokers)
				} else {
					syncMembers(n.logger, r, wanted, true)
				}
			}
		}
	}
	n.bootstrapNew(fresh)
	n.forgetFailed(want)
	// Replicas no longer assigned here (deleted topics, replicas moved
	// away) go, with their directories.
	n.mu.Lock()
	var drop []string
	for g := range n.replicas {
		if !want[g] {
			drop = append(drop, g)
		}
	}
	n.mu.Unlock()
	for _, g := range drop {
		n.dropReplica(g)
	}
}

// unstarted reports whether r's group has no configuration yet: neither
// bootstrapped here nor joined from a leader.
func unstarted(r *replication.Replica) bool {
	cfg, err := r.Configuration()
	return err == nil && len(cfg.Servers) == 0
}

// newGroup is a new partition's group whose first replica is here, open
// and not bootstrapped yet.
type newGroup struct {
	g       string
	r       *replication.Replica
	members []BrokerInfo // every replica's node, the first this one
}

// bootstrapNew bootstraps the new groups of fresh whose replicas are
// open on a majority of their nodes (this one included), and campaigns
// for each: its peers grant the vote at once. A group bootstrapped
// before its peers opened their replicas campaigned into peers that did
// not host it, and again at every election timeout: at thousands of new
// partitions, thousands of candidates starved the nodes still creating
// them. The others wait for a later reconcile, without a timer running;
// awaitingPeers counts them.
func (n *Node) bootstrapNew(fresh []newGroup) {
	ask := map[int32][]string{} // a peer → the groups to ask it of
	addrs := map[int32]string{}
	for _, ng := range fresh {
		for _, b := range ng.members {
			if b.NodeID != n.cfg.NodeID {
				ask[b.NodeID] = append(ask[b.NodeID], ng.g)
				addrs[b.NodeID] = b.RaftAddr
			}
		}
	}
	hosts := n.askHosted(ask, addrs)
	waiting := 0
	for _, ng := range fresh {
		if !hostedByMajority(n.cfg.NodeID, ng.g, ng.members, hosts) {
			waiting++
			continue
		}
		var servers []raft.Server
		for _, b := range ng.members {
			servers = append(servers, raft.Server{ID: serverID(b.NodeID, b.Incarnation), Address: raft.ServerAddress(b.RaftAddr), Suffrage: raft.Voter})
		}
		if err := ng.r.Bootstrap(servers); err != nil {
			n.logger.Warn("bootstrap partition", "group", ng.g, "error", err)
		} else {
			ng.r.Campaign() // failing, the group elects at its timeout
		}
	}
	n.awaitingPeers.Store(int64(waiting))
	if waiting > 0 {
		n.logger.Debug("new partitions wait for their peers to open them", "partitions", waiting)
	}
}

// hostedByMajority reports whether the replicas of group on a majority of
// members are open: this node's (it asks) and those hosts says are.
func hostedByMajority(self int32, group string, members []BrokerInfo, hosts map[int32]map[string]bool) bool {
	open := 0
	for _, b := range members {
		if b.NodeID == self || hosts[b.NodeID][group] {
			open++
		}
	}
	return open > len(members)/2
}

// askHosted asks each peer of ask, at once, which of its groups it has
// open. A peer that does not answer hosts none; one that does not know
// the question (a node of an earlier version, during a rolling upgrade)
// is taken to host them all, as that version bootstrapped without asking.
func (n *Node) askHosted(ask map[int32][]string, addrs map[int32]string) map[int32]map[string]bool {
	hosts := map[int32]map[string]bool{}
	if len(ask) == 0 {
		return hosts
	}
	ctx, cancel := context.WithTimeout(n.ctx, hostedAskTimeout)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, groups := range ask {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := n.call(ctx, raft.ServerAddress(addrs[id]), rpcRequest{Op: "hosted", Groups: groups})
			open := map[string]bool{}
			switch {
			case err != nil:
				n.logger.Debug("ask a peer which new partitions it has open", "node", id, "error", err)
			case resp.Err == unknownOp+"hosted":
				for _, g := range groups {
					open[g] = true
				}
			case resp.Err != "":
				n.logger.Debug("ask a peer which new partitions it has open", "node", id, "error", resp.Err)
			default:
				for _, g := range resp.Hosted {
					open[g] = true
				}
			}
			mu.Lock()
			hosts[id] = open
			mu.Unlock()
		}()
	}
	wg.Wait()
	return hosts
}

// hostedAskTimeout bounds askHosted: a peer slower than this is asked
// again at the next reconcile.
const hostedAskTimeout = 5 * time.Second

// openParallelism bounds the replicas a node opens at once: opening one
// waits mostly on the disk (files created, preallocated and synced), so
// a topic of thousands of partitions opened one after another took
// minutes.
const openParallelism = 16

// openMissing opens, openParallelism at a time, the replicas assigned
// here that are not open, so that reconcile finds them open.
func (n *Node) openMissing() {
	type part struct {
		g string
		t Topic
		p int32
	}
	var missing []part
	topics := n.meta.Topics()
	n.mu.Lock()
	for _, t := range topics {
		for p, reps := range t.Partitions {
			if !slices.Contains(reps, n.cfg.NodeID) {
				continue
			}
			if g := groupName(t, int32(p)); n.replicas[g] == nil {
				missing = append(missing, part{g, t, int32(p)})
			}
		}
	}
	n.mu.Unlock()
	inParallel(len(missing), openParallelism, func(i int) {
		m := missing[i]
		n.ensureReplica(m.g, m.t, m.p)
	})
}

// A replica whose log a write error stopped (a full disk, an I/O error)
// stores nothing more: as a follower it refuses every append, as a leader
// it steps down. It is closed and opened again, which recovers its log
// (the unclean close leaves no clean marker, so the scan cuts whatever
// the failed write left) and lets it catch up from its leader. It opens
// gated by the vote guard whatever the boot: a failed fsync may have
// dropped pages the log had acknowledged, so it does not vote until its
// leader has committed its rejoin marker (durability.md). A replica that
// fails to open (the disk still full) is tried again later. Both wait
// failFirstBackoff, then twice as long each time up to failMaxBackoff; a
// replica that has worked for failResetAfter starts over.
type failedReplica struct {
	attempts int
	next     time.Time // earliest close of the stopped replica, or open
	opened   time.Time // its last successful open
	err      error     // the write error, or why the last open failed
}

const (
	failFirstBackoff = 2 * time.Second
	failMaxBackoff   = 2 * time.Minute
	failResetAfter   = 5 * time.Minute
)

func failBackoff(attempts int) time.Duration {
	return min(failFirstBackoff<<min(attempts, 10), failMaxBackoff)
}

// reopenStopped closes the replicas stopped by a write error whose
// backoff has passed (ensureReplica opens them again) and forgets the
// failures of replicas that have worked for failResetAfter.
func (n *Node) reopenStopped(now time.Time) {
	n.mu.Lock()
	if n.failed == nil {
		n.failed = map[string]*failedReplica{}
	}
	var closing []*replication.Replica
	for g, r := range n.replicas {
		f := n.failed[g]
		werr := r.WriteError()
		switch {
		case werr == nil:
			if f != nil && !f.opened.IsZero() && now.Sub(f.opened) >= failResetAfter {
				delete(n.failed, g)
			}
		case f == nil:
			n.failed[g] = &failedReplica{next: now.Add(failFirstBackoff), err: werr}
			n.logger.Error("replica stopped by a write error; it is reopened", "group", g, "error", werr, "after", failFirstBackoff)
		case !now.Before(f.next):
			f.err = werr
			n.removeReplicaLocked(g)
			closing = append(closing, r)
			n.logger.Warn("reopening replica after a write error", "group", g, "attempt", f.attempts+1, "error", werr)
		}
	}
	n.mu.Unlock()
	for _, r := range closing {
		r.Close() // fails with the log's error: it is why the replica closes
	}
}

// forgetFailed drops the failure records of groups this node no longer
// holds.
func (n *Node) forgetFailed(want map[string]bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	maps.DeleteFunc(n.failed, func(g string, _ *failedReplica) bool { return !want[g] })
}

// ensureReplica opens the local replica of a partition when it is not.
func (n *Node) ensureReplica(g string, t Topic, p int32) *replication.Replica {
	n.mu.Lock()
	r, ok := n.replicas[g]
	closed := n.closed
	n.mu.Unlock()
	if ok || closed {
		return r
	}
	now := time.Now()
	n.mu.Lock()
	f := n.failed[g]
	gate := ""
	if f != nil {
		if now.Before(f.next) {
			n.mu.Unlock()
			return nil // a backoff after a failure
		}
		gate = "reopened after a write error: " + f.err.Error()
	}
	n.mu.Unlock()
	fail := func(what string, err error) *replication.Replica {
		n.logger.Error(what, "group", g, "error", err)
		n.mu.Lock()
		if n.failed == nil {
			n.failed = map[string]*failedReplica{}
		}
		if f == nil {
			f = &failedReplica{}
			n.failed[g] = f
		}
		f.attempts++
		f.next, f.err = now.Add(failBackoff(f.attempts)), err
		n.mu.Unlock()
		return nil
	}
	dirName := partitionDir(t.Name, p)
	// The replica of an earlier topic of the same name (deleted and
	// created again while this node was away) may still be open in that
	// directory: claimDir would remove its files under its running Raft,
	// whose next write then panics. It is closed further down in the same
	// reconcile, as no longer wanted; this one opens at the next.
	n.mu.Lock()
	og, busy := n.dirs[dirName]
	n.mu.Unlock()
	if busy && og != g {
		return nil
	}
	if err := claimDir(filepath.Join(n.cfg.DataDir, dirName), g); err != nil {
		return fail("replica directory", err)
	}
	r, err := n.openReplica(g, dirName, topicLogConfig(t.Configs, n.cfg.LogConfig), t.DenseOffsets, gate)
	if err != nil {
		return fail("open replica", err)
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		r.Close()
		return nil
	}
	n.addReplicaLocked(g, r)
	if f != nil {
		f.attempts++
		f.opened, f.next = now, now.Add(failBackoff(f.attempts))
	}
	n.mu.Unlock()
	n.logger.Info("replica started", "group", g)
	return r
}

func (n *Node) dropReplica(g string) {
	n.mu.Lock()
	r := n.replicas[g]
	n.removeReplicaLocked(g)
	n.mu.Unlock()
	if r == nil {
		return
	}
	dir := filepath.Dir(r.Log().Dir())
	r.Close()
	if err := os.RemoveAll(dir); err != nil {
		n.logger.Error("remove replica data", "group", g, "error", err)
	}
	n.logger.Info("replica removed", "group", g)
}

// leaderLoop gossips the partitions this node leads: when a replica won
// or lost leadership, at most every leaderAnnounceMin, and every
// leaderAnnounceEvery besides. Walking every replica each 100 ms was a
// sixth of an idle node's CPU at 3,000 partitions.
func (n *Node) leaderLoop() {
	defer n.wg.Done()
	t := time.NewTicker(leaderAnnounceEvery)
	defer t.Stop()
	var groups []string
	var reps []*replication.Replica
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		case <-n.leadersKick:
		}
		if n.ctl.r.IsLeader() {
			n.announce(controllerGroup, int32(n.ctl.r.Term()))
		}
		n.mu.Lock()
		groups, reps = groups[:0], reps[:0]
		for g, r := range n.replicas {
			groups, reps = append(groups, g), append(reps, r)
		}
		n.mu.Unlock()
		for i, r := range reps {
			if r.IsLeader() {
				n.announce(groups[i], int32(r.Term()))
			}
		}
		// Elections come in bursts: the wins of this pause make one walk.
		select {
		case <-n.stop:
			return
		case <-time.After(leaderAnnounceMin):
		}
	}
}

const (
	leaderAnnounceMin   = 100 * time.Millisecond
	leaderAnnounceEvery = 2 * time.Second
)

func (n *Node) applyRetention() {
	n.mu.Lock()
	reps := make([]*replication.Replica, 0, len(n.replicas))
	for _, r := range n.replicas {
		reps = append(reps, r)
	}
	n.mu.Unlock()
	if n.ctl.r != nil {
		// No retention, but its segments below a snapshot's log start go.
		reps = append(reps, n.ctl.r)
	}
	for _, r := range reps {
		if _, err := r.ApplyRetention(); err != nil {
			n.logger.Warn("retention", "error", err)
		}
	}
}

// topicLogConfig turns topic configs into the log's configuration.
func topicLogConfig(c map[string]string, base log.Config) log.Config {
	num := func(k string) (int64, bool) {
		v, ok := c[k]
		if !ok {
			return 0, false
		}
		x, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		return x, err == nil
	}
	lc := base
	if v, ok := num("segment.bytes"); ok {
		lc.SegmentBytes = v
	}
	if v, ok := num("segment.ms"); ok {
		lc.SegmentMs = time.Duration(v) * time.Millisecond
	}
	if v, ok := num("retention.ms"); ok {
		lc.RetentionMs = time.Duration(v) * time.Millisecond
		if v < 0 {
			lc.RetentionMs = -1
		}
	}
	if v, ok := num("retention.bytes"); ok {
		lc.RetentionBytes = v
	}
	if v, ok := num("index.interval.bytes"); ok {
		lc.IndexIntervalBytes = int(v)
	}
	if v, ok := num("segment.index.bytes"); ok {
		lc.SegmentIndexBytes = int(v)
	}
	if v, ok := num("flush.messages"); ok && v < 1<<62 {
		lc.FlushMessages = v
	}
	if v, ok := num("flush.ms"); ok && v < 1<<40 {
		lc.FlushMs = time.Duration(v) * time.Millisecond
	}
	if v, ok := num("max.message.bytes"); ok {
		lc.MaxBatchBytes = int(v)
	}
	return lc
}

// groupFile names, in a partition directory, the Raft group it belongs to.
const groupFile = "group"

// claimDir makes dir the directory of group: a directory left by another
// group of the same name (a topic deleted and created again while this
// node was away) is removed first, never reused. The group file is
// written in place, not renamed into it: the directory is new, and a
// file torn by a crash names no group, so the directory is taken for
// half made and made again.
func claimDir(dir, group string) error {
	b, err := os.ReadFile(filepath.Join(dir, groupFile))
	switch {
	case err == nil && string(b) == group:
		return nil
	case err == nil:
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	case !os.IsNotExist(err):
		return err
	default:
		if _, serr := os.Stat(dir); serr == nil {
			// A directory without its group: from before, or half made.
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := vfs.OS.Create(filepath.Join(dir, groupFile))
	if err != nil {
		return err
	}
	if err := vfs.WriteSyncClose(f, []byte(group), 0); err != nil {
		return err
	}
	return vfs.OS.SyncDir(dir)
}
