package cluster

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/replication"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Moving a partition's replicas (an operator's reassignment, or the
// replacement of a dead node's replicas) is add, catch up, remove:
//
//  1. The controller commits `reassign` with the target replicas. The
//     partition's assignment becomes every replica old and new (the old
//     ones first, so the preferred leader of a group that exists is never
//     a replica that has yet to join), and Topic.Reassigning records the
//     target and where the move began.
//  2. Each node's reconciler opens the replicas the assignment gives it;
//     the partition's leader adds the new ones as non-voters and promotes
//     each once its log has caught up (syncMembers).
//  3. When every target replica votes, a leader that is not a target
//     replica hands leadership to one; a leader that is removes the
//     other replicas from the Raft configuration, then asks the
//     controller to commit `reassign_done`: the assignment becomes the
//     target, and the nodes left out drop their replicas and directories.
//
// No replica leaves the group before every target replica is a caught-up
// voter, so a partition never has fewer caught-up voters than its target.
// Every step is retried from the metadata and the Raft configuration by
// whichever replica leads, so a leader or controller change resumes it.

// Reassignment is a partition whose replicas are moving.
type Reassignment struct {
	Target []int32 // replicas it moves to (the first is the preferred leader)
	Origin []int32 // replicas when the move began
}

// applyReassign applies a `reassign` command (under m.mu).
func (m *Meta) applyReassign(c command) {
	t, ok := m.topics[c.Topic]
	if !ok || (c.TopicID != "" && c.TopicID != hex.EncodeToString(t.ID[:])) || c.Partition < 0 || int(c.Partition) >= len(t.Partitions) {
		return
	}
	cur := t.Partitions[c.Partition]
	rs, moving := t.Reassigning[c.Partition]
	target := c.Replicas
	if c.Cancel {
		if !moving {
			return
		}
		target = rs.Origin
	}
	if len(target) == 0 {
		return
	}
	if !moving {
		if slices.Equal(target, cur) {
			return
		}
		rs.Origin = append([]int32(nil), cur...)
	}
	rs.Target = append([]int32(nil), target...)
	all := append([]int32(nil), cur...)
	for _, id := range target {
		if !slices.Contains(all, id) {
			all = append(all, id)
		}
	}
	t.Partitions[c.Partition] = all
	if t.Reassigning == nil {
		t.Reassigning = map[int32]Reassignment{}
	}
	t.Reassigning[c.Partition] = rs
}

// applyReassignDone applies a `reassign_done` command (under m.mu): only
// for the reassignment it names (a later one may have changed the target).
func (m *Meta) applyReassignDone(c command) {
	t, ok := m.topics[c.Topic]
	if !ok || (c.TopicID != "" && c.TopicID != hex.EncodeToString(t.ID[:])) {
		return
	}
	rs, moving := t.Reassigning[c.Partition]
	if !moving || !slices.Equal(rs.Target, c.Replicas) {
		return
	}
	t.Partitions[c.Partition] = append([]int32(nil), rs.Target...)
	delete(t.Reassigning, c.Partition)
}

// PartitionReassignment describes a reassignment in progress.
type PartitionReassignment struct {
	Topic     string
	Partition int32
	Replicas  []int32 // every replica, old and new
	Target    []int32
	Adding    []int32 // target replicas that were not replicas when the move began
	Removing  []int32 // replicas that leave once every target replica has caught up
}

// Reassignments lists the reassignments in progress, by topic and
// partition.
func (n *Node) Reassignments() []PartitionReassignment {
	var out []PartitionReassignment
	for _, t := range n.meta.Topics() {
		ps := make([]int32, 0, len(t.Reassigning))
		for p := range t.Reassigning {
			ps = append(ps, p)
		}
		slices.Sort(ps)
		for _, p := range ps {
			rs := t.Reassigning[p]
			pr := PartitionReassignment{Topic: t.Name, Partition: p, Replicas: t.Partitions[p], Target: rs.Target}
			for _, id := range rs.Target {
				if !slices.Contains(rs.Origin, id) {
					pr.Adding = append(pr.Adding, id)
				}
			}
			for _, id := range t.Partitions[p] {
				if !slices.Contains(rs.Target, id) {
					pr.Removing = append(pr.Removing, id)
				}
			}
			out = append(out, pr)
		}
	}
	return out
}

