package rpc

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// LeaveGroup: v0–5 (served with a GroupBroker).
//
// v0–2 remove one member (its error is the answer's); v3+ a batch, each
// by member id or by instance id (static members, KIP-345: what admin
// tools use), each with its own error (UNKNOWN_MEMBER_ID,
// FENCED_INSTANCE_ID). The group rebalances without them. v5's reasons are
// not kept. Not the coordinator: NOT_COORDINATOR for the whole request.
func (s *Server) leaveGroup(_ *call, req *kmsg.LeaveGroupRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	if e := s.coordinating(); e != nil {
		resp.ErrorCode = e.Code
		return resp, nil
	}
	var ms []leaveMember
	if req.Version < 3 {
		ms = []leaveMember{{memberID: req.MemberID}}
	} else {
		for _, m := range req.Members {
			ms = append(ms, leaveMember{memberID: m.MemberID, instanceID: m.InstanceID})
		}
	}
	gerr, errs := s.groups.leave(req.Group, ms)
	if gerr != nil {
		resp.ErrorCode = gerr.Code
		return resp, nil
	}
	if req.Version < 3 {
		resp.ErrorCode = kcode(errs[0])
		return resp, nil
	}
	for i, m := range req.Members {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID, rm.InstanceID, rm.ErrorCode = m.MemberID, m.InstanceID, kcode(errs[i])
		resp.Members = append(resp.Members, rm)
	}
	return resp, nil
}
