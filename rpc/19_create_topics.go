package rpc

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CreateTopics: v0–7.
//
// Each topic is created with Broker.CreateTopic (partitions and
// replication factor -1 take the cluster defaults, v4+ clients send them;
// the broker validates names, counts and configs, and answers
// TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR,
// INVALID_CONFIG, NOT_CONTROLLER... as errors wrapping kerr; a retry of
// the request that created a topic, from the same client id and host,
// succeeds as the first did), or only
// validated with validateOnly (v1+). A topic named twice in the request is
// answered INVALID_REQUEST (every time), a manual replica assignment
// INVALID_REPLICA_ASSIGNMENT (placement is the cluster's), a config with a
// null value INVALID_CONFIG. The error message (v1+) is the error's text.
//
// v5+ answers the topic's partition count, replication factor and
// configs, read back with Topics and TopicConfigs after the creation (the
// requested values with validateOnly); v7+ its id. The request timeout
// bounds the whole request: once the topics are created it waits, within
// the timeout, until each has a leader for every partition (a timeout of
// 0 or less does not wait), and answers them created either way.
func (s *Server) createTopics(c *call, req *kmsg.CreateTopicsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	count := make(map[string]int, len(req.Topics))
	for _, rt := range req.Topics {
		count[rt.Topic]++
	}
	ctx, cancel := timeoutCtx(c.ctx, req.TimeoutMillis)
	defer cancel()
	for _, rt := range req.Topics {
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic = rt.Topic
		err := s.createTopic(ctx, c, req, rt, count[rt.Topic] > 1, &st)
		if err != nil {
			st.ErrorCode = s.code(err)
			st.ErrorMessage = errMessage(err)
			st.NumPartitions, st.ReplicationFactor, st.Configs = -1, -1, nil
		}
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

func (s *Server) createTopic(ctx context.Context, c *call, req *kmsg.CreateTopicsRequest, rt kmsg.CreateTopicsRequestTopic, dup bool, st *kmsg.CreateTopicsResponseTopic) error {
	if dup {
		return fmt.Errorf("%w: topic %q is named more than once", kerr.InvalidRequest, rt.Topic)
	}
	if len(rt.ReplicaAssignment) > 0 {
		return fmt.Errorf("%w: manual replica assignment is not supported", kerr.InvalidReplicaAssignment)
	}
	var configs map[string]string
	for _, cfg := range rt.Configs {
		if cfg.Value == nil {
			return fmt.Errorf("%w: config %q has a null value", kerr.InvalidConfig, cfg.Name)
		}
		if configs == nil {
			configs = make(map[string]string, len(rt.Configs))
		}
		configs[cfg.Name] = *cfg.Value
	}
	if err := s.b.CreateTopic(ctx, c.requester(), rt.Topic, rt.NumPartitions, rt.ReplicationFactor, configs, req.ValidateOnly); err != nil {
		return err
	}
	if !req.ValidateOnly {
		s.logger.Info("created topic", "topic", rt.Topic, "partitions", rt.NumPartitions, "replication", rt.ReplicationFactor, "client_id", c.clientID)
	}
	if req.Version < 5 {
		return nil
	}
	if req.ValidateOnly {
		st.NumPartitions, st.ReplicationFactor = rt.NumPartitions, rt.ReplicationFactor
		for _, cfg := range rt.Configs {
			rc := kmsg.NewCreateTopicsResponseTopicConfig()
			rc.Name, rc.Value, rc.Source = cfg.Name, cfg.Value, int8(kmsg.ConfigSourceDynamicTopicConfig)
			st.Configs = append(st.Configs, rc)
		}
		return nil
	}
	if infos := s.b.Topics([]string{rt.Topic}); len(infos) == 1 && infos[0].Err == nil {
		t := infos[0]
		st.TopicID = t.ID
		st.NumPartitions = int32(len(t.Partitions))
		if len(t.Partitions) > 0 {
			st.ReplicationFactor = int16(len(t.Partitions[0].Replicas))
		}
	}
	entries, err := s.b.TopicConfigs(rt.Topic)
	if err != nil {
		// Created; only the description failed.
		st.ConfigErrorCode = s.code(err)
		return nil
	}
	for _, e := range entries {
		rc := kmsg.NewCreateTopicsResponseTopicConfig()
		rc.Name, rc.ReadOnly, rc.IsSensitive = e.Name, e.ReadOnly, e.Sensitive
		if !e.Sensitive {
			rc.Value = e.Value
		}
		rc.Source = int8(configSource(e))
		st.Configs = append(st.Configs, rc)
	}
	return nil
}
