package rpc

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListGroups: v0–4 (served with a GroupBroker).
//
// Lists the groups of the coordinator: those held in memory with their
// protocol type and state, and the groups that only have committed
// offsets (GroupBroker.OffsetGroups) as Empty with protocol type "". v4
// filters by state (case-insensitively). Another node than the
// coordinator lists no group (a client asks every broker and merges);
// COORDINATOR_NOT_AVAILABLE while no coordinator is elected.
func (s *Server) listGroups(_ *call, req *kmsg.ListGroupsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	if e := s.coordinating(); e != nil {
		switch {
		case e != kerr.NotCoordinator:
			resp.ErrorCode = e.Code
		case s.gb.Coordinator() < 0:
			resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		}
		return resp, nil
	}
	keep := func(state string) bool {
		if req.Version < 4 || len(req.StatesFilter) == 0 {
			return true
		}
		for _, f := range req.StatesFilter {
			if strings.EqualFold(f, state) {
				return true
			}
		}
		return false
	}
	held := make(map[string]bool)
	for _, g := range s.groups.list() {
		held[g.name] = true
		if !keep(g.state.String()) {
			continue
		}
		rg := kmsg.NewListGroupsResponseGroup()
		rg.Group, rg.ProtocolType, rg.GroupState = g.name, g.protocolType, g.state.String()
		resp.Groups = append(resp.Groups, rg)
	}
	if keep(groupEmpty.String()) {
		for _, name := range s.gb.OffsetGroups() {
			if held[name] {
				continue
			}
			rg := kmsg.NewListGroupsResponseGroup()
			rg.Group, rg.GroupState = name, groupEmpty.String()
			resp.Groups = append(resp.Groups, rg)
		}
	}
	return resp, nil
}
