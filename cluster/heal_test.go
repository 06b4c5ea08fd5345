package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/cluster/clustertest"
	"github.com/raftlog/raftlog/cluster/node"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/replication"
	"github.com/twmb/franz-go/pkg/kerr"
)

// leaderOf returns the node index and replica leading topic/p, waiting
// for one among the nodes that are up.
func leaderOf(t *testing.T, c *clustertest.Cluster, down map[int]bool, topic string, p int32) (int, *replication.Replica) {
	t.Helper()
	var idx int
	var lead *replication.Replica
	clustertest.WaitFor(t, fmt.Sprintf("a leader of %s-%d", topic, p), 30*time.Second, func() bool {
		for i, nd := range c.Nodes {
			if down[i] {
				continue
			}
			if r, err := nd.LeaderPartition(topic, p); err == nil {
				idx, lead = i, r
				return true
			}
		}
		return false
	})
	return idx, lead
}

// appendValue appends one record through the partition's leader,
// retrying while leadership moves.
func appendValue(t *testing.T, c *clustertest.Cluster, down map[int]bool, topic string, p int32, v string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, lead := leaderOf(t, c, down, topic, p)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		b := log.BuildBatch(nil, log.BatchOptions{ProducerID: -1, BaseSequence: -1}, []log.Record{{Value: []byte(v), Timestamp: 1}})
		_, err := lead.Append(ctx, b, replication.AcksAll)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("append %q to %s-%d: %v", v, topic, p, err)
		}
	}
}

// values reads the committed record values of a replica, in order.
func values(t *testing.T, r *replication.Replica) []string {
	t.Helper()
	var out []string
	for off := r.Log().StartOffset(); off < r.HighWatermark(); {
		p, err := r.Read(off, 1<<20)
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		if len(p) == 0 {
			break
		}
		log.Batches(p, func(b log.Batch) bool {
			off = b.NextOffset()
			if b.IsControl() {
				return true
			}
			recs, _, ok := log.DecodeRecords(b)
			if !ok {
				t.Fatalf("batch at %d does not decode", b.BaseOffset())
			}
			for _, rec := range recs {
				out = append(out, string(rec.Value))
			}
			return true
		})
	}
	return out
}

func leaderCounts(c *clustertest.Cluster, topic string, parts int) (map[int32]int, bool) {
	counts := map[int32]int{}
	for p := int32(0); p < int32(parts); p++ {
		n := 0
		for _, nd := range c.Nodes {
			if r, ok := nd.Replica(topic, p); ok && r.IsLeader() {
				counts[nd.ID()]++
				n++
			}
		}
		if n != 1 {
			return counts, false
		}
	}
	return counts, true
}

