package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/cluster/clustertest"
	"github.com/raftlog/raftlog/cluster/node"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/replication"
	"github.com/twmb/franz-go/pkg/kerr"
)

func TestClusterTopicsLeadersAndFailover(t *testing.T) {
	c := clustertest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Nodes[1].Controller().CreateTopic(ctx, "orders", 3, 3, nil, false); err != nil {
		t.Fatal(err)
	}
	// Every node learns the topic and, within a bounded delay, every leader.
	for _, nd := range c.Nodes {
		nd := nd
		clustertest.WaitFor(t, "leaders known everywhere", 20*time.Second, func() bool {
			tp, ok := nd.Meta().Topic("orders")
			if !ok {
				return false
			}
			for _, ps := range nd.PartitionStates(tp) {
				if ps.Leader < 0 {
					return false
				}
			}
			return true
		})
	}
	// Leaders are spread: three partitions, three nodes.
	tp, _ := c.Nodes[0].Meta().Topic("orders")
	leaders := map[int32]bool{}
	for _, ps := range c.Nodes[0].PartitionStates(tp) {
		leaders[ps.Leader] = true
	}
	t.Logf("leaders %v", leaders)
	// Append through the leader of partition 0, on whichever node it is.
	var lead *replication.Replica
	var leadIdx int
	clustertest.WaitFor(t, "the leader of orders-0", 10*time.Second, func() bool {
		for i, nd := range c.Nodes {
			if r, err := nd.LeaderPartition("orders", 0); err == nil {
				lead, leadIdx = r, i
				return true
			}
		}
		return false
	})
	b := log.BuildBatch(nil, log.BatchOptions{ProducerID: -1, BaseSequence: -1}, []log.Record{{Value: []byte("v"), Timestamp: 1}})
	off, err := lead.Append(ctx, b, replication.AcksAll)
	if err != nil {
		t.Fatal(err)
	}
	// Kill the leader's node: another takes the partition over and the
	// acknowledged batch is there.
	c.Kill(leadIdx)
	var nl *replication.Replica
	clustertest.WaitFor(t, "a new leader of orders-0", 20*time.Second, func() bool {
		for i, nd := range c.Nodes {
			if i == leadIdx {
				continue
			}
			if r, err := nd.LeaderPartition("orders", 0); err == nil {
				nl = r
				return true
			}
		}
		return false
	})
	clustertest.WaitFor(t, "the new leader to commit", 10*time.Second, func() bool { return nl.HighWatermark() > off })
	got, err := nl.Log().ReadBatch(off)
	if err != nil {
		t.Fatalf("acknowledged batch at %d: %v", off, err)
	}
	if recs, _, ok := log.DecodeRecords(got); !ok || len(recs) != 1 || string(recs[0].Value) != "v" {
		t.Fatalf("the new leader holds another batch at the acknowledged offset %d", off)
	}
	c.Restart(leadIdx)
	// Producer ids: fresh ones differ; a bump keeps the id and raises the
	// epoch once the node knows the id; an unknown id gets a fresh one.
	pid1, e1, err := c.Nodes[0].Controller().InitProducerID(ctx, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	pid2, _, err := c.Nodes[1].Controller().InitProducerID(ctx, -1, -1)
	if err != nil || pid2 == pid1 || e1 != 0 {
		t.Fatalf("producer ids %d and %d (epoch %d), err %v", pid1, pid2, e1, err)
	}
	clustertest.WaitFor(t, "node 3 to apply the allocations", 10*time.Second, func() bool {
		return c.Nodes[2].Meta().LastProducerID() >= max(pid1, pid2)
	})
	if id, e, err := c.Nodes[2].Controller().InitProducerID(ctx, pid1, 4); err != nil || id != pid1 || e != 5 {
		t.Fatalf("bump of (%d, 4): (%d, %d) %v", pid1, id, e, err)
	}
	if id, e, err := c.Nodes[2].Controller().InitProducerID(ctx, max(pid1, pid2)+1000, 0); err != nil || id == max(pid1, pid2)+1000 || e != 0 {
		t.Fatalf("bump of an unknown id: (%d, %d) %v", id, e, err)
	}
	if err := c.Nodes[2].Controller().DeleteTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.Nodes {
		nd := nd
		clustertest.WaitFor(t, "replicas dropped", 20*time.Second, func() bool {
			_, ok := nd.Replica("orders", 0)
			return !ok
		})
	}
}

// TestWipedNodeRejoins: a node whose data directory is wiped comes back
// with a new incarnation; the leaders of its partitions swap its old Raft
// identity for the new one, as a non-voter first and a voter once caught
// up.
func TestWipedNodeRejoins(t *testing.T) {
	c := clustertest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Nodes[0].Controller().CreateTopic(ctx, "w", 1, 3, nil, false); err != nil {
		t.Fatal(err)
	}
	var lead *replication.Replica
	clustertest.WaitFor(t, "a leader of w-0", 20*time.Second, func() bool {
		for _, nd := range c.Nodes {
			if r, err := nd.LeaderPartition("w", 0); err == nil {
				lead = r
				return true
			}
		}
		return false
	})
	b := log.BuildBatch(nil, log.BatchOptions{ProducerID: -1, BaseSequence: -1}, []log.Record{{Value: []byte("v"), Timestamp: 1}})
	if _, err := lead.Append(ctx, b, replication.AcksAll); err != nil {
		t.Fatal(err)
	}
	// Wipe a node that does not lead w-0 nor the controller.
	victim := -1
	for i, nd := range c.Nodes {
		r, ok := nd.Replica("w", 0)
		if ok && !r.IsLeader() && nd.ControllerID() != nd.ID() {
			victim = i
		}
	}
	if victim < 0 {
		t.Skip("no follower to wipe")
	}
	r, _ := c.Nodes[victim].Replica("w", 0)
	oldID := r.ServerID()
	c.Stop(victim)
	if err := os.RemoveAll(c.Cfgs[victim].Cluster.DataDir); err != nil {
		t.Fatal(err)
	}
	c.Restart(victim)
	clustertest.WaitFor(t, "the wiped replica back as a voter under a new id", 60*time.Second, func() bool {
		for _, nd := range c.Nodes {
			lr, err := nd.LeaderPartition("w", 0)
			if err != nil {
				continue
			}
			cfg, err := lr.Configuration()
			if err != nil {
				return false
			}
			newVoter, oldGone := false, true
			for _, s := range cfg.Servers {
				if s.ID == oldID {
					oldGone = false
				}
				if s.Suffrage == raft.Voter && string(s.ID) != string(oldID) && strings.HasPrefix(string(s.ID), fmt.Sprintf("%d-", c.Nodes[victim].ID())) {
					newVoter = true
				}
			}
			return newVoter && oldGone
		}
		return false
	})
}

// TestTopicRecreatedWhileNodeAway: a topic is deleted and created again
// while a node is down; when the node comes back with its old directory,
// its replica of the old topic is not taken for the new one.
func TestTopicRecreatedWhileNodeAway(t *testing.T) {
	c := clustertest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	appendTo := func(v string) (int64, *replication.Replica) {
		var lead *replication.Replica
		clustertest.WaitFor(t, "a leader of re-0", 20*time.Second, func() bool {
			for i, nd := range c.Nodes {
				if c.Nodes[i] == nil {
					continue
				}
				if r, err := nd.LeaderPartition("re", 0); err == nil {
					lead = r
					return true
				}
			}
			return false
		})
		b := log.BuildBatch(nil, log.BatchOptions{ProducerID: -1, BaseSequence: -1}, []log.Record{{Value: []byte(v), Timestamp: 1}})
		off, err := lead.Append(ctx, b, replication.AcksAll)
		if err != nil {
			t.Fatal(err)
		}
		return off, lead
	}
	if err := c.Nodes[0].Controller().CreateTopic(ctx, "re", 1, 3, nil, false); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		appendTo(fmt.Sprintf("OLD-%d", i))
	}
	// Crash node 3 and recreate the topic before the others notice, so
	// the new topic is assigned to it too.
	c.Kill(2)
	if err := c.Nodes[0].Controller().DeleteTopic(ctx, "re"); err != nil {
		t.Fatal(err)
	}
	if err := c.Nodes[0].Controller().CreateTopic(ctx, "re", 1, 3, nil, false); err != nil {
		t.Skipf("node 3 was seen gone before the topic was created again: %v", err)
	}
	off, _ := appendTo("NEW")
	c.Restart(2)
	clustertest.WaitFor(t, "the returning node to hold the new topic's data", 30*time.Second, func() bool {
		r, ok := c.Nodes[2].Replica("re", 0)
		if !ok {
			return false
		}
		b, err := r.Log().ReadBatch(off)
		if err != nil {
			return false
		}
		recs, _, ok := log.DecodeRecords(b)
		return ok && len(recs) == 1 && string(recs[0].Value) == "NEW"
	})
	r, _ := c.Nodes[2].Replica("re", 0)
	p, err := r.Log().Read(r.Log().StartOffset(), 1<<20, r.Log().EndOffset())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(p), "OLD-") {
		t.Fatal("the returning node's replica holds the deleted topic's data")
	}
}

