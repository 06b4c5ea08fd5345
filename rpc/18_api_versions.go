package rpc

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ApiVersions: v0–4.
//
// Answers the version range of every API key in the handler table, sorted
// by key; the group APIs only when the Broker is a GroupBroker. No
// features are advertised (no transactions, no KIP-848 groups).
//
// A request at a version outside 0–4 never reaches this function: handle
// answers it, without decoding its body, with a v0 response carrying
// UNSUPPORTED_VERSION and the full list, as Kafka does, so the client can
// retry at a version it shares with us. The response header is never
// flexible, whatever the version.
//
// v3+ carries the client software name and version; as Kafka, values not
// matching [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])? are answered with
// INVALID_REQUEST.
func (s *Server) apiVersions(_ *call, req *kmsg.ApiVersionsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	if req.Version >= 3 && (!validSoftware(req.ClientSoftwareName) || !validSoftware(req.ClientSoftwareVersion)) {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp, nil
	}
	resp.ApiKeys = s.apiKeys()
	return resp, nil
}

// validSoftware is Kafka's check of a client software name or version.
func validSoftware(v string) bool {
	alnum := func(c byte) bool {
		return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
	}
	if v == "" || !alnum(v[0]) || !alnum(v[len(v)-1]) {
		return false
	}
	for i := 1; i < len(v)-1; i++ {
		if c := v[i]; !alnum(c) && c != '-' && c != '.' {
			return false
		}
	}
	return true
}