// TestLeaderBalance: six partitions of three replicas on three nodes, all
// led by one node; the controller's leader spreads them until no node
// leads more than ceil(6/3) = 2.
func TestLeaderBalance(t *testing.T) {
	c := clustertest.StartWith(t, 3, func(_ int, nc *node.Config) {
		cfg := &nc.Cluster
		cfg.LeaderBalanceInterval = 2 * time.Second
		cfg.LeaderBalanceMoves = 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const parts = 6
	if err := c.Nodes[0].Controller().CreateTopic(ctx, "bal", parts, 3, nil, false); err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < parts; p++ {
		leaderOf(t, c, nil, "bal", p)
	}
	// Every leader onto node 1, retried should a balancing round
	// interleave.
	clustertest.WaitFor(t, "node 1 to lead every partition", 60*time.Second, func() bool {
		for p := int32(0); p < parts; p++ {
			to, ok := c.Nodes[0].Replica("bal", p)
			if !ok || to.IsLeader() {
				continue
			}
			for _, nd := range c.Nodes[1:] {
				if r, ok := nd.Replica("bal", p); ok && r.IsLeader() {
					if err := r.TransferLeadership(to.ServerID(), to.Address()); err != nil {
						t.Logf("transfer bal-%d: %v", p, err)
					}
				}
			}
		}
		counts, ok := leaderCounts(c, "bal", parts)
		return ok && counts[1] == parts
	})
	clustertest.WaitFor(t, "leaders spread to at most 2 per node", 60*time.Second, func() bool {
		counts, ok := leaderCounts(c, "bal", parts)
		if !ok {
			return false
		}
		for _, n := range counts {
			if n > 2 {
				return false
			}
		}
		t.Logf("leaders per node: %v", counts)
		return true
	})
	// Every partition still takes writes.
	for p := int32(0); p < parts; p++ {
		appendValue(t, c, nil, "bal", p, "after")
	}
}

// TestDeadNodeReplicasMove: four nodes, RF 3; a node holding replicas
// dies for good. Past the timeout its replicas move to the live node that
// had none, each partition gets back to three voters on live nodes, and
// every record, written before and after the death, is on each of them.
func TestDeadNodeReplicasMove(t *testing.T) {
	c := clustertest.StartWith(t, 4, func(_ int, nc *node.Config) {
		cfg := &nc.Cluster
		cfg.DeadNodeTimeout = 2 * time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const parts = 4
	if err := c.Nodes[0].Controller().CreateTopic(ctx, "dead", parts, 3, nil, false); err != nil {
		t.Fatal(err)
	}
	var want [parts][]string
	for p := int32(0); p < parts; p++ {
		for i := 0; i < 5; i++ {
			v := fmt.Sprintf("before-%d-%d", p, i)
			appendValue(t, c, nil, "dead", p, v)
			want[p] = append(want[p], v)
		}
	}
	const victim = 1 // node 2: a controller voter holding replicas of three partitions
	tp, _ := c.Nodes[0].Meta().Topic("dead")
	held := 0
	for _, reps := range tp.Partitions {
		if slices.Contains(reps, int32(victim+1)) {
			held++
		}
	}
	if held == 0 {
		t.Fatalf("node %d holds no replica: %v", victim+1, tp.Partitions)
	}
	c.Kill(victim)
	down := map[int]bool{victim: true}
	for p := int32(0); p < parts; p++ {
		for i := 0; i < 5; i++ {
			v := fmt.Sprintf("after-%d-%d", p, i)
			appendValue(t, c, down, "dead", p, v)
			want[p] = append(want[p], v)
		}
	}
	// Until every partition is back to three voters on live nodes; on the
	// way, no partition may ever have fewer than two voters on live nodes
	// (a live replica removed before its replacement caught up).
	live := func(id int32) bool { return id != victim+1 }
	clustertest.WaitFor(t, "three voters on live nodes in every partition", 90*time.Second, func() bool {
		tp, _ := c.Nodes[0].Meta().Topic("dead")
		done := len(tp.Reassigning) == 0
		for p := int32(0); p < parts; p++ {
			reps := tp.Partitions[p]
			if len(reps) != 3 || slices.ContainsFunc(reps, func(id int32) bool { return !live(id) }) {
				done = false
			}
			_, lead := leaderOf(t, c, down, "dead", p)
			cfg, err := lead.Configuration()
			if err != nil {
				return false
			}
			var voters []int32
			liveVoters := 0
			for _, s := range cfg.Servers {
				id := nodeIDOf(s.ID)
				if s.Suffrage == raft.Voter {
					voters = append(voters, id)
					if live(id) {
						liveVoters++
					}
				}
			}
			if liveVoters < 2 {
				t.Fatalf("dead-%d has %d voters on live nodes: %v", p, liveVoters, cfg.Servers)
			}
			slices.Sort(voters)
			sorted := slices.Sorted(slices.Values(reps))
			if len(cfg.Servers) != 3 || !slices.Equal(voters, sorted) {
				done = false
			}
		}
		return done
	})
	tp, _ = c.Nodes[0].Meta().Topic("dead")
	t.Logf("assignment after the move: %v", tp.Partitions)
	for p := int32(0); p < parts; p++ {
		for _, id := range tp.Partitions[p] {
			nd := c.Nodes[id-1]
			clustertest.WaitFor(t, fmt.Sprintf("every record on node %d's replica of dead-%d", id, p), 60*time.Second, func() bool {
				r, ok := nd.Replica("dead", p)
				return ok && slices.Equal(values(t, r), want[p])
			})
		}
	}
}

func nodeIDOf(id raft.ServerID) int32 {
	var n int32
	fmt.Sscanf(string(id), "%d-", &n)
	return n
}

// TestReassignPartition: an operator's move of a partition from nodes
// {1,2,3} to {2,3,4}: node 4 catches up, node 1 leaves the group and
// drops its directory, every record stays readable; invalid requests are
// refused.
func TestReassignPartition(t *testing.T) {
	c := clustertest.Start(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Nodes[0].Controller().CreateTopic(ctx, "mv", 1, 3, nil, false); err != nil {
		t.Fatal(err)
	}
	tp, _ := c.Nodes[0].Meta().Topic("mv")
	if !slices.Equal(tp.Partitions[0], []int32{1, 2, 3}) {
		t.Fatalf("assignment %v, want [1 2 3]", tp.Partitions[0])
	}
	var want []string
	for i := 0; i < 20; i++ {
		v := fmt.Sprintf("v%d", i)
		appendValue(t, c, nil, "mv", 0, v)
		want = append(want, v)
	}
	// Make node 1 the leader, so that the move has to hand leadership on.
	clustertest.WaitFor(t, "node 1 to lead mv-0", 30*time.Second, func() bool {
		to, _ := c.Nodes[0].Replica("mv", 0)
		if to.IsLeader() {
			return true
		}
		_, lead := leaderOf(t, c, nil, "mv", 0)
		lead.TransferLeadership(to.ServerID(), to.Address())
		return false
	})
	dir1 := filepath.Join(c.Cfgs[0].Cluster.DataDir, "mv-0")
	if _, err := os.Stat(dir1); err != nil {
		t.Fatal(err)
	}

	for _, bad := range []struct {
		replicas []int32
		err      error
	}{
		{[]int32{2, 2, 4}, kerr.InvalidReplicaAssignment},
		{[]int32{2, 3, 9}, kerr.InvalidReplicaAssignment},
		{[]int32{}, kerr.InvalidReplicaAssignment},
		{nil, kerr.NoReassignmentInProgress},
	} {
		if err := c.Nodes[2].ReassignPartition(ctx, "mv", 0, bad.replicas, true); !errors.Is(err, bad.err) {
			t.Fatalf("reassign to %v: %v, want %v", bad.replicas, err, bad.err)
		}
	}
	if err := c.Nodes[2].ReassignPartition(ctx, "mv", 0, []int32{2, 3}, false); !errors.Is(err, kerr.InvalidReplicationFactor) {
		t.Fatalf("reassign to two replicas without allowing it: %v", err)
	}
	if err := c.Nodes[2].ReassignPartition(ctx, "nope", 0, []int32{2, 3, 4}, true); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("reassign of an unknown topic: %v", err)
	}

	if err := c.Nodes[2].ReassignPartition(ctx, "mv", 0, []int32{2, 3, 4}, false); err != nil {
		t.Fatal(err)
	}
	if rs := c.Nodes[2].Reassignments(); len(rs) == 1 {
		t.Logf("in progress: %+v", rs[0])
	}
	clustertest.WaitFor(t, "the move to be done", 60*time.Second, func() bool {
		for _, nd := range c.Nodes {
			tp, _ := nd.Meta().Topic("mv")
			if len(tp.Reassigning) != 0 || !slices.Equal(tp.Partitions[0], []int32{2, 3, 4}) {
				return false
			}
		}
		return true
	})
	clustertest.WaitFor(t, "node 1 to drop its replica and directory", 30*time.Second, func() bool {
		_, ok := c.Nodes[0].Replica("mv", 0)
		_, err := os.Stat(dir1)
		return !ok && os.IsNotExist(err)
	})
	_, lead := leaderOf(t, c, nil, "mv", 0)
	cfg, err := lead.Configuration()
	if err != nil {
		t.Fatal(err)
	}
	var voters []int32
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, nodeIDOf(s.ID))
		}
	}
	slices.Sort(voters)
	if len(cfg.Servers) != 3 || !slices.Equal(voters, []int32{2, 3, 4}) {
		t.Fatalf("Raft configuration after the move: %v", cfg.Servers)
	}
	appendValue(t, c, nil, "mv", 0, "after")
	want = append(want, "after")
	for _, i := range []int{1, 2, 3} {
		clustertest.WaitFor(t, fmt.Sprintf("every record on node %d", i+1), 30*time.Second, func() bool {
			r, ok := c.Nodes[i].Replica("mv", 0)
			return ok && slices.Equal(values(t, r), want)
		})
	}
}
