package rpc

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Observer is told of each request the server serves (see WithObserver).
//
// ObserveRequest is called once per request, after the response is
// written (or was due and could not be), one call at a time per
// connection under its lock, from whichever goroutine wrote the answer:
// it must be quick and must not block, since the connection's next
// answers (and the reading of its requests) wait for it, and it must not
// keep o's Request or Response past the call. Requests that close the
// connection instead of being answered (one that does not decode, an
// unknown API key, an unsupported version of anything but ApiVersions, a
// failed acks=0 Produce) are not observed.
type Observer interface {
	ObserveRequest(o Observation)
}

// WithObserver sets an observer of every request served (default: none).
func WithObserver(o Observer) Option {
	return func(s *Server) { s.observer = o }
}

// Observation is one request served. It is passed by value and holds
// nothing allocated for it.
type Observation struct {
	Key     int16 // API key
	Version int16
	// RequestBytes and ResponseBytes are the sizes on the wire, the size
	// prefix and header included; ResponseBytes is 0 when nothing is
	// answered (acks=0 Produce).
	RequestBytes  int
	ResponseBytes int
	// Duration runs from when the request was read off the connection
	// (it may then wait behind the connection's earlier requests) to when
	// its response was written; a Fetch long poll is in it.
	Duration time.Duration
	// Failed reports whether the response carries a non-zero error code,
	// at its top or in any of its entries (topics, partitions, groups,
	// members, resources).
	Failed bool
	// Request is the decoded request, nil for an ApiVersions request of a
	// version not served (answered UNSUPPORTED_VERSION undecoded).
	Request kmsg.Request
	// Response is the response, nil when nothing is answered.
	Response kmsg.Response
}

// EachError calls fn with each non-zero error code of the response, in
// response order: the top-level code, then one per entry carrying one (a
// Produce or Fetch failing on three partitions gives three). fn is not
// retained.
func (o Observation) EachError(fn func(code int16)) {
	if o.Response != nil {
		eachErrorCode(o.Response, func(code int16) {
			if code != 0 {
				fn(code)
			}
		})
	}
}

// observe tells the observer of the request c served.
func (s *Server) observe(c *call, reqBytes, respBytes int) {
	o := Observation{
		Key: c.key, Version: c.version,
		RequestBytes: reqBytes, ResponseBytes: respBytes,
		Duration: time.Since(c.start),
		Request:  c.req, Response: c.resp,
	}
	if c.resp != nil {
		eachErrorCode(c.resp, func(code int16) { o.Failed = o.Failed || code != 0 })
	}
	s.observer.ObserveRequest(o)
}

// eachErrorCode calls fn with every error code field of resp, zero or not,
// and reports whether it knows resp's type (every response the handlers
// table serves: a test holds it to that).
func eachErrorCode(resp kmsg.Response, fn func(int16)) bool {
	switch r := resp.(type) {
	case *kmsg.ProduceResponse:
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				fn(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
	case *kmsg.FetchResponse:
		fn(r.ErrorCode)
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				fn(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
	case *kmsg.ListOffsetsResponse:
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				fn(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
	case *kmsg.MetadataResponse:
		fn(r.ErrorCode) // v13+
		for i := range r.Topics {
			fn(r.Topics[i].ErrorCode)
			for j := range r.Topics[i].Partitions {
				fn(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
	case *kmsg.OffsetCommitResponse:
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				fn(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
	case *kmsg.OffsetFetchResponse:
		fn(r.ErrorCode)
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				fn(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
		for i := range r.Groups {
			g := &r.Groups[i]
			fn(g.ErrorCode)
			for j := range g.Topics {
				for k := range g.Topics[j].Partitions {
					fn(g.Topics[j].Partitions[k].ErrorCode)
				}
			}
		}
	case *kmsg.FindCoordinatorResponse:
		fn(r.ErrorCode)
		for i := range r.Coordinators {
			fn(r.Coordinators[i].ErrorCode)
		}
	case *kmsg.JoinGroupResponse:
		fn(r.ErrorCode)
	case *kmsg.HeartbeatResponse:
		fn(r.ErrorCode)
	case *kmsg.LeaveGroupResponse:
		fn(r.ErrorCode)
		for i := range r.Members {
			fn(r.Members[i].ErrorCode)
		}
	case *kmsg.SyncGroupResponse:
		fn(r.ErrorCode)
	case *kmsg.DescribeGroupsResponse:
		for i := range r.Groups {
			fn(r.Groups[i].ErrorCode)
		}
	case *kmsg.ListGroupsResponse:
		fn(r.ErrorCode)
	case *kmsg.ApiVersionsResponse:
		fn(r.ErrorCode)
	case *kmsg.CreateTopicsResponse:
		for i := range r.Topics {
			fn(r.Topics[i].ErrorCode)
		}
	case *kmsg.DeleteTopicsResponse:
		for i := range r.Topics {
			fn(r.Topics[i].ErrorCode)
		}
	case *kmsg.DeleteRecordsResponse:
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				fn(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
	case *kmsg.InitProducerIDResponse:
		fn(r.ErrorCode)
	case *kmsg.OffsetForLeaderEpochResponse:
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				fn(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
	case *kmsg.DescribeConfigsResponse:
		for i := range r.Resources {
			fn(r.Resources[i].ErrorCode)
		}
	case *kmsg.CreatePartitionsResponse:
		for i := range r.Topics {
			fn(r.Topics[i].ErrorCode)
		}
	case *kmsg.DeleteGroupsResponse:
		for i := range r.Groups {
			fn(r.Groups[i].ErrorCode)
		}
	case *kmsg.IncrementalAlterConfigsResponse:
		for i := range r.Resources {
			fn(r.Resources[i].ErrorCode)
		}
	case *kmsg.AlterPartitionAssignmentsResponse:
		fn(r.ErrorCode)
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				fn(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
	case *kmsg.ListPartitionReassignmentsResponse:
		fn(r.ErrorCode)
	case *kmsg.OffsetDeleteResponse:
		fn(r.ErrorCode)
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				fn(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
	case *kmsg.DescribeClusterResponse:
		fn(r.ErrorCode)
	default:
		return false
	}
	return true
}
