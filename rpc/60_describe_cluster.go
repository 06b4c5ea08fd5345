package rpc

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeCluster: v0–1.
//
// Answers the cluster id, the controller id and the live brokers. v1's
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
	resp.ControllerID = s.b.ControllerID()
	for _, b := range s.b.Brokers() {
		rb := kmsg.NewDescribeClusterResponseBroker()
		rb.NodeID, rb.Host, rb.Port, rb.Rack = b.NodeID, b.Host, b.Port, b.Rack
		resp.Brokers = append(resp.Brokers, rb)
	}
	return resp, nil
}
