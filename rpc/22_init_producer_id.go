package rpc

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// InitProducerId: v0–4.
//
// Hands out a producer id and epoch with Broker.InitProducerID, for
// idempotent producers (null transactional id) and, should the broker
// support them, transactional ones: the broker decides (it may answer
// NOT_COORDINATOR, TRANSACTIONAL_ID_AUTHORIZATION_FAILED...). The
// producer id and epoch a v3+ client sends to bump its epoch (KIP-360,
// after a sequence error or a timed-out batch) are passed on; v0–2
// requests carry none and pass -1, -1. The transaction timeout is
// ignored. Errors answer id -1, epoch -1.
func (s *Server) initProducerID(c *call, req *kmsg.InitProducerIDRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	ctx, cancel := timeoutCtx(c.ctx, 0)
	defer cancel()
	pid, pepoch := int64(-1), int16(-1)
	if req.Version >= 3 {
		pid, pepoch = req.ProducerID, req.ProducerEpoch
	}
	id, epoch, err := s.b.InitProducerID(ctx, req.TransactionalID, pid, pepoch)
	if err != nil {
		resp.ErrorCode = s.code(err)
		resp.ProducerID, resp.ProducerEpoch = -1, -1
		return resp, nil
	}
	resp.ProducerID, resp.ProducerEpoch = id, epoch
	return resp, nil
}
