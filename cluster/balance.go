package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/replication"
)

// The leader balancer spreads partition leaders evenly over the live
// nodes by Raft leadership transfer. It runs on the node leading the
// controller, one round every LeaderBalanceInterval: a single planner
// sees every node's leaders at once, so two nodes never push leadership
// at the same third node in the same round, and a round moves at most
// LeaderBalanceMoves leaders. A round:
//
//  1. asks every live node for a report of its replicas (cluster RPC
//     "report"): for each group, whether it leads it and in what term,
//     whether the vote guard gates it, its log end and high watermark,
//     and, on the leader, which nodes vote;
//  2. counts the leaders of each node (partitions being reassigned are
//     left to the reassignment) and plans moves from the node leading the
//     most to a replica on a node leading at least two fewer: never to a
//     node up for less than LeaderBalanceGrace, nor to a replica that is
//     gated, not a voter, or whose log ends before its leader's high
//     watermark. Each move narrows the spread, so rounds converge and do
//     not undo each other; a partition moves at most once per round;
//  3. asks each leader to transfer (cluster RPC "transfer", Raft's
//     LeadershipTransferToServer).
//
// Rounds stop moving once no such move is left: with every node holding
// every partition, at most ceil(partitions / nodes) leaders each (the
// planner makes single moves only, so a placement where the most and the
// least loaded nodes share no partition can leave a wider spread).

// healState is what the controller's leader keeps between rounds of
// healLoop (reset when it loses the controller's leadership).
type healState struct {
	since       time.Time           // when this node became the controller's leader
	lastBalance time.Time           // the last balancing round
	deadSince   map[int32]time.Time // nodes assigned replicas and not live, since when
	noSpare     map[string]bool     // groups already warned about: no node to move to
	failed      map[leaderMove]bool // transfers that failed in the previous round
}

// healLoop runs the leader balancer and the replacement of dead nodes'
// replicas while this node leads the controller.
func (n *Node) healLoop() {
	defer n.wg.Done()
	tick := time.Second
	if iv := n.cfg.LeaderBalanceInterval; iv > 0 && iv < tick {
		tick = iv
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		if !n.ctl.r.IsLeader() || n.meta.ClusterID() == "" {
			n.heal = healState{}
			continue
		}
		now := time.Now()
		if n.heal.since.IsZero() {
			// A new controller leader often means a node just failed:
			// balance after a full interval.
			n.heal.since, n.heal.lastBalance = now, now
		}
		if n.cfg.DeadNodeTimeout > 0 {
			n.replaceDeadReplicas(now)
		}
		if iv := n.cfg.LeaderBalanceInterval; iv > 0 && now.Sub(n.heal.lastBalance) >= iv {
			n.balanceLeaders()
			n.heal.lastBalance = time.Now()
		}
	}
}

// nodeReport is one node's answer to "report".
type nodeReport struct {
	Node     int32                  `json:"node"`
	UptimeMs int64                  `json:"uptime_ms"`
	Groups   map[string]groupReport `json:"groups"`
}

// groupReport is one local replica in a nodeReport.
type groupReport struct {
	Leader bool    `json:"leader,omitempty"`
	Term   uint64  `json:"term"`
	Gated  bool    `json:"gated,omitempty"`
	End    int64   `json:"end"`
	HW     int64   `json:"hw"`
	Voters []int32 `json:"voters,omitempty"` // on the leader: the nodes with a voting replica
}

func (n *Node) localReport() *nodeReport {
	n.mu.Lock()
	reps := make(map[string]*replication.Replica, len(n.replicas))
	for g, r := range n.replicas {
		reps[g] = r
	}
	n.mu.Unlock()
	rep := &nodeReport{Node: n.cfg.NodeID, UptimeMs: time.Since(n.started).Milliseconds(), Groups: make(map[string]groupReport, len(reps))}
	for g, r := range reps {
		gr := groupReport{Leader: r.IsLeader(), Term: r.Term(), Gated: r.Gated(), End: r.Log().EndOffset(), HW: r.HighWatermark()}
		if gr.Leader {
			if cfg, err := r.Configuration(); err == nil {
				for _, s := range cfg.Servers {
					if s.Suffrage == raft.Voter {
						gr.Voters = append(gr.Voters, nodeOf(s.ID))
					}
				}
			}
		}
		rep.Groups[g] = gr
	}
	return rep
}

// transferLocal hands the leadership of a group this node leads to the
// voting replica on node to.
func (n *Node) transferLocal(group string, to int32) error {
	n.mu.Lock()
	r := n.replicas[group]
	n.mu.Unlock()
	if r == nil || !r.IsLeader() {
		return fmt.Errorf("cluster: node %d does not lead %s", n.cfg.NodeID, group)
	}
	cfg, err := r.Configuration()
	if err != nil {
		return err
	}
	for _, s := range cfg.Servers {
		if nodeOf(s.ID) == to && s.Suffrage == raft.Voter {
			return r.TransferLeadership(s.ID, s.Address)
		}
	}
	return fmt.Errorf("cluster: node %d has no voting replica of %s", to, group)
}

