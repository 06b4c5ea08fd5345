package rpc

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// IncrementalAlterConfigs: v0–1.
//
// Topic resources: the changes (op 0 set, 1 delete, 2 append, 3 subtract)
// go to Broker.AlterTopicConfigs as one call per resource, which
// validates them (INVALID_CONFIG, UNKNOWN_TOPIC_OR_PARTITION...) and only
// checks with validateOnly. An op above 3 or a config named twice in a
// resource is INVALID_REQUEST; so is a resource named twice in the
// request (each time).
//
// Broker (and broker logger) resources naming "" or this node: no change
// is a no-op success; changes are INVALID_REQUEST (the broker's settings
// are not alterable through Kafka). Other resource types are
// INVALID_REQUEST.
func (s *Server) incrementalAlterConfigs(c *call, req *kmsg.IncrementalAlterConfigsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	type key struct {
		t    kmsg.ConfigResourceType
		name string
	}
	count := make(map[key]int, len(req.Resources))
	for _, rr := range req.Resources {
		count[key{rr.ResourceType, rr.ResourceName}]++
	}
	for _, rr := range req.Resources {
		sr := kmsg.NewIncrementalAlterConfigsResponseResource()
		sr.ResourceType, sr.ResourceName = rr.ResourceType, rr.ResourceName
		err := func() error {
			if count[key{rr.ResourceType, rr.ResourceName}] > 1 {
				return fmt.Errorf("%w: resource %q is named more than once", kerr.InvalidRequest, rr.ResourceName)
			}
			seen := make(map[string]bool, len(rr.Configs))
			changes := make([]ConfigChange, 0, len(rr.Configs))
			for _, rc := range rr.Configs {
				if rc.Op < 0 || rc.Op > kmsg.IncrementalAlterConfigOpSubtract {
					return fmt.Errorf("%w: config %q: unknown op %d", kerr.InvalidRequest, rc.Name, rc.Op)
				}
				if seen[rc.Name] {
					return fmt.Errorf("%w: config %q is named more than once", kerr.InvalidRequest, rc.Name)
				}
				seen[rc.Name] = true
				changes = append(changes, ConfigChange{Name: rc.Name, Op: int8(rc.Op), Value: rc.Value})
			}
			switch rr.ResourceType {
			case kmsg.ConfigResourceTypeTopic:
				ctx, cancel := timeoutCtx(c.ctx, 0)
				defer cancel()
				if err := s.b.AlterTopicConfigs(ctx, rr.ResourceName, changes, req.ValidateOnly); err != nil {
					return err
				}
				if !req.ValidateOnly {
					s.logger.Info("altered topic configs", "topic", rr.ResourceName, "changes", len(changes), "client_id", c.clientID)
				}
				return nil
			case kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeBrokerLogger:
				if err := s.checkBrokerResource(rr.ResourceName); err != nil {
					return err
				}
				if len(changes) > 0 {
					return fmt.Errorf("%w: broker configs are not alterable", kerr.InvalidRequest)
				}
				return nil
			}
			return fmt.Errorf("%w: resource type %d is not supported", kerr.InvalidRequest, rr.ResourceType)
		}()
		sr.ErrorCode = s.code(err)
		sr.ErrorMessage = errMessage(err)
		resp.Resources = append(resp.Resources, sr)
	}
	return resp, nil
}
