package rpc

import (
	"context"
	"errors"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handler serves one API key over a range of versions.
type handler struct {
	min, max int16
	// group: a group API, served and advertised only when the Broker is
	// a GroupBroker.
	group bool
	serve func(s *Server, c *call, req kmsg.Request) (kmsg.Response, error)
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
		8:              regGroup(0, 8, (*Server).offsetCommit),
		9:              regGroup(0, 8, (*Server).offsetFetch),
		10:             regGroup(0, 4, (*Server).findCoordinator),
		11:             regGroup(0, 9, (*Server).joinGroup),
		12:             regGroup(0, 4, (*Server).heartbeat),
		13:             regGroup(0, 5, (*Server).leaveGroup),
		14:             regGroup(0, 5, (*Server).syncGroup),
		15:             regGroup(0, 5, (*Server).describeGroups),
		16:             regGroup(0, 4, (*Server).listGroups),
		apiVersionsKey: reg(0, 4, (*Server).apiVersions),
		19:             reg(0, 7, (*Server).createTopics),
		20:             reg(0, 6, (*Server).deleteTopics),
		21:             reg(0, 2, (*Server).deleteRecords),
		22:             reg(0, 4, (*Server).initProducerID),
		23:             reg(2, 4, (*Server).offsetForLeaderEpoch),
		32:             reg(0, 4, (*Server).describeConfigs),
		37:             reg(0, 3, (*Server).createPartitions),
		42:             regGroup(0, 2, (*Server).deleteGroups),
		44:             reg(0, 1, (*Server).incrementalAlterConfigs),
		45:             reg(0, 1, (*Server).alterPartitionReassignments),
		46:             reg(0, 0, (*Server).listPartitionReassignments),
		47:             regGroup(0, 0, (*Server).offsetDelete),
		60:             reg(0, 1, (*Server).describeCluster),
	}
}

// reg adapts a handler of a concrete request type.
func reg[R kmsg.Request](min, max int16, fn func(*Server, *call, R) (kmsg.Response, error)) handler {
	return handler{min: min, max: max, serve: func(s *Server, c *call, req kmsg.Request) (kmsg.Response, error) {
		return fn(s, c, req.(R))
	}}
}

// regGroup is reg for a group API.
func regGroup[R kmsg.Request](min, max int16, fn func(*Server, *call, R) (kmsg.Response, error)) handler {
	h := reg(min, max, fn)
	h.group = true
	return h
}

// apiKeys is the ApiVersions list of this server, by key.
func (s *Server) apiKeys() []kmsg.ApiVersionsResponseApiKey {
	return apiKeys(s.groups != nil)
}

// apiKeys is the ApiVersions list, by key, with or without the group APIs.
func apiKeys(groups bool) []kmsg.ApiVersionsResponseApiKey {
	keys := make([]kmsg.ApiVersionsResponseApiKey, 0, len(handlers))
	for k, h := range handlers {
		if h.group && !groups {
			continue
		}
		keys = append(keys, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MinVersion: h.min, MaxVersion: h.max})
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].ApiKey < keys[j].ApiKey })
	return keys
}

// errCode is the Kafka error code a client must see for err: the code of
// a wrapped *kerr.Error, REQUEST_TIMED_OUT for an expired (or, at
// shutdown, cancelled) context of a request, UNKNOWN_SERVER_ERROR for
// anything else; 0 for nil. A Broker maps its own errors to Kafka codes
// (the node does so in one place) before they reach the handlers.
// Handlers use (*Server).code, which also logs the unexpected errors.
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
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return kerr.RequestTimedOut.Code, true
	}
	return kerr.UnknownServerError.Code, false
}

// errMessage is the error message of a response field: nil without error.
// The text of a Kafka error code the error wraps is left out where it
// leads the message (clients print the code's name and description
// before the message themselves): what remains is the detail.
func errMessage(err error) *string {
	if err == nil {
		return nil
	}
	m := err.Error()
	var ke *kerr.Error
	if errors.As(err, &ke) {
		m = strings.TrimPrefix(m, ke.Error())
		m = strings.TrimPrefix(m, ": ")
		if m == "" {
			m = ke.Description
		}
	}
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

// coordinating reports whether this node coordinates groups now; when it
// does not (the role moved away, or no coordinator is elected) it drops
// the groups held in memory and returns kerr.NotCoordinator: the clients
// find the coordinator again. A node that just took the role loads the
// stored groups first (kerr.CoordinatorLoadInProgress until it can).
func (s *Server) coordinating() *kerr.Error {
	if s.gb.Coordinator() != s.b.NodeID() {
		s.groups.reset()
		return kerr.NotCoordinator
	}
	return s.groups.load()
}

// kcode is the code of a coordinator error, 0 for nil.
func kcode(e *kerr.Error) int16 {
	if e == nil {
		return 0
	}
	return e.Code
}
