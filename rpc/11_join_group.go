package rpc

import (
	"bytes"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// errClientGone ends a request that waits for the group (JoinGroup,
// SyncGroup) when its client disconnected or the server closes: the
// connection is closed without an answer.
var errClientGone = errors.New("client gone while waiting for the group")

// JoinGroup: v0–9 (served with a GroupBroker).
//
// The classic group protocol (see groups.go): v4+ dynamic members joining
// without a member id get MEMBER_ID_REQUIRED with their id, and join again
// with it; v5+ static members (an instance id) never do. The answer waits
// until the join phase completes: every member rejoined, or the largest
// rebalance timeout of the members passed (v0 has none: the session
// timeout is used). The leader, the first member to join, gets every
// member's metadata for the selected protocol. v9 may tell a restarted
// static leader to skip the assignment (KIP-814). v8's reason is logged.
// The session timeout must be within the coordinator's bounds
// (INVALID_SESSION_TIMEOUT). Not the coordinator: NOT_COORDINATOR.
func (s *Server) joinGroup(c *call, req *kmsg.JoinGroupRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.MemberID = req.MemberID
	if e := s.coordinating(); e != nil {
		resp.ErrorCode = e.Code
		return resp, nil
	}
	rebalance := req.RebalanceTimeoutMillis
	if req.Version == 0 {
		rebalance = req.SessionTimeoutMillis
	}
	p := joinParams{
		group:            req.Group,
		memberID:         req.MemberID,
		instanceID:       req.InstanceID,
		clientID:         c.clientID,
		clientHost:       c.host,
		sessionTimeout:   time.Duration(req.SessionTimeoutMillis) * time.Millisecond,
		rebalanceTimeout: time.Duration(rebalance) * time.Millisecond,
		protocolType:     req.ProtocolType,
		requireKnownID:   req.Version >= 4,
		skipAssignment:   req.Version >= 9,
	}
	for _, pr := range req.Protocols {
		p.protocols = append(p.protocols, groupProtocol{name: pr.Name, metadata: bytes.Clone(pr.Metadata)})
	}
	if req.Reason != nil && s.logger.IsDebug() {
		s.logger.Debug("join group", "group", req.Group, "member_id", req.MemberID, "client_id", c.clientID, "reason", *req.Reason)
	}
	r, wait := s.groups.join(p)
	if wait != nil {
		select {
		case r = <-wait:
		case <-c.poll.Done():
			return nil, errClientGone
		}
	}
	resp.ErrorCode = kcode(r.err)
	resp.MemberID = r.memberID
	resp.Generation = r.generation
	resp.ProtocolType = r.protocolType
	resp.Protocol = r.protocol
	resp.LeaderID = r.leader
	resp.SkipAssignment = r.skipAssignment
	for _, m := range r.members {
		rm := kmsg.NewJoinGroupResponseMember()
		rm.MemberID, rm.InstanceID, rm.ProtocolMetadata = m.memberID, m.instanceID, m.metadata
		resp.Members = append(resp.Members, rm)
	}
	return resp, nil
}
