package rpc

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DeleteGroups: v0–2 (served with a GroupBroker).
//
// Deletes each group without members, its committed offsets included
// (GroupBroker.DeleteOffsets): NON_EMPTY_GROUP while it has members,
// GROUP_ID_NOT_FOUND when it has neither members nor offsets. Not the
// coordinator: NOT_COORDINATOR for every group.
func (s *Server) deleteGroups(c *call, req *kmsg.DeleteGroupsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	var coordErr error
	if e := s.coordinating(); e != nil {
		coordErr = e
	}
	ctx, cancel := timeoutCtx(c.ctx, 0)
	defer cancel()
	for _, name := range req.Groups {
		sg := kmsg.NewDeleteGroupsResponseGroup()
		sg.Group = name
		err := coordErr
		if err == nil {
			err = s.deleteGroup(ctx, name)
		}
		if err == nil {
			s.logger.Info("deleted consumer group", "group", name, "client_id", c.clientID)
		}
		sg.ErrorCode = s.code(err)
		resp.Groups = append(resp.Groups, sg)
	}
	return resp, nil
}

func (s *Server) deleteGroup(ctx context.Context, name string) error {
	found, e := s.groups.deleteGroup(name)
	if e != nil {
		return e
	}
	if !found {
		offsets, err := s.gb.FetchOffsets(name, nil)
		if err != nil {
			return err
		}
		if len(offsets) == 0 {
			return fmt.Errorf("%w: %q", kerr.GroupIDNotFound, name)
		}
	}
	return s.gb.DeleteOffsets(ctx, name, nil)
}
