package rpc

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListPartitionReassignments: v0 (KIP-455).
//
// Lists the reassignments in progress (ReassignBroker.Reassignments) of
// the named topics and partitions, or every one when Topics is null.
// Partitions that do not exist or are not moving are left out, as Kafka
// does. Replicas is every replica of the partition, old and new;
// AddingReplicas the target replicas it did not have when the move began;
// RemovingReplicas those that leave once the target ones have caught up.
// A Broker that is not a ReassignBroker moves nothing: the list is empty.
func (s *Server) listPartitionReassignments(_ *call, req *kmsg.ListPartitionReassignmentsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
	rb, ok := s.b.(ReassignBroker)
	if !ok {
		return resp, nil
	}
	want := func(topic string, p int32) bool {
		if req.Topics == nil {
			return true
		}
		for _, rt := range req.Topics {
			if rt.Topic == topic && slices.Contains(rt.Partitions, p) {
				return true
			}
		}
		return false
	}
	byTopic := map[string]int{}
	for _, r := range rb.Reassignments() {
		if !want(r.Topic, r.Partition) {
			continue
		}
		i, ok := byTopic[r.Topic]
		if !ok {
			st := kmsg.NewListPartitionReassignmentsResponseTopic()
			st.Topic = r.Topic
			i = len(resp.Topics)
			byTopic[r.Topic] = i
			resp.Topics = append(resp.Topics, st)
		}
		sp := kmsg.NewListPartitionReassignmentsResponseTopicPartition()
		sp.Partition, sp.Replicas, sp.AddingReplicas, sp.RemovingReplicas = r.Partition, r.Replicas, r.Adding, r.Removing
		if sp.AddingReplicas == nil {
			sp.AddingReplicas = []int32{}
		}
		if sp.RemovingReplicas == nil {
			sp.RemovingReplicas = []int32{}
		}
		resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, sp)
	}
	return resp, nil
}
