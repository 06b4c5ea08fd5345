package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/raftlog/raftlog/cluster/clustertest"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/replication"
)

func TestClusterTopicsLeadersAndFailover(t *testing.T) {
	c := clustertest.Start(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Nodes[1].CreateTopic(ctx, "orders", 3, 3, nil, false); err != nil {
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
	if err != nil || string(got[len(got)-2:]) == "" {
		t.Fatalf("acknowledged batch at %d: %v", off, err)
	}
	c.Restart(leadIdx)
	if _, _, err := c.Nodes[0].InitProducerID(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Nodes[2].DeleteTopic(ctx, "orders"); err != nil {
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
