package rpc

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeCluster: v0–1.
//
// Answers the cluster id, the controller id and the brokers: as Metadata
// lists them for every topic (the live ones, and those not live that the
// controller id or a topic's partitions name, when LookupBroker knows
// them), so that every broker a Metadata answer lists is here too. v1's
// endpoint type 1 (brokers) is served; 2 (controllers) is
// UNSUPPORTED_ENDPOINT_TYPE, as a Kafka broker answers. Cluster authorized
// operations are not computed ("not requested", -2147483648).
func (s *Server) describeCluster(_ *call, req *kmsg.DescribeClusterRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	if req.Version >= 1 {
		resp.EndpointType = req.EndpointType
		if req.EndpointType != 1 {
			resp.ErrorCode = kerr.UnsupportedEndpointType.Code
			return resp, nil
		}
	}
	resp.ClusterID = s.b.ClusterID()
	bs := s.newBrokerSet()
	resp.ControllerID = bs.nameOr(s.b.ControllerID())
	for _, t := range s.b.Topics(nil) {
		for _, p := range t.Partitions {
			bs.name(p.Leader)
			bs.nameAll(p.Replicas)
		}
	}
	for _, b := range bs.list {
		rb := kmsg.NewDescribeClusterResponseBroker()
		rb.NodeID, rb.Host, rb.Port, rb.Rack = b.NodeID, b.Host, b.Port, b.Rack
		resp.Brokers = append(resp.Brokers, rb)
	}
	return resp, nil
}
