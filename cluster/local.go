package cluster

import "github.com/raftlog/raftlog/replication"

// LocalReplica is a partition replica open on this node.
type LocalReplica struct {
	Topic     string
	Partition int32
	// Replicas is the partition's assignment (node ids, preferred leader
	// first) in the metadata.
	Replicas []int32
	Replica  *replication.Replica
}

// LocalReplicas lists the partition replicas open on this node, by topic
// then partition (the controller's replica is not one of them). It is a
// snapshot for reading state (metrics, status): a replica may be closed
// at any time after it is returned.
func (n *Node) LocalReplicas() []LocalReplica {
	topics := n.meta.Topics()
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []LocalReplica
	for _, t := range topics {
		for p, reps := range t.Partitions {
			if r, ok := n.replicas[groupName(t, int32(p))]; ok {
				out = append(out, LocalReplica{Topic: t.Name, Partition: int32(p), Replicas: reps, Replica: r})
			}
		}
	}
	return out
}
