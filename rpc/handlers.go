package rpc

import (
	"context"
	"errors"
	"sort"

	"github.com/raftlog/raftlog/log"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handler serves one API key over a range of versions.
type handler struct {
	min, max int16
	serve    func(s *Server, c *call, req kmsg.Request) (kmsg.Response, error)
}

const apiVersionsKey = 18

// handlers is the one table of what the server serves: dispatch uses it
// and ApiVersions advertises it. Filled in init because the ApiVersions
// handler reads it.
var handlers map[int16]handler

func init() {
	handlers = map[int16]handler{
		0:              reg(3, 11, (*Server).produce),
		1:              reg(4, 12, (*Server).fetch),
		2:              reg(1, 7, (*Server).listOffsets),
		3:              reg(0, 12, (*Server).metadata),
		apiVersionsKey: reg(0, 4, (*Server).apiVersions),
		19:             reg(0, 7, (*Server).createTopics),
		20:             reg(0, 6, (*Server).deleteTopics),
		21:             reg(0, 2, (*Server).deleteRecords),
		22:             reg(0, 4, (*Server).initProducerID),
		23:             reg(2, 4, (*Server).offsetForLeaderEpoch),
		32:             reg(0, 4, (*Server).describeConfigs),
		37:             reg(0, 3, (*Server).createPartitions),
		44:             reg(0, 1, (*Server).incrementalAlterConfigs),
		60:             reg(0, 1, (*Server).describeCluster),
	}
}

// reg adapts a handler of a concrete request type.
func reg[R kmsg.Request](min, max int16, fn func(*Server, *call, R) (kmsg.Response, error)) handler {
	return handler{min: min, max: max, serve: func(s *Server, c *call, req kmsg.Request) (kmsg.Response, error) {
		return fn(s, c, req.(R))
	}}
}

// apiKeys is the ApiVersions list, by key.
func apiKeys() []kmsg.ApiVersionsResponseApiKey {
	keys := make([]kmsg.ApiVersionsResponseApiKey, 0, len(handlers))
	for k, h := range handlers {
		keys = append(keys, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MinVersion: h.min, MaxVersion: h.max})
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].ApiKey < keys[j].ApiKey })
	return keys
}

// errCode is the Kafka error code a client must see for err: the code of
// a wrapped *kerr.Error, CORRUPT_MESSAGE, MESSAGE_TOO_LARGE and
// OFFSET_OUT_OF_RANGE for the log's errors, REQUEST_TIMED_OUT for an
// expired (or, at shutdown, cancelled) context, UNKNOWN_SERVER_ERROR for
// anything else. 0 for nil. Handlers use (*Server).code, which also logs
// the unexpected errors.
func errCode(err error) int16 {
	code, _ := mapErr(err)
	return code
}

// code is errCode, logging at debug an error answered as
// UNKNOWN_SERVER_ERROR.
func (s *Server) code(err error) int16 {
	code, known := mapErr(err)
	if !known {
		s.logger.Debug("unexpected error answered as UNKNOWN_SERVER_ERROR", "error", err)
	}
	return code
}

// mapErr maps err and reports whether it was an error it knows.
func mapErr(err error) (int16, bool) {
	var ke *kerr.Error
	switch {
	case err == nil:
		return 0, true
	case errors.As(err, &ke):
		return ke.Code, true
	case errors.Is(err, log.ErrCorruptBatch):
		return kerr.CorruptMessage.Code, true
	case errors.Is(err, log.ErrBatchTooLarge):
		return kerr.MessageTooLarge.Code, true
	case errors.Is(err, log.ErrOffsetOutOfRange):
		return kerr.OffsetOutOfRange.Code, true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return kerr.RequestTimedOut.Code, true
	}
	return kerr.UnknownServerError.Code, false
}

// errMessage is the error message of a response field: nil without error.
func errMessage(err error) *string {
	if err == nil {
		return nil
	}
	m := err.Error()
	return &m
}

// checkEpoch validates a request's current leader epoch against the
// partition's (KIP-320): -1 skips the check.
func checkEpoch(p Partition, current int32) error {
	if current < 0 {
		return nil
	}
	switch epoch := p.LeaderEpoch(); {
	case current < epoch:
		return kerr.FencedLeaderEpoch
	case current > epoch:
		return kerr.UnknownLeaderEpoch
	}
	return nil
}
