package rpc

import (
	"bytes"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// SyncGroup: v0–5 (served with a GroupBroker).
//
// After the join phase the leader sends the assignment of every member;
// each member's SyncGroup waits for it (at most the rebalance timeout:
// members that do not sync by then are removed and the group rebalances)
// and answers the member's part. A "consumer" member the leader assigned
// nothing gets an empty ConsumerMemberAssignment rather than no bytes. In
// a Stable group the current assignment is answered at once.
// REBALANCE_IN_PROGRESS while a rebalance prepares (or when one starts
// while waiting), ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
// FENCED_INSTANCE_ID (v3+), and INCONSISTENT_GROUP_PROTOCOL when v5's
// protocol type or name differ from the group's. v5 answers them. Not the
// coordinator: NOT_COORDINATOR.
func (s *Server) syncGroup(c *call, req *kmsg.SyncGroupRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	if e := s.coordinating(); e != nil {
		resp.ErrorCode = e.Code
		return resp, nil
	}
	p := syncParams{
		group:      req.Group,
		memberID:   req.MemberID,
		instanceID: req.InstanceID,
		generation: req.Generation,
	}
	if req.Version >= 5 {
		p.protocolType, p.protocol = req.ProtocolType, req.Protocol
	}
	if len(req.GroupAssignment) > 0 {
		p.assignments = make(map[string][]byte, len(req.GroupAssignment))
		for _, a := range req.GroupAssignment {
			p.assignments[a.MemberID] = bytes.Clone(a.MemberAssignment)
		}
	}
	r, wait := s.groups.sync(p)
	if wait != nil {
		select {
		case r = <-wait:
		case <-c.poll.Done():
			return nil, errClientGone
		}
	}
	resp.ErrorCode = kcode(r.err)
	resp.ProtocolType, resp.Protocol = r.protocolType, r.protocol
	resp.MemberAssignment = r.assignment
	return resp, nil
}
