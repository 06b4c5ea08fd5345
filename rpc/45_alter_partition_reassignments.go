package rpc

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// AlterPartitionReassignments: v0–1 (KIP-455).
//
// Each partition's Replicas become its target replicas, the first the
// preferred leader, with ReassignBroker.ReassignPartition; null Replicas
// cancel the reassignment in progress (NO_REASSIGNMENT_IN_PROGRESS when
// there is none), which then moves back to the replicas it began from.
// The answer comes once the change is committed; the move goes on in the
// background and ListPartitionReassignments follows it. v1's
// AllowReplicationFactorChange false refuses a change of the number of
// replicas with INVALID_REPLICATION_FACTOR. A partition named twice is
// INVALID_REQUEST. Against a Broker that is not a ReassignBroker every
// partition is answered INVALID_REQUEST. The request timeout bounds the
// whole request.
func (s *Server) alterPartitionReassignments(c *call, req *kmsg.AlterPartitionAssignmentsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
	resp.AllowReplicationFactorChange = req.AllowReplicationFactorChange
	allowRF := req.Version < 1 || req.AllowReplicationFactorChange
	rb, ok := s.b.(ReassignBroker)
	type tp struct {
		t string
		p int32
	}
	named := map[tp]int{}
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			named[tp{rt.Topic, rp.Partition}]++
		}
	}
	ctx, cancel := timeoutCtx(c.ctx, req.TimeoutMillis)
	defer cancel()
	for _, rt := range req.Topics {
		st := kmsg.NewAlterPartitionAssignmentsResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
			sp.Partition = rp.Partition
			var err error
			switch {
			case !ok:
				err = fmt.Errorf("%w: this broker does not move replicas", kerr.InvalidRequest)
			case named[tp{rt.Topic, rp.Partition}] > 1:
				err = fmt.Errorf("%w: partition %s-%d is named more than once", kerr.InvalidRequest, rt.Topic, rp.Partition)
			default:
				err = rb.ReassignPartition(ctx, rt.Topic, rp.Partition, rp.Replicas, allowRF)
				if err == nil {
					s.logger.Info("partition reassignment", "topic", rt.Topic, "partition", rp.Partition, "replicas", rp.Replicas, "client_id", c.clientID)
				}
			}
			sp.ErrorCode = s.code(err)
			sp.ErrorMessage = errMessage(err)
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

// ReassignBroker is a Broker that moves partition replicas between nodes
// (found by type assertion, as GroupBroker).
type ReassignBroker interface {
	// ReassignPartition starts moving a partition to replicas (node ids,
	// the first the preferred leader), or with nil cancels the move in
	// progress. It returns once the change is committed; allowRFChange
	// false refuses a change of the number of replicas
	// (kerr.InvalidReplicationFactor).
	ReassignPartition(ctx context.Context, topic string, partition int32, replicas []int32, allowRFChange bool) error
	// Reassignments lists the moves in progress.
	Reassignments() []PartitionReassignment
}

// PartitionReassignment is a partition whose replicas are moving.
type PartitionReassignment struct {
	Topic     string
	Partition int32
	Replicas  []int32 // every replica, old and new
	Adding    []int32
	Removing  []int32
}
