package rpc

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetFetch: v0–8 (served with a GroupBroker).
//
// Answers a group's committed offsets from GroupBroker.FetchOffsets: those
// of the partitions asked, -1 (leader epoch -1, metadata "") for those
// without one, or (v2+, topics null) every committed offset of the group.
// v8 asks for several groups at once, each answered with its own error.
// Errors (NOT_COORDINATOR when this node does not coordinate, or the
// broker's) are the group's (v8), the answer's (v2–7) or every
// partition's (v0–1). v7+'s require-stable is ignored: there are no
// transactional offset commits. The leader epoch is answered v5+.
func (s *Server) offsetFetch(_ *call, req *kmsg.OffsetFetchRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	var coordErr error
	if e := s.coordinating(); e != nil {
		coordErr = e
	}
	if req.Version >= 8 {
		for _, rg := range req.Groups {
			var topics []kmsg.OffsetFetchRequestTopic
			if rg.Topics != nil {
				topics = make([]kmsg.OffsetFetchRequestTopic, 0, len(rg.Topics))
				for _, t := range rg.Topics {
					topics = append(topics, kmsg.OffsetFetchRequestTopic{Topic: t.Topic, Partitions: t.Partitions})
				}
			}
			st, err := s.fetchGroupOffsets(rg.Group, topics, coordErr)
			sg := kmsg.NewOffsetFetchResponseGroup()
			sg.Group = rg.Group
			sg.ErrorCode = s.code(err)
			for _, t := range st {
				gt := kmsg.NewOffsetFetchResponseGroupTopic()
				gt.Topic = t.Topic
				for _, p := range t.Partitions {
					gp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					gp.Partition, gp.Offset, gp.LeaderEpoch, gp.Metadata, gp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode
					gt.Partitions = append(gt.Partitions, gp)
				}
				sg.Topics = append(sg.Topics, gt)
			}
			resp.Groups = append(resp.Groups, sg)
		}
		return resp, nil
	}
	topics := req.Topics
	if req.Version < 2 && topics == nil {
		topics = []kmsg.OffsetFetchRequestTopic{} // null is "all" from v2 only
	}
	st, err := s.fetchGroupOffsets(req.Group, topics, coordErr)
	if err != nil && req.Version < 2 {
		// No top-level error: every partition asked carries it.
		code := s.code(err)
		st = nil
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.ErrorCode = p, -1, code
				rp.Metadata = kmsg.StringPtr("")
				rt.Partitions = append(rt.Partitions, rp)
			}
			st = append(st, rt)
		}
	} else {
		resp.ErrorCode = s.code(err)
	}
	resp.Topics = st
	return resp, nil
}

// fetchGroupOffsets answers one group: its offsets for topics (nil: every
// committed one).
func (s *Server) fetchGroupOffsets(group string, topics []kmsg.OffsetFetchRequestTopic, coordErr error) ([]kmsg.OffsetFetchResponseTopic, error) {
	if coordErr != nil {
		return nil, coordErr
	}
	var names []string
	if topics != nil {
		names = make([]string, 0, len(topics))
		for _, t := range topics {
			names = append(names, t.Topic)
		}
		if len(names) == 0 {
			return nil, nil
		}
	}
	committed, err := s.gb.FetchOffsets(group, names)
	if err != nil {
		return nil, err
	}
	var out []kmsg.OffsetFetchResponseTopic
	add := func(topic string) *kmsg.OffsetFetchResponseTopic {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = topic
		out = append(out, rt)
		return &out[len(out)-1]
	}
	answer := func(rt *kmsg.OffsetFetchResponseTopic, o CommittedOffset) {
		rp := kmsg.NewOffsetFetchResponseTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = o.Partition, o.Offset, o.LeaderEpoch
		rp.Metadata = kmsg.StringPtr(o.Metadata)
		rt.Partitions = append(rt.Partitions, rp)
	}
	if topics == nil {
		byTopic := make(map[string]int)
		for _, o := range committed {
			i, ok := byTopic[o.Topic]
			if !ok {
				add(o.Topic)
				i = len(out) - 1
				byTopic[o.Topic] = i
			}
			answer(&out[i], o)
		}
		return out, nil
	}
	type tp struct {
		topic string
		p     int32
	}
	known := make(map[tp]CommittedOffset, len(committed))
	for _, o := range committed {
		known[tp{o.Topic, o.Partition}] = o
	}
	for _, t := range topics {
		rt := add(t.Topic)
		for _, p := range t.Partitions {
			o, ok := known[tp{t.Topic, p}]
			if !ok {
				o = CommittedOffset{Topic: t.Topic, Partition: p, Offset: -1, LeaderEpoch: -1}
			}
			answer(rt, o)
		}
	}
	return out, nil
}
