package rpc

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// consumerMeta is a ConsumerMemberMetadata subscribing to topics.
func consumerMeta(topics ...string) []byte {
	m := kmsg.NewConsumerMemberMetadata()
	m.Topics = topics
	return m.AppendTo(nil)
}

// consumerAssignment is a ConsumerMemberAssignment of partitions of one
// topic.
func consumerAssignment(topic string, partitions ...int32) []byte {
	a := kmsg.NewConsumerMemberAssignment()
	a.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: topic, Partitions: partitions}}
	return a.AppendTo(nil)
}

// joinReq is a "consumer" JoinGroup with the range protocol on topic
// "all", 10s session and rebalance timeouts.
func joinReq(v int16, group, memberID string, instanceID *string) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.SetVersion(v)
	req.Group, req.MemberID, req.InstanceID = group, memberID, instanceID
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 10000, 10000
	req.ProtocolType = "consumer"
	req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: consumerMeta("all")}}
	return req
}

// rawJoinMember joins group alone (v4, asked for an id first) and returns
// the member id and generation.
func rawJoinMember(t *testing.T, r *rawConn, group string) (string, int32) {
	t.Helper()
	resp := r.roundTrip(joinReq(4, group, "", nil)).(*kmsg.JoinGroupResponse)
	if resp.ErrorCode != kerr.MemberIDRequired.Code || resp.MemberID == "" {
		t.Fatalf("first join of %s: %+v", group, resp)
	}
	resp = r.roundTrip(joinReq(4, group, resp.MemberID, nil)).(*kmsg.JoinGroupResponse)
	if resp.ErrorCode != 0 || resp.LeaderID != resp.MemberID || resp.Generation < 1 {
		t.Fatalf("join of %s: %+v", group, resp)
	}
	return resp.MemberID, resp.Generation
}

// rawSync syncs a leader giving itself partition 0 of "all".
func rawSync(t *testing.T, r *rawConn, group, memberID string, gen int32) *kmsg.SyncGroupResponse {
	t.Helper()
	req := kmsg.NewPtrSyncGroupRequest()
	req.SetVersion(5)
	req.Group, req.MemberID, req.Generation = group, memberID, gen
	req.ProtocolType, req.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
	req.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: memberID, MemberAssignment: consumerAssignment("all", 0)}}
	return r.roundTrip(req).(*kmsg.SyncGroupResponse)
}

// rawCommit commits offset of all/0 for group at generation -1.
func rawCommit(t *testing.T, r *rawConn, group string, offset int64) {
	t.Helper()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.SetVersion(8)
	req.Group = group
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Offset = offset
	req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "all", Partitions: []kmsg.OffsetCommitRequestTopicPartition{rp}}}
	resp := r.roundTrip(req).(*kmsg.OffsetCommitResponse)
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("commit %s: %v", group, kerr.ErrorForCode(code))
	}
}

type fixtureMember struct {
	id  string
	gen int32
}

// groupFixture prepares the groups the group APIs' minimal requests of
// TestEveryAdvertisedVersion act on.
type groupFixture struct {
	pending map[int16]string         // JoinGroup version → pending member id
	members map[string]fixtureMember // group → its one member
}

func newGroupFixture(t *testing.T, addr string) *groupFixture {
	t.Helper()
	r := dialRaw(t, addr)
	fx := &groupFixture{pending: make(map[int16]string), members: make(map[string]fixtureMember)}
	for v := handlers[11].min; v <= handlers[11].max; v++ {
		if v >= 4 {
			resp := r.roundTrip(joinReq(v, fmt.Sprintf("join-v%d", v), "", nil)).(*kmsg.JoinGroupResponse)
			if resp.ErrorCode != kerr.MemberIDRequired.Code {
				t.Fatalf("join v%d without id: %+v", v, resp)
			}
			fx.pending[v] = resp.MemberID
		}
	}
	for _, prefix := range []string{"hb", "leave", "sync"} {
		key := map[string]int16{"hb": 12, "leave": 13, "sync": 14}[prefix]
		for v := handlers[key].min; v <= handlers[key].max; v++ {
			g := fmt.Sprintf("%s-v%d", prefix, v)
			id, gen := rawJoinMember(t, r, g)
			fx.members[g] = fixtureMember{id, gen}
		}
	}
	for v := handlers[42].min; v <= handlers[42].max; v++ {
		rawCommit(t, r, fmt.Sprintf("del-v%d", v), 1)
	}
	rawCommit(t, r, "offdel", 1)
	return fx
}

