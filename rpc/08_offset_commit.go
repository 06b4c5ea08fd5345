package rpc

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// maxOffsetMetadata bounds a committed offset's metadata, as Kafka's
// offset.metadata.max.bytes.
const maxOffsetMetadata = 4096

// OffsetCommit: v0–8 (served with a GroupBroker).
//
// A group with members takes the commits of its members at its generation
// (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID otherwise;
// REBALANCE_IN_PROGRESS while CompletingRebalance: commits during
// PreparingRebalance are taken, for eager members committing before they
// rejoin); a group without members takes commits of generation -1 (v0 has
// no generation: always -1) and answers ILLEGAL_GENERATION to others. The
// valid partitions are then stored with GroupBroker.CommitOffsets, with
// their leader epoch (v6+, -1 before) and metadata; partitions of unknown
// topics are UNKNOWN_TOPIC_OR_PARTITION, metadata over 4096 bytes
// OFFSET_METADATA_TOO_LARGE. v1's commit timestamp and v2–4's retention
// time are ignored (offsets expire by GroupConfig.OffsetsRetention, as in
// Kafka since 2.1; offset_retention.go). Not the coordinator:
// NOT_COORDINATOR for every partition.
func (s *Server) offsetCommit(c *call, req *kmsg.OffsetCommitRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	for _, t := range req.Topics {
		st := kmsg.NewOffsetCommitResponseTopic()
		st.Topic = t.Topic
		for _, p := range t.Partitions {
			sp := kmsg.NewOffsetCommitResponseTopicPartition()
			sp.Partition = p.Partition
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	setAll := func(code int16) (kmsg.Response, error) {
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				resp.Topics[i].Partitions[j].ErrorCode = code
			}
		}
		return resp, nil
	}
	if e := s.coordinating(); e != nil {
		return setAll(e.Code)
	}
	generation := req.Generation
	if req.Version == 0 {
		generation = -1
	}
	if e := s.groups.validateCommit(req.Group, req.MemberID, req.InstanceID, generation); e != nil {
		return setAll(e.Code)
	}

	partitions := s.partitionCounts(req.Topics)
	var (
		offsets []CommittedOffset
		at      [][2]int // response positions of offsets
	)
	for i, t := range req.Topics {
		n, known := partitions[t.Topic]
		for j, p := range t.Partitions {
			sp := &resp.Topics[i].Partitions[j]
			switch {
			case !known || p.Partition < 0 || p.Partition >= n:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case p.Metadata != nil && len(*p.Metadata) > maxOffsetMetadata:
				sp.ErrorCode = kerr.OffsetMetadataTooLarge.Code
			default:
				o := CommittedOffset{Topic: t.Topic, Partition: p.Partition, Offset: p.Offset, LeaderEpoch: -1}
				if req.Version >= 6 {
					o.LeaderEpoch = p.LeaderEpoch
				}
				if p.Metadata != nil {
					o.Metadata = *p.Metadata
				}
				offsets = append(offsets, o)
				at = append(at, [2]int{i, j})
			}
		}
	}
	if len(offsets) == 0 {
		return resp, nil
	}
	ctx, cancel := timeoutCtx(c.ctx, 0)
	defer cancel()
	if err := s.gb.CommitOffsets(ctx, req.Group, offsets); err != nil {
		code := s.code(err)
		for _, ij := range at {
			resp.Topics[ij[0]].Partitions[ij[1]].ErrorCode = code
		}
	}
	return resp, nil
}

// partitionCounts returns the partition count of the existing topics
// among those of a request.
func (s *Server) partitionCounts(topics []kmsg.OffsetCommitRequestTopic) map[string]int32 {
	names := make([]string, 0, len(topics))
	seen := make(map[string]bool, len(topics))
	for _, t := range topics {
		if !seen[t.Topic] {
			seen[t.Topic] = true
			names = append(names, t.Topic)
		}
	}
	return s.topicPartitionCounts(names)
}

// topicPartitionCounts returns the partition count of the existing topics
// among names.
func (s *Server) topicPartitionCounts(names []string) map[string]int32 {
	out := make(map[string]int32, len(names))
	if len(names) == 0 {
		return out
	}
	for _, ti := range s.b.Topics(names) {
		if ti.Err == nil {
			out[ti.Name] = int32(len(ti.Partitions))
		}
	}
	return out
}
