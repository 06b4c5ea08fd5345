package rpc

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeGroups: v0–5 (served with a GroupBroker).
//
// Describes each group: its state, protocol type and members (member and
// instance id, client id and host); the protocol and each member's
// metadata and assignment only when Stable, as Kafka. A group not held in
// memory is Empty when it has committed offsets (protocol type "") and
// Dead otherwise, without error (GROUP_ID_NOT_FOUND is v6+). Authorized
// operations (v3+) are not computed. Not the coordinator: NOT_COORDINATOR
// for every group.
func (s *Server) describeGroups(_ *call, req *kmsg.DescribeGroupsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	coordErr := s.coordinating()
	for _, name := range req.Groups {
		sg := kmsg.NewDescribeGroupsResponseGroup()
		sg.Group = name
		if coordErr != nil {
			sg.ErrorCode = coordErr.Code
			resp.Groups = append(resp.Groups, sg)
			continue
		}
		d, ok := s.groups.describe(name)
		if !ok {
			d.state = groupDead
			offsets, err := s.gb.FetchOffsets(name, nil)
			switch {
			case err != nil:
				sg.ErrorCode = s.code(err)
			case len(offsets) > 0:
				d.state = groupEmpty
			}
		}
		sg.State, sg.ProtocolType, sg.Protocol = d.state.String(), d.protocolType, d.protocol
		for _, m := range d.members {
			sm := kmsg.NewDescribeGroupsResponseGroupMember()
			sm.MemberID, sm.InstanceID, sm.ClientID, sm.ClientHost = m.memberID, m.instanceID, m.clientID, m.clientHost
			sm.ProtocolMetadata, sm.MemberAssignment = m.metadata, m.assignment
			sg.Members = append(sg.Members, sm)
		}
		resp.Groups = append(resp.Groups, sg)
	}
	return resp, nil
}
