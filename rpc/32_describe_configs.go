package rpc

import (
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeConfigs: v0–4.
//
// Topic resources: Broker.TopicConfigs (every key the broker knows,
// defaults included), filtered by the requested names when there are
// some. Each entry has its value (null when sensitive), read-only flag,
// default flag (v0) or source (v1+: DEFAULT_CONFIG for defaults,
// DYNAMIC_TOPIC_CONFIG for overrides), sensitive flag and, when synonyms
// are asked for (v1+), itself as its one synonym. Config types and
// documentation (v3+) are not known: UNKNOWN and null.
//
// Broker (and broker logger) resources, named "" or this node's id: an
// empty list, no error (the broker's settings are static, not
// Kafka-visible configs); another node's id is INVALID_REQUEST. Other
// resource types are INVALID_REQUEST.
func (s *Server) describeConfigs(_ *call, req *kmsg.DescribeConfigsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	for _, rr := range req.Resources {
		sr := kmsg.NewDescribeConfigsResponseResource()
		sr.ResourceType, sr.ResourceName = rr.ResourceType, rr.ResourceName
		var err error
		switch rr.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			sr.Configs, err = s.describeTopicConfigs(req, rr)
		case kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeBrokerLogger:
			err = s.checkBrokerResource(rr.ResourceName)
		default:
			err = fmt.Errorf("%w: resource type %d is not supported", kerr.InvalidRequest, rr.ResourceType)
		}
		if err != nil {
			sr.ErrorCode = s.code(err)
			sr.ErrorMessage = errMessage(err)
			sr.Configs = nil
		}
		resp.Resources = append(resp.Resources, sr)
	}
	return resp, nil
}

func (s *Server) describeTopicConfigs(req *kmsg.DescribeConfigsRequest, rr kmsg.DescribeConfigsRequestResource) ([]kmsg.DescribeConfigsResponseResourceConfig, error) {
	entries, err := s.b.TopicConfigs(rr.ResourceName)
	if err != nil {
		return nil, err
	}
	var want map[string]bool
	if rr.ConfigNames != nil {
		want = make(map[string]bool, len(rr.ConfigNames))
		for _, n := range rr.ConfigNames {
			want[n] = true
		}
	}
	out := []kmsg.DescribeConfigsResponseResourceConfig{}
	for _, e := range entries {
		if want != nil && !want[e.Name] {
			continue
		}
		rc := kmsg.NewDescribeConfigsResponseResourceConfig()
		rc.Name, rc.ReadOnly, rc.IsDefault, rc.IsSensitive = e.Name, e.ReadOnly, e.IsDefault, e.Sensitive
		if !e.Sensitive {
			rc.Value = e.Value
		}
		rc.Source = configSource(e)
		if req.IncludeSynonyms {
			syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
			syn.Name, syn.Value, syn.Source = rc.Name, rc.Value, rc.Source
			rc.ConfigSynonyms = append(rc.ConfigSynonyms, syn)
		}
		out = append(out, rc)
	}
	return out, nil
}

// checkBrokerResource accepts a broker resource naming this node or none.
func (s *Server) checkBrokerResource(name string) error {
	if name == "" || name == strconv.Itoa(int(s.b.NodeID())) {
		return nil
	}
	return fmt.Errorf("%w: broker resource %q is not this broker (%d)", kerr.InvalidRequest, name, s.b.NodeID())
}

func configSource(e ConfigEntry) kmsg.ConfigSource {
	if e.IsDefault {
		return kmsg.ConfigSourceDefaultConfig
	}
	return kmsg.ConfigSourceDynamicTopicConfig
}
