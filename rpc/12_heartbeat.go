package rpc

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Heartbeat: v0–4 (served with a GroupBroker).
//
// Restarts the member's session timer. REBALANCE_IN_PROGRESS while the
// group prepares a rebalance (the member must rejoin), ILLEGAL_GENERATION
// for another generation, UNKNOWN_MEMBER_ID for a member the group does not
// have, FENCED_INSTANCE_ID (v3+) for an instance id now held by another
// member id. Not the coordinator: NOT_COORDINATOR.
func (s *Server) heartbeat(_ *call, req *kmsg.HeartbeatRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	if e := s.coordinating(); e != nil {
		resp.ErrorCode = e.Code
		return resp, nil
	}
	resp.ErrorCode = kcode(s.groups.heartbeat(req.Group, req.MemberID, req.InstanceID, req.Generation))
	return resp, nil
}
