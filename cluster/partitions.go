package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/raftlog/raftlog/replication"
	"github.com/twmb/franz-go/pkg/kerr"
)

// PartitionState is what a node knows of one partition.
type PartitionState struct {
	Partition   int32
	Leader      int32
	LeaderEpoch int32
	Replicas    []int32
	ISR         []int32
	Offline     []int32
}

// PartitionStates describes a topic's partitions: assignment from the
// metadata, leaders from this node's replicas and the gossip. ISR is the
// leader and the assigned replicas that are live members (Raft keeps no
// ISR; a live replica catches up by itself; a leader this node's gossip
// has not seen again is one Raft hears from).
func (n *Node) PartitionStates(t Topic) []PartitionState {
	live := map[int32]bool{}
	for _, b := range n.Brokers() {
		live[b.NodeID] = true
	}
	out := make([]PartitionState, len(t.Partitions))
	for p, reps := range t.Partitions {
		ld, ep := n.Leader(t.Name, int32(p))
		st := PartitionState{Partition: int32(p), Leader: ld, LeaderEpoch: ep, Replicas: append([]int32(nil), reps...)}
		for _, r := range reps {
			if live[r] || r == ld {
				st.ISR = append(st.ISR, r)
			} else {
				st.Offline = append(st.Offline, r)
			}
		}
		out[p] = st
	}
	return out
}

// leaderPoll is how often AwaitLeaders looks at the leaders again.
const leaderPoll = 20 * time.Millisecond

// AwaitLeaders returns once every partition of topic has had a leader
// known here (its own replica, or the leader gossip), or ctx ends, or the
// topic is gone. Each look starts at the first partition not yet seen led.
func (n *Node) AwaitLeaders(ctx context.Context, topic string) {
	tick := time.NewTicker(leaderPoll)
	defer tick.Stop()
	for next := 0; ; {
		_, parts, ok := n.meta.topicRef(topic)
		if !ok {
			return
		}
		for next < parts {
			if ld, _ := n.Leader(topic, int32(next)); ld < 0 {
				break
			}
			next++
		}
		if next == parts {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// LeaderPartition returns the local replica of topic/partition when this
// node leads it: kerr.UnknownTopicOrPartition when there is no such
// partition, kerr.NotLeaderForPartition when another node leads it (or
// none does yet).
func (n *Node) LeaderPartition(topic string, p int32) (*replication.Replica, error) {
	id, parts, ok := n.meta.topicRef(topic)
	if !ok || p < 0 || int(p) >= parts {
		return nil, kerr.UnknownTopicOrPartition
	}
	r, ok := n.replicaOf(topic, p, id)
	if !ok || !r.LeaderReady() {
		return nil, kerr.NotLeaderForPartition
	}
	if r.Gated() {
		return nil, fmt.Errorf("%w: %s", kerr.NotLeaderForPartition, r.GateReason())
	}
	return r, nil
}

// TopicConfigs returns every known config of a topic with its value.
func (n *Node) TopicConfigs(name string) (map[string]string, error) {
	t, ok := n.meta.Topic(name)
	if !ok {
		return nil, kerr.UnknownTopicOrPartition
	}
	return t.Configs, nil
}

// DeleteRecords moves a partition's log start (through Raft).
func (n *Node) DeleteRecords(ctx context.Context, topic string, p int32, offset int64) (int64, error) {
	r, err := n.LeaderPartition(topic, p)
	if err != nil {
		return -1, err
	}
	return r.DeleteRecords(ctx, offset)
}
