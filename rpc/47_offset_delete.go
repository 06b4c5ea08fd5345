package rpc

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetDelete: v0 (served with a GroupBroker).
//
// Deletes committed offsets of a group (GroupBroker.DeleteOffsets). A
// group with members keeps the offsets of the topics its members consume
// (GROUP_SUBSCRIBED_TO_TOPIC per partition; every topic when their
// metadata cannot be read), and a group with members of another protocol
// type than "consumer" answers NON_EMPTY_GROUP. GROUP_ID_NOT_FOUND for a
// group with neither members nor offsets; UNKNOWN_TOPIC_OR_PARTITION for
// partitions of unknown topics. Not the coordinator: NOT_COORDINATOR.
func (s *Server) offsetDelete(c *call, req *kmsg.OffsetDeleteRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	if e := s.coordinating(); e != nil {
		resp.ErrorCode = e.Code
		return resp, nil
	}
	if req.Group == "" {
		resp.ErrorCode = kerr.InvalidGroupID.Code
		return resp, nil
	}
	found, consumer, subscribed, all := s.groups.subscriptions(req.Group)
	switch {
	case found && !consumer:
		resp.ErrorCode = kerr.NonEmptyGroup.Code
		return resp, nil
	case !found:
		offsets, err := s.gb.FetchOffsets(req.Group, nil)
		if err != nil {
			resp.ErrorCode = s.code(err)
			return resp, nil
		}
		if len(offsets) == 0 {
			resp.ErrorCode = kerr.GroupIDNotFound.Code
			return resp, nil
		}
	}
	names := make([]string, 0, len(req.Topics))
	for _, t := range req.Topics {
		names = append(names, t.Topic)
	}
	counts := s.topicPartitionCounts(names)
	var (
		parts []TopicPartition
		at    [][2]int
	)
	for i, t := range req.Topics {
		st := kmsg.NewOffsetDeleteResponseTopic()
		st.Topic = t.Topic
		n, known := counts[t.Topic]
		for j, p := range t.Partitions {
			sp := kmsg.NewOffsetDeleteResponseTopicPartition()
			sp.Partition = p.Partition
			switch {
			case !known || p.Partition < 0 || p.Partition >= n:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case all || subscribed[t.Topic]:
				sp.ErrorCode = kerr.GroupSubscribedToTopic.Code
			default:
				parts = append(parts, TopicPartition{Topic: t.Topic, Partition: p.Partition})
				at = append(at, [2]int{i, j})
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	if len(parts) == 0 {
		return resp, nil
	}
	ctx, cancel := timeoutCtx(c.ctx, 0)
	defer cancel()
	if err := s.gb.DeleteOffsets(ctx, req.Group, parts); err != nil {
		code := s.code(err)
		for _, ij := range at {
			resp.Topics[ij[0]].Partitions[ij[1]].ErrorCode = code
		}
	}
	return resp, nil
}