// request is the minimal request of a group API (nil for other keys).
func (fx *groupFixture) request(t *testing.T, key, v int16) kmsg.Request {
	if h, ok := handlers[key]; !ok || !h.group {
		return nil
	}
	req := kmsg.RequestForKey(key)
	req.SetVersion(v)
	switch r := req.(type) {
	case *kmsg.OffsetCommitRequest:
		r.Group = fmt.Sprintf("commit-v%d", v)
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Offset, rp.LeaderEpoch, rp.Metadata = int64(v)+1, 1, kmsg.StringPtr(fmt.Sprint("v", v))
		r.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "all", Partitions: []kmsg.OffsetCommitRequestTopicPartition{rp}}}
	case *kmsg.OffsetFetchRequest:
		if v >= 8 {
			r.Groups = []kmsg.OffsetFetchRequestGroup{
				{Group: "commit-v8", Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "all", Partitions: []int32{0, 5}}}},
				{Group: "commit-v1"}, // every topic
			}
		} else {
			r.Group = fmt.Sprintf("commit-v%d", v)
			r.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "all", Partitions: []int32{0}}}
		}
	case *kmsg.FindCoordinatorRequest:
		r.CoordinatorKey = "g"
		r.CoordinatorKeys = []string{"g", "h"}
	case *kmsg.JoinGroupRequest:
		*r = *joinReq(v, fmt.Sprintf("join-v%d", v), fx.pending[v], nil)
	case *kmsg.HeartbeatRequest:
		m := fx.members[fmt.Sprintf("hb-v%d", v)]
		r.Group, r.MemberID, r.Generation = fmt.Sprintf("hb-v%d", v), m.id, m.gen
	case *kmsg.LeaveGroupRequest:
		g := fmt.Sprintf("leave-v%d", v)
		r.Group, r.MemberID = g, fx.members[g].id
		r.Members = []kmsg.LeaveGroupRequestMember{{MemberID: fx.members[g].id, Reason: kmsg.StringPtr("test")}}
	case *kmsg.SyncGroupRequest:
		g := fmt.Sprintf("sync-v%d", v)
		m := fx.members[g]
		r.Group, r.MemberID, r.Generation = g, m.id, m.gen
		r.ProtocolType, r.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
		r.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: m.id, MemberAssignment: consumerAssignment("all", 0)}}
	case *kmsg.DescribeGroupsRequest:
		r.Groups = []string{"hb-v0", "commit-v0", "sync-v0", "nothing"}
		r.IncludeAuthorizedOperations = true
	case *kmsg.ListGroupsRequest:
		r.StatesFilter = []string{"Stable", "CompletingRebalance", "empty"}
	case *kmsg.DeleteGroupsRequest:
		r.Groups = []string{fmt.Sprintf("del-v%d", v)}
	case *kmsg.OffsetDeleteRequest:
		r.Group = "offdel"
		r.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: "all", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}}}
	default:
		t.Fatalf("no minimal request for group API %s", kmsg.NameForKey(key))
	}
	return req
}

// check verifies what the group APIs' minimal requests did.
func (fx *groupFixture) check(t *testing.T, b *memBroker) {
	t.Helper()
	for v := handlers[8].min; v <= handlers[8].max; v++ {
		if got := b.committed(fmt.Sprintf("commit-v%d", v), "all", 0); got != int64(v)+1 {
			t.Fatalf("commit-v%d: committed %d, want %d", v, got, v+1)
		}
	}
	for v := handlers[42].min; v <= handlers[42].max; v++ {
		if got := b.committed(fmt.Sprintf("del-v%d", v), "all", 0); got != -1 {
			t.Fatalf("del-v%d still has offset %d", v, got)
		}
	}
	if got := b.committed("offdel", "all", 0); got != -1 {
		t.Fatalf("offdel still has offset %d", got)
	}
}
