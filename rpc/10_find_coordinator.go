package rpc

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// FindCoordinator: v0–4 (served with a GroupBroker).
//
// Key type 0 (group; the only one before v1) answers, for every group, the
// node of GroupBroker.Coordinator and its advertised address:
// COORDINATOR_NOT_AVAILABLE while none is elected or when it is neither
// among the live brokers nor known to LookupBroker. Key type 1 (transaction) is COORDINATOR_NOT_AVAILABLE:
// there are no transactions. Other types are INVALID_REQUEST. v4 answers
// every key of the batch. Errors answer node -1, host "", port -1, and
// (v1+) a message. A node that no longer coordinates drops its groups.
func (s *Server) findCoordinator(_ *call, req *kmsg.FindCoordinatorRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	node, host, port, err := s.coordinatorAddr(req.CoordinatorType)
	code, msg := s.code(err), errMessage(err)
	if req.Version >= 4 {
		for _, key := range req.CoordinatorKeys {
			rc := kmsg.NewFindCoordinatorResponseCoordinator()
			rc.Key, rc.NodeID, rc.Host, rc.Port = key, node, host, port
			rc.ErrorCode, rc.ErrorMessage = code, msg
			resp.Coordinators = append(resp.Coordinators, rc)
		}
		return resp, nil
	}
	resp.NodeID, resp.Host, resp.Port = node, host, port
	resp.ErrorCode = code
	if req.Version >= 1 {
		resp.ErrorMessage = msg
	}
	return resp, nil
}

// coordinatorAddr finds the coordinator of a key type.
func (s *Server) coordinatorAddr(keyType int8) (node int32, host string, port int32, err error) {
	switch keyType {
	case 0:
	case 1:
		return -1, "", -1, fmt.Errorf("%w: no transaction coordinator (transactions are not supported)", kerr.CoordinatorNotAvailable)
	default:
		return -1, "", -1, fmt.Errorf("%w: unknown coordinator type %d", kerr.InvalidRequest, keyType)
	}
	id := s.gb.Coordinator()
	if id != s.b.NodeID() {
		s.groups.reset()
	}
	if id < 0 {
		return -1, "", -1, fmt.Errorf("%w: no group coordinator elected yet", kerr.CoordinatorNotAvailable)
	}
	for _, b := range s.b.Brokers() {
		if b.NodeID == id {
			return b.NodeID, b.Host, b.Port, nil
		}
	}
	if b, ok := s.b.LookupBroker(id); ok && b.NodeID == id {
		return b.NodeID, b.Host, b.Port, nil
	}
	return -1, "", -1, fmt.Errorf("%w: group coordinator %d is neither a live broker nor known", kerr.CoordinatorNotAvailable, id)
}