// ReassignPartition starts moving a partition's replicas to replicas
// (node ids, the first the preferred leader); nil cancels the
// reassignment in progress, which then moves back to where it began. It
// returns once the controller has committed the change: the move itself
// goes on in the background (see Reassignments). Without
// allowRFChange the number of replicas must stay the same.
func (n *Node) ReassignPartition(ctx context.Context, topic string, p int32, replicas []int32, allowRFChange bool) error {
	t, ok := n.meta.Topic(topic)
	if !ok || p < 0 || int(p) >= len(t.Partitions) {
		return kerr.UnknownTopicOrPartition
	}
	rs, moving := t.Reassigning[p]
	c := command{Op: "reassign", Topic: topic, TopicID: hex.EncodeToString(t.ID[:]), Partition: p}
	if replicas == nil {
		if !moving {
			return kerr.NoReassignmentInProgress
		}
		c.Cancel = true
	} else {
		if len(replicas) == 0 {
			return fmt.Errorf("%w: no replicas", kerr.InvalidReplicaAssignment)
		}
		live := map[int32]bool{}
		for _, b := range n.Brokers() {
			live[b.NodeID] = true
		}
		for i, id := range replicas {
			if slices.Contains(replicas[:i], id) {
				return fmt.Errorf("%w: node %d named twice", kerr.InvalidReplicaAssignment, id)
			}
			if !live[id] {
				return fmt.Errorf("%w: node %d is not a live member", kerr.InvalidReplicaAssignment, id)
			}
		}
		origin := t.Partitions[p]
		if moving {
			origin = rs.Origin
		}
		if !allowRFChange && len(replicas) != len(origin) {
			return fmt.Errorf("%w: %d replicas, the partition has %d", kerr.InvalidReplicationFactor, len(replicas), len(origin))
		}
		c.Replicas = append([]int32(nil), replicas...)
	}
	_, err := n.ctl.append(ctx, c)
	return err
}

// driveReassignment is what the leader of a moving partition does on
// every reconcile: steps 2 and 3 above.
func (n *Node) driveReassignment(r *replication.Replica, t Topic, p int32, rs Reassignment, brokers map[int32]BrokerInfo) {
	g := groupName(t, p)
	var wanted []BrokerInfo
	for _, id := range rs.Target {
		if b, ok := brokers[id]; ok {
			wanted = append(wanted, b)
		}
	}
	syncMembers(n.logger, r, wanted, true)
	if len(wanted) < len(rs.Target) {
		return // a target node is not live: wait for it, or for another target
	}
	cfg, err := r.Configuration()
	if err != nil {
		return
	}
	voting := map[raft.ServerID]bool{}
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter {
			voting[s.ID] = true
		}
	}
	want := map[raft.ServerID]bool{}
	for _, b := range wanted {
		id := serverID(b.NodeID, b.Incarnation)
		if !voting[id] {
			return // still catching up
		}
		want[id] = true
	}
	if !slices.Contains(rs.Target, n.cfg.NodeID) {
		for _, b := range wanted {
			err := r.TransferLeadership(serverID(b.NodeID, b.Incarnation), raft.ServerAddress(b.RaftAddr))
			if err == nil {
				n.logger.Info("reassignment: leadership handed to a target replica", "group", g, "to", b.NodeID)
				return
			}
			n.logger.Debug("reassignment: leadership transfer", "group", g, "to", b.NodeID, "error", err)
		}
		return
	}
	for _, s := range cfg.Servers {
		if want[s.ID] {
			continue
		}
		if err := r.RemoveServer(s.ID); err != nil {
			n.logger.Warn("reassignment: remove replica", "group", g, "id", s.ID, "error", err)
			return
		}
		n.logger.Info("reassignment: replica left the group", "group", g, "id", s.ID)
	}
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	c := command{Op: "reassign_done", Topic: t.Name, TopicID: hex.EncodeToString(t.ID[:]), Partition: p, Replicas: rs.Target}
	if _, err := n.ctl.append(ctx, c); err != nil {
		n.logger.Warn("reassignment: commit the new assignment", "group", g, "error", err)
		return
	}
	n.logger.Info("reassignment done", "group", g, "replicas", rs.Target)
}

