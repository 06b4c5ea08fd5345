package rpc

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListOffsets: v1–7.
//
// Per partition, by timestamp: -2 (earliest) the log start offset, -1
// (latest) the high watermark, both with timestamp -1; -3 (max timestamp,
// v7+) the first offset holding the partition's largest timestamp, with
// that timestamp; any other timestamp the first offset whose record has a
// timestamp at least that (Partition.OffsetForTimestamp). Not found:
// offset -1, timestamp -1 (kadm then lists the end offset). -3 below v7
// is UNSUPPORTED_VERSION, as Kafka; another negative timestamp is searched
// for as a plain one (it finds the first record).
//
// The leader epoch answered (v4+) is the partition's current one; the
// current leader epoch of the request (v4+, -1 skips) is checked
// (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH). The isolation level (v2+)
// is ignored: the last stable offset is the high watermark. The replica id
// is ignored.
func (s *Server) listOffsets(_ *call, req *kmsg.ListOffsetsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			off, ts, epoch, err := s.listOffset(req.Version, rt.Topic, rp)
			if err != nil {
				sp.ErrorCode = s.code(err)
			} else {
				sp.Offset, sp.Timestamp, sp.LeaderEpoch = off, ts, epoch
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

func (s *Server) listOffset(version int16, topic string, rp kmsg.ListOffsetsRequestTopicPartition) (offset, ts int64, epoch int32, err error) {
	p, err := s.b.Partition(topic, rp.Partition)
	if err != nil {
		return 0, 0, 0, err
	}
	if version >= 4 {
		if err := checkEpoch(p, rp.CurrentLeaderEpoch); err != nil {
			return 0, 0, 0, err
		}
	}
	epoch = p.LeaderEpoch()
	switch rp.Timestamp {
	case -2:
		return p.LogStartOffset(), -1, epoch, nil
	case -1:
		return p.HighWatermark(), -1, epoch, nil
	case -3:
		if version < 7 {
			return 0, 0, 0, kerr.UnsupportedVersion
		}
		o, t, found, err := p.MaxTimestamp()
		if err != nil {
			return 0, 0, 0, err
		}
		if !found {
			return -1, -1, epoch, nil
		}
		return o, t, epoch, nil
	}
	o, t, found, err := p.OffsetForTimestamp(rp.Timestamp)
	if err != nil {
		return 0, 0, 0, err
	}
	if !found {
		return -1, -1, epoch, nil
	}
	return o, t, epoch, nil
}
