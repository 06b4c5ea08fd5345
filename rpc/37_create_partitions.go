package rpc

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CreatePartitions: v0–3.
//
// Each topic's partition count is raised to Count with
// Broker.CreatePartitions (only validated with validateOnly); the broker
// answers INVALID_PARTITIONS for a count not above the current one,
// UNKNOWN_TOPIC_OR_PARTITION... A topic named twice is answered
// INVALID_REQUEST, a manual assignment INVALID_REPLICA_ASSIGNMENT. The
// error message is the error's text; the request timeout bounds the
// whole request, which waits within it until every partition of the
// topics grown has a leader (as CreateTopics).
func (s *Server) createPartitions(c *call, req *kmsg.CreatePartitionsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	count := make(map[string]int, len(req.Topics))
	for _, rt := range req.Topics {
		count[rt.Topic]++
	}
	ctx, cancel := timeoutCtx(c.ctx, req.TimeoutMillis)
	defer cancel()
	for _, rt := range req.Topics {
		st := kmsg.NewCreatePartitionsResponseTopic()
		st.Topic = rt.Topic
		var err error
		switch {
		case count[rt.Topic] > 1:
			err = fmt.Errorf("%w: topic %q is named more than once", kerr.InvalidRequest, rt.Topic)
		case len(rt.Assignment) > 0:
			err = fmt.Errorf("%w: manual replica assignment is not supported", kerr.InvalidReplicaAssignment)
		default:
			err = s.b.CreatePartitions(ctx, rt.Topic, rt.Count, req.ValidateOnly)
			if err == nil && !req.ValidateOnly {
				s.logger.Info("created partitions", "topic", rt.Topic, "count", rt.Count, "client_id", c.clientID)
			}
		}
		st.ErrorCode = s.code(err)
		st.ErrorMessage = errMessage(err)
		resp.Topics = append(resp.Topics, st)
	}
	if !req.ValidateOnly && req.TimeoutMillis > 0 {
		for _, st := range resp.Topics {
			if st.ErrorCode == 0 {
				s.b.AwaitLeaders(ctx, st.Topic)
			}
		}
	}
	return resp, nil
}