// TestJoinThroughOwnAlias: node 1's seed list names itself under another
// name (as a StatefulSet's peer DNS names do) and node 2, which is not up
// yet at node 1's first join and joins nobody itself. Reaching only
// itself is no join: node 1 tries again and the cluster forms.
func TestJoinThroughOwnAlias(t *testing.T) {
	var gossip2 string
	c := clustertest.StartWith(t, 2, func(_ int, nc *node.Config) {
		cfg := &nc.Cluster
		switch cfg.NodeID {
		case 1:
			_, port, _ := net.SplitHostPort(cfg.GossipAddr)
			gossip2 = cfg.Join[1]
			cfg.Join = []string{"localhost:" + port, gossip2}
		case 2:
			cfg.Join = nil
		}
	})
	if len(c.Nodes[0].Brokers()) != 2 || len(c.Nodes[1].Brokers()) != 2 {
		t.Fatalf("members: %v and %v", c.Nodes[0].Brokers(), c.Nodes[1].Brokers())
	}
}

// A topic created once every node has the dense offset layout is in it:
// its first record is at offset 0. With a node of an earlier version
// registered (one without the feature), a new topic stays legacy: Raft's
// entries take its first offsets.
func TestNewTopicsHaveDenseOffsets(t *testing.T) {
	c := clustertest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// firstOffsets creates topic and returns where its first records go.
	firstOffsets := func(topic string, dense bool) []int64 {
		t.Helper()
		if err := c.Nodes[0].Controller().CreateTopic(ctx, topic, 1, 3, nil, false); err != nil {
			t.Fatal(err)
		}
		if tp, ok := c.Nodes[0].Meta().Topic(topic); !ok || tp.DenseOffsets != dense {
			t.Fatalf("topic %s: %+v, want dense %v", topic, tp, dense)
		}
		var lead *replication.Replica
		clustertest.WaitFor(t, "the leader of "+topic, 20*time.Second, func() bool {
			for _, nd := range c.Nodes {
				if r, err := nd.LeaderPartition(topic, 0); err == nil && r.LeaderReady() {
					lead = r
					return true
				}
			}
			return false
		})
		var offs []int64
		for range 3 {
			b := log.BuildBatch(nil, log.BatchOptions{ProducerID: -1, BaseSequence: -1}, []log.Record{{Value: []byte("v"), Timestamp: 1}})
			off, err := lead.Append(ctx, b, replication.AcksAll)
			if err != nil {
				t.Fatalf("append to %s: %v", topic, err)
			}
			offs = append(offs, off)
		}
		return offs
	}
	if offs := firstOffsets("dense", true); !slices.Equal(offs, []int64{0, 1, 2}) {
		t.Fatalf("a new topic's first records at %v, want 0, 1, 2", offs)
	}
	if err := c.Nodes[0].RegisterOld(ctx, 9); err != nil {
		t.Fatal(err)
	}
	if offs := firstOffsets("legacy", false); offs[0] == 0 || offs[2] != offs[0]+2 {
		t.Fatalf("a legacy topic's first records at %v, want after Raft's entries", offs)
	}
}

