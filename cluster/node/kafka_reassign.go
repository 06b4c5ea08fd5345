package node

import (
	"context"

	"github.com/raftlog/raftlog/rpc"
)

// The Kafka front end's reassignment APIs (AlterPartitionReassignments,
// ListPartitionReassignments) on a cluster node.

var _ rpc.ReassignBroker = broker{}

func (b broker) ReassignPartition(ctx context.Context, topic string, p int32, replicas []int32, allowRFChange bool) error {
	return kafkaErr(b.n.ReassignPartition(ctx, topic, p, replicas, allowRFChange))
}

func (b broker) Reassignments() []rpc.PartitionReassignment {
	var out []rpc.PartitionReassignment
	for _, r := range b.n.Reassignments() {
		out = append(out, rpc.PartitionReassignment{Topic: r.Topic, Partition: r.Partition, Replicas: r.Replicas, Adding: r.Adding, Removing: r.Removing})
	}
	return out
}
