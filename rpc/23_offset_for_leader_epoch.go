package rpc

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetForLeaderEpoch: v2–4.
//
// Per partition: the end offset of the largest leader epoch at most the
// requested one, and that epoch (Partition.EndOffsetForEpoch; -1/-1 when
// unknown), after checking the current leader epoch (-1 skips:
// FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH). Consumers use it to detect
// log truncation after a leader change. The replica id (v3+) is ignored:
// followers replicate through Raft, not through this API.
func (s *Server) offsetForLeaderEpoch(_ *call, req *kmsg.OffsetForLeaderEpochRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewOffsetForLeaderEpochResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			sp.Partition = rp.Partition
			p, err := s.b.Partition(rt.Topic, rp.Partition)
			if err == nil {
				err = checkEpoch(p, rp.CurrentLeaderEpoch)
			}
			if err == nil {
				sp.EndOffset, sp.LeaderEpoch, err = p.EndOffsetForEpoch(rp.LeaderEpoch)
			}
			if err != nil {
				sp.ErrorCode = s.code(err)
				sp.EndOffset, sp.LeaderEpoch = -1, -1
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