// TestControllerLeavesACutNode: the harness's network cuts the Raft links
// of the controller's leader; the other two elect a new one that takes
// admin commands, and once the links heal the cut node follows it and
// learns what was done meanwhile.
func TestControllerLeavesACutNode(t *testing.T) {
	c := clustertest.Start(t, 3)
	cut := c.ControllerLeader()
	c.IsolateRaft(cut)
	other := c.Nodes[(cut+1)%3]
	clustertest.WaitFor(t, "a new controller on the connected side", 30*time.Second, func() bool {
		id := other.ControllerID()
		return id > 0 && id != int32(cut+1)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := other.Controller().CreateTopic(ctx, "while-cut", 1, 2, nil, false); err != nil {
		t.Fatalf("create a topic on the connected side: %v", err)
	}
	c.Net.Heal()
	clustertest.WaitFor(t, "the healed node to follow the new controller and learn the topic", 30*time.Second, func() bool {
		_, ok := c.Nodes[cut].Meta().Topic("while-cut")
		return ok && c.Nodes[cut].ControllerID() == other.ControllerID()
	})
}

// TestCreateTopicRetried: a creation request retried by its requester
// succeeds as the first did; of two requesters racing for a name, one
// creates the topic and the other hears TOPIC_ALREADY_EXISTS.
func TestCreateTopicRetried(t *testing.T) {
	c := clustertest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := map[string]string{"retention.ms": "60000"}
	if err := c.Nodes[1].Controller().CreateTopicFor(ctx, "app@/127.0.0.9", "r", 2, 3, cfg, false); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what      string
		requester string
		parts     int32
		cfg       map[string]string
		want      error
	}{
		{"the same request", "app@/127.0.0.9", 2, cfg, nil},
		{"another requester", "other@/127.0.0.9", 2, cfg, kerr.TopicAlreadyExists},
		{"no requester", "", 2, cfg, kerr.TopicAlreadyExists},
		{"other partitions", "app@/127.0.0.9", 3, cfg, kerr.TopicAlreadyExists},
		{"other configs", "app@/127.0.0.9", 2, nil, kerr.TopicAlreadyExists},
	} {
		for i, nd := range c.Nodes {
			if err := nd.Controller().CreateTopicFor(ctx, tc.requester, "r", tc.parts, 3, tc.cfg, false); !errors.Is(err, tc.want) {
				t.Fatalf("%s through node %d: %v, want %v", tc.what, i+1, err, tc.want)
			}
		}
	}
	for round := 0; round < 3; round++ {
		name := fmt.Sprintf("race-%d", round)
		errs := make(chan error, 2)
		for i, who := range []string{"a@/127.0.0.1", "b@/127.0.0.1"} {
			go func() { errs <- c.Nodes[i].Controller().CreateTopicFor(ctx, who, name, 1, 3, nil, false) }()
		}
		e1, e2 := <-errs, <-errs
		if (e1 == nil) == (e2 == nil) || !errors.Is(e1, kerr.TopicAlreadyExists) && !errors.Is(e2, kerr.TopicAlreadyExists) {
			t.Fatalf("%s: %v and %v, want one created and one TOPIC_ALREADY_EXISTS", name, e1, e2)
		}
	}
}

// TestNewGroupWaitsForItsPeers: the first replica of a new partition
// starts its group (bootstrap and first election) only once a majority of
// the partition's nodes have opened their replicas; until then it runs no
// election at all.
func TestNewGroupWaitsForItsPeers(t *testing.T) {
	c := clustertest.Start(t, 3)
	const cut = 2 // node 3: its Raft links cut, it cannot learn of the topic
	c.IsolateRaft(cut)
	other := c.Nodes[0]
	clustertest.WaitFor(t, "a controller on the connected side", 30*time.Second, func() bool {
		id := other.ControllerID()
		return id > 0 && id != cut+1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := other.Controller().CreateTopic(ctx, "await", 3, 2, nil, false); err != nil {
		t.Fatal(err)
	}
	tp, _ := other.Meta().Topic("await")
	waitP, ledP := int32(-1), int32(-1)
	for p, reps := range tp.Partitions {
		switch {
		case reps[0] != cut+1 && slices.Contains(reps, cut+1):
			waitP = int32(p) // its first replica's only peer cannot open it
		case !slices.Contains(reps, cut+1):
			ledP = int32(p)
		}
	}
	if waitP < 0 || ledP < 0 {
		t.Fatalf("assignment %v: no partition led from a connected node with the cut node as its peer", tp.Partitions)
	}
	first := c.Nodes[tp.Partitions[waitP][0]-1]
	clustertest.WaitFor(t, "the partition on both connected nodes to be led", 20*time.Second, func() bool {
		for _, nd := range c.Nodes[:cut] {
			if _, err := nd.LeaderPartition("await", ledP); err == nil {
				return true
			}
		}
		return false
	})
	clustertest.WaitFor(t, "the first replica to wait for its peer", 20*time.Second, func() bool {
		_, ok := first.Replica("await", waitP)
		return ok && first.AwaitingPeers() == 1
	})
	r, _ := first.Replica("await", waitP)
	if cfg, err := r.Configuration(); err != nil || len(cfg.Servers) != 0 || r.Term() != 0 {
		t.Fatalf("the waiting group started: configuration %v (%v), term %d", cfg.Servers, err, r.Term())
	}
	c.Net.Heal()
	clustertest.WaitFor(t, "the group to elect once its peer opens its replica", 30*time.Second, func() bool {
		_, err := first.LeaderPartition("await", waitP)
		return err == nil && first.AwaitingPeers() == 0
	})
}
