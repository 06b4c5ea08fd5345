package rpc

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DeleteRecords: v0–2.
//
// Per partition, the log start offset is moved up to the requested offset
// (-1: the high watermark) with Partition.DeleteRecords, and the new log
// start offset is answered as the low watermark. As Kafka, an offset past
// the high watermark (or below -1) is OFFSET_OUT_OF_RANGE; one below the
// current log start changes nothing. Errors answer a low watermark of -1.
// The request timeout bounds the whole request.
func (s *Server) deleteRecords(c *call, req *kmsg.DeleteRecordsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
	type job struct {
		topic string
		rp    kmsg.DeleteRecordsRequestTopicPartition
		sp    *kmsg.DeleteRecordsResponseTopicPartition
	}
	var jobs []job
	resp.Topics = make([]kmsg.DeleteRecordsResponseTopic, len(req.Topics))
	for i, rt := range req.Topics {
		st := &resp.Topics[i]
		*st = kmsg.NewDeleteRecordsResponseTopic()
		st.Topic = rt.Topic
		st.Partitions = make([]kmsg.DeleteRecordsResponseTopicPartition, len(rt.Partitions))
		for j, rp := range rt.Partitions {
			st.Partitions[j] = kmsg.NewDeleteRecordsResponseTopicPartition()
			st.Partitions[j].Partition = rp.Partition
			jobs = append(jobs, job{rt.Topic, rp, &st.Partitions[j]})
		}
	}
	ctx, cancel := timeoutCtx(c.ctx, req.TimeoutMillis)
	defer cancel()
	// Sequential: a partition named twice must be handled in order, and
	// these are rare, small requests.
	for _, j := range jobs {
		low, err := func() (int64, error) {
			p, err := s.b.Partition(j.topic, j.rp.Partition)
			if err != nil {
				return -1, err
			}
			if off := j.rp.Offset; off < -1 || off > p.HighWatermark() {
				return -1, fmt.Errorf("%w: %d is not in [log start, high watermark %d]", kerr.OffsetOutOfRange, off, p.HighWatermark())
			}
			return p.DeleteRecords(ctx, j.rp.Offset)
		}()
		j.sp.LowWatermark = low
		if err != nil {
			j.sp.LowWatermark = -1
			j.sp.ErrorCode = s.code(err)
		}
	}
	return resp, nil
}
