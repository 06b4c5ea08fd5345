package rpc

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DeleteTopics: v0–6.
//
// Each topic is deleted with Broker.DeleteTopic, by name; v6 may name it
// by id instead, resolved through Topics(nil) (an unknown id is answered
// UNKNOWN_TOPIC_ID). The broker's errors (UNKNOWN_TOPIC_OR_PARTITION,
// NOT_CONTROLLER...) are answered per topic, with their text as the error
// message (v5+); v6 answers the topic id too. The request timeout bounds
// the whole request.
func (s *Server) deleteTopics(c *call, req *kmsg.DeleteTopicsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	type target struct {
		name *string
		id   [16]byte
	}
	var targets []target
	if req.Version >= 6 {
		var byID map[[16]byte]string
		for _, rt := range req.Topics {
			t := target{name: rt.Topic, id: rt.TopicID}
			if t.id != [16]byte{} {
				if byID == nil {
					byID = topicIDs(s.b)
				}
				if n, ok := byID[t.id]; ok {
					t.name = &n
				} else {
					t.name = nil
				}
			}
			targets = append(targets, t)
		}
	} else {
		for _, n := range req.TopicNames {
			targets = append(targets, target{name: &n})
		}
	}
	ctx, cancel := timeoutCtx(c.ctx, req.TimeoutMillis)
	defer cancel()
	for _, t := range targets {
		st := kmsg.NewDeleteTopicsResponseTopic()
		st.Topic, st.TopicID = t.name, t.id
		var err error
		if t.name == nil {
			err = kerr.UnknownTopicID
			if t.id == [16]byte{} {
				err = kerr.InvalidRequest
			}
		} else {
			if t.id == [16]byte{} && req.Version >= 6 {
				if infos := s.b.Topics([]string{*t.name}); len(infos) == 1 && infos[0].Err == nil {
					st.TopicID = infos[0].ID
				}
			}
			err = s.b.DeleteTopic(ctx, *t.name)
			if err == nil {
				s.logger.Info("deleted topic", "topic", *t.name, "client_id", c.clientID)
			}
		}
		st.ErrorCode = s.code(err)
		st.ErrorMessage = errMessage(err)
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