// maxDeadMovesPerRound bounds the reassignments one round of
// replaceDeadReplicas starts: each new replica copies its partition's
// whole log.
const maxDeadMovesPerRound = 32

// replaceDeadReplicas runs on the controller's leader: a node assigned
// replicas that has not been a live member for DeadNodeTimeout (as this
// leader saw it: the time restarts when the controller's leadership
// moves) has each of its replicas moved to a live node that is not a
// target replica of the partition, on a rack the partition is not on
// yet when there is one, the least loaded first.
func (n *Node) replaceDeadReplicas(now time.Time) {
	h := &n.heal
	live := map[int32]BrokerInfo{}
	for _, b := range n.Brokers() {
		live[b.NodeID] = b
	}
	topics := n.meta.Topics()
	load := map[int32]int{}
	assigned := map[int32]bool{}
	for _, t := range topics {
		for _, reps := range t.Partitions {
			for _, id := range reps {
				assigned[id] = true
				load[id]++
			}
		}
	}
	if h.deadSince == nil {
		h.deadSince = map[int32]time.Time{}
	}
	for id := range h.deadSince {
		if _, ok := live[id]; ok || !assigned[id] {
			delete(h.deadSince, id)
		}
	}
	expired := map[int32]bool{}
	for id := range assigned {
		if _, ok := live[id]; ok {
			continue
		}
		since, ok := h.deadSince[id]
		if !ok {
			h.deadSince[id] = now
			n.logger.Warn("node assigned replicas is not a live member", "node", id, "replicas_move_after", n.cfg.DeadNodeTimeout)
			continue
		}
		if now.Sub(since) >= n.cfg.DeadNodeTimeout {
			expired[id] = true
		}
	}
	if len(expired) == 0 {
		return
	}
	if h.noSpare == nil {
		h.noSpare = map[string]bool{}
	}
	started := 0
	for _, t := range topics {
		for pi, reps := range t.Partitions {
			p := int32(pi)
			// A partition already moving is given a new target only when
			// its target names a dead node (a dead node it is leaving
			// goes anyway).
			base := reps
			if rs, moving := t.Reassigning[p]; moving {
				base = rs.Target
			}
			if !slices.ContainsFunc(base, func(id int32) bool { return expired[id] }) {
				continue
			}
			g := groupName(t, p)
			target := append([]int32(nil), base...)
			ok := true
			for i, id := range target {
				if !expired[id] {
					continue
				}
				spare := pickSpare(live, target, load)
				if spare < 0 {
					ok = false
					break
				}
				target[i] = spare
				load[spare]++
			}
			if !ok {
				if !h.noSpare[g] {
					n.logger.Warn("no live node to take a dead node's replica", "group", g, "replicas", reps)
					h.noSpare[g] = true
				}
				continue
			}
			delete(h.noSpare, g)
			ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
			_, err := n.ctl.append(ctx, command{Op: "reassign", Topic: t.Name, TopicID: hex.EncodeToString(t.ID[:]), Partition: p, Replicas: target})
			cancel()
			if err != nil {
				n.logger.Warn("move a dead node's replicas", "group", g, "error", err)
				return
			}
			n.logger.Info("moving a dead node's replicas", "group", g, "from", reps, "to", target)
			if started++; started >= maxDeadMovesPerRound {
				return
			}
		}
	}
}

// pickSpare chooses a live node that holds no replica in reps: first one
// on a rack none of the live replicas of reps is on, then the fewest
// replicas, then the lowest id. -1 when there is none.
func pickSpare(live map[int32]BrokerInfo, reps []int32, load map[int32]int) int32 {
	racks := map[string]bool{}
	for _, id := range reps {
		if b, ok := live[id]; ok {
			racks[b.Rack] = true
		}
	}
	ids := make([]int32, 0, len(live))
	for id := range live {
		if !slices.Contains(reps, id) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return -1
	}
	sort.Slice(ids, func(i, j int) bool {
		a, b := ids[i], ids[j]
		ra, rb := racks[live[a].Rack], racks[live[b].Rack]
		if ra != rb {
			return !ra
		}
		if load[a] != load[b] {
			return load[a] < load[b]
		}
		return a < b
	})
	return ids[0]
}