// reports asks every live node for its report; nodes that do not answer
// are left out.
func (n *Node) reports(ctx context.Context, brokers []BrokerInfo) map[int32]*nodeReport {
	out := map[int32]*nodeReport{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, b := range brokers {
		if b.NodeID == n.cfg.NodeID {
			out[b.NodeID] = n.localReport()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := n.call(ctx, raft.ServerAddress(b.RaftAddr), rpcRequest{Op: "report"})
			if err != nil || resp.Err != "" || resp.Report == nil || resp.Report.Node != b.NodeID {
				n.logger.Debug("leader balance: no report", "node", b.NodeID, "error", errors.Join(err, errorIf(resp.Err)))
				return
			}
			mu.Lock()
			out[b.NodeID] = resp.Report
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func errorIf(s string) error {
	if s == "" {
		return nil
	}
	return errors.New(s)
}

// balancePart is a partition the balancer may move: its group and
// assigned replicas.
type balancePart struct {
	Group    string
	Replicas []int32
}

// leaderMove is one planned leadership transfer.
type leaderMove struct {
	Group    string
	From, To int32
}

// planLeaderMoves plans at most max transfers (step 2 above). eligible
// says which nodes may be given leadership.
func planLeaderMoves(parts []balancePart, reports map[int32]*nodeReport, eligible func(int32) bool, skip map[leaderMove]bool, max int) []leaderMove {
	counts := map[int32]int{}
	for id := range reports {
		counts[id] = 0
	}
	leader := map[string]int32{}
	for _, p := range parts {
		ld, term := int32(-1), uint64(0)
		for id, rep := range reports {
			if gr, ok := rep.Groups[p.Group]; ok && gr.Leader && (ld < 0 || gr.Term > term) {
				ld, term = id, gr.Term
			}
		}
		if ld >= 0 {
			leader[p.Group] = ld
			counts[ld]++
		}
	}
	canLead := func(p balancePart, from, to int32) bool {
		if to == from || !eligible(to) || skip[leaderMove{p.Group, from, to}] {
			return false
		}
		src, dst := reports[from].Groups[p.Group], reports[to]
		if dst == nil || !slices.Contains(src.Voters, to) {
			return false
		}
		d, ok := dst.Groups[p.Group]
		return ok && !d.Gated && d.End >= src.HW
	}
	sorted := append([]balancePart(nil), parts...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Group < sorted[j].Group })
	moved := map[string]bool{}
	var moves []leaderMove
	for len(moves) < max {
		var best leaderMove
		bestGap := 1 // a move must narrow the spread: from a node leading at least two more
		for _, p := range sorted {
			from, ok := leader[p.Group]
			if !ok || moved[p.Group] {
				continue
			}
			for _, to := range p.Replicas {
				if gap := counts[from] - counts[to]; gap > bestGap && canLead(p, from, to) {
					best, bestGap = leaderMove{p.Group, from, to}, gap
				}
			}
		}
		if best.Group == "" {
			break
		}
		moves = append(moves, best)
		moved[best.Group] = true
		counts[best.From]--
		counts[best.To]++
	}
	return moves
}

// balanceLeaders is one round of the leader balancer.
func (n *Node) balanceLeaders() {
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	brokers := n.Brokers()
	if len(brokers) < 2 {
		return
	}
	addr := map[int32]raft.ServerAddress{}
	for _, b := range brokers {
		addr[b.NodeID] = raft.ServerAddress(b.RaftAddr)
	}
	reports := n.reports(ctx, brokers)
	var parts []balancePart
	for _, t := range n.meta.Topics() {
		for p, reps := range t.Partitions {
			if _, moving := t.Reassigning[int32(p)]; !moving {
				parts = append(parts, balancePart{Group: groupName(t, int32(p)), Replicas: reps})
			}
		}
	}
	grace := n.cfg.LeaderBalanceGrace
	eligible := func(id int32) bool {
		rep, ok := reports[id]
		return ok && time.Duration(rep.UptimeMs)*time.Millisecond >= grace
	}
	failed := map[leaderMove]bool{}
	for _, m := range planLeaderMoves(parts, reports, eligible, n.heal.failed, n.cfg.LeaderBalanceMoves) {
		var err error
		if m.From == n.cfg.NodeID {
			err = n.transferLocal(m.Group, m.To)
		} else {
			var resp rpcResponse
			if resp, err = n.call(ctx, addr[m.From], rpcRequest{Op: "transfer", Group: m.Group, To: m.To}); err == nil {
				err = errorIf(resp.Err)
			}
		}
		if err != nil {
			failed[m] = true
			n.logger.Warn("leader balance: transfer failed", "group", m.Group, "from", m.From, "to", m.To, "error", err)
			continue
		}
		n.logger.Info("leader balance: leadership moved", "group", m.Group, "from", m.From, "to", m.To)
	}
	n.heal.failed = failed
}
