package rpc

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func rawHeartbeat(r *rawConn, group, memberID string, gen int32) int16 {
	req := kmsg.NewPtrHeartbeatRequest()
	req.SetVersion(4)
	req.Group, req.MemberID, req.Generation = group, memberID, gen
	return r.roundTrip(req).(*kmsg.HeartbeatResponse).ErrorCode
}

// A group stored when its rebalance completed is resumed by a
// coordinator taking over: its member heartbeats, commits and syncs at its
// generation and gets its assignment back, and no rebalance happens. The
// new coordinator answers COORDINATOR_LOAD_IN_PROGRESS until the stored
// groups are complete. Once the group empties its membership is removed.
func TestGroupResumesAfterCoordinatorMove(t *testing.T) {
	const group = "resumed"
	b, s, addr := startGroupServer(t, "all", 1)
	r := dialRaw(t, addr)
	id, gen := rawJoinMember(t, r, group)
	if resp := rawSync(t, r, group, id, gen); resp.ErrorCode != 0 {
		t.Fatalf("sync: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	if _, ok := b.StoredGroups()[group]; !ok {
		t.Fatal("the group was not stored when its rebalance completed")
	}

	b.moveCoordinator(2)
	if code := rawHeartbeat(r, group, id, gen); code != kerr.NotCoordinator.Code {
		t.Fatalf("heartbeat on a node that lost the role: %v", kerr.ErrorForCode(code))
	}
	if st, _ := groupGeneration(s, group); st != groupDead {
		t.Fatalf("group still held after the role moved: %s", st)
	}
	b.loading.Store(true)
	b.moveCoordinator(1)
	if code := rawHeartbeat(r, group, id, gen); code != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("heartbeat before the stored groups are complete: %v", kerr.ErrorForCode(code))
	}
	b.loading.Store(false)
	if code := rawHeartbeat(r, group, id, gen); code != 0 {
		t.Fatalf("heartbeat of the resumed member: %v", kerr.ErrorForCode(code))
	}
	if st, g := groupGeneration(s, group); st != groupStable || g != gen {
		t.Fatalf("resumed group: %s generation %d, want Stable %d", st, g, gen)
	}
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.SetVersion(8)
	commit.Group, commit.MemberID, commit.Generation = group, id, gen
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Offset = 5
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "all", Partitions: []kmsg.OffsetCommitRequestTopicPartition{rp}}}
	if code := r.roundTrip(commit).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("commit at the resumed generation: %v", kerr.ErrorForCode(code))
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.SetVersion(5)
	sync.Group, sync.MemberID, sync.Generation = group, id, gen
	resp := r.roundTrip(sync).(*kmsg.SyncGroupResponse)
	if resp.ErrorCode != 0 || !bytes.Equal(resp.MemberAssignment, consumerAssignment("all", 0)) || resp.Protocol == nil || *resp.Protocol != "range" {
		t.Fatalf("sync of the resumed member: %+v", resp)
	}
	desc := r.roundTrip(&kmsg.DescribeGroupsRequest{Version: 5, Groups: []string{group}}).(*kmsg.DescribeGroupsResponse)
	if g := desc.Groups[0]; g.State != "Stable" || len(g.Members) != 1 || g.Members[0].MemberID != id || !bytes.Equal(g.Members[0].ProtocolMetadata, consumerMeta("all")) {
		t.Fatalf("describe the resumed group: %+v", g)
	}

	// The role went elsewhere and came back with no request here in
	// between (a new epoch), while the other coordinator moved the group
	// on: the group is loaded again, not kept from before.
	var v kmsg.GroupMetadataValue
	if err := v.ReadFrom(b.StoredGroups()[group].Value); err != nil {
		t.Fatal(err)
	}
	v.Generation = gen + 5
	b.offMu.Lock()
	b.stored[group] = StoredGroup{Token: b.stored[group].Token, Value: v.AppendTo(nil)}
	b.offMu.Unlock()
	b.coordEpoch.Add(1)
	if code := rawHeartbeat(r, group, id, gen); code != kerr.IllegalGeneration.Code {
		t.Fatalf("heartbeat at the generation of an earlier epoch: %v", kerr.ErrorForCode(code))
	}
	if code := rawHeartbeat(r, group, id, gen+5); code != 0 {
		t.Fatalf("heartbeat at the generation stored meanwhile: %v", kerr.ErrorForCode(code))
	}

	leave := &kmsg.LeaveGroupRequest{Version: 5, Group: group, Members: []kmsg.LeaveGroupRequestMember{{MemberID: id}}}
	if code := r.roundTrip(leave).(*kmsg.LeaveGroupResponse).ErrorCode; code != 0 {
		t.Fatalf("leave: %v", kerr.ErrorForCode(code))
	}
	waitFor(t, "the emptied group's membership removed", func() bool { _, ok := b.StoredGroups()[group]; return !ok })
}

// A rebalance whose group cannot be stored hands out no assignment: the
// leader's SyncGroup gets COORDINATOR_NOT_AVAILABLE and the group
// rebalances; once storing works the next generation completes.
func TestGroupStoreFailureRebalances(t *testing.T) {
	const group = "unstored"
	b, s, addr := startGroupServer(t, "all", 1)
	r := dialRaw(t, addr)
	id, gen := rawJoinMember(t, r, group)
	failed := error(kerr.RequestTimedOut)
	b.storeErr.Store(&failed)
	if resp := rawSync(t, r, group, id, gen); resp.ErrorCode != kerr.CoordinatorNotAvailable.Code || len(resp.MemberAssignment) != 0 {
		t.Fatalf("sync with the store failing: %+v", resp)
	}
	if st, _ := groupGeneration(s, group); st != groupPreparingRebalance {
		t.Fatalf("group after a failed store: %s, want PreparingRebalance", st)
	}
	if _, ok := b.StoredGroups()[group]; ok {
		t.Fatal("a failed store left the group stored")
	}
	b.storeErr.Store(nil)
	join := r.roundTrip(joinReq(4, group, id, nil)).(*kmsg.JoinGroupResponse)
	if join.ErrorCode != 0 || join.Generation != gen+1 {
		t.Fatalf("rejoin: %+v", join)
	}
	if resp := rawSync(t, r, group, id, join.Generation); resp.ErrorCode != 0 {
		t.Fatalf("sync once storing works: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	if _, ok := b.StoredGroups()[group]; !ok {
		t.Fatal("the group was not stored")
	}
}

// The stored value is Kafka's GroupMetadataValue and loads back to the
// same group, a static member's instance id included.
func TestStoredGroupRoundTrip(t *testing.T) {
	c := newCoordinator(GroupConfig{}, realClock{}, nil)
	inst := "inst-1"
	g := &group{c: c, name: "g", token: "tok", generation: 7, protocolType: "consumer", protocol: "range", leader: "m1",
		members: map[string]*member{}, static: map[string]string{}}
	for i, id := range []string{"m1", "m2"} {
		m := &member{id: id, seq: uint64(i), clientID: "cl", clientHost: "/127.0.0.1", sessionTimeout: 10e9, rebalanceTimeout: 20e9,
			protocols: []groupProtocol{{name: "roundrobin", metadata: []byte("rr")}, {name: "range", metadata: consumerMeta(id)}}}
		if i == 1 {
			m.instanceID = &inst
		}
		g.members[id] = m
	}
	value := g.storedValue(map[string][]byte{"m1": consumerAssignment("all", 0)})
	back, err := c.loadGroup("g", StoredGroup{Token: "tok", Value: value})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, m := range back.members {
			stopTimer(m.timer)
		}
	}()
	if back.token != "tok" || back.generation != 7 || back.state != groupStable || back.protocol != "range" || back.leader != "m1" || len(back.members) != 2 {
		t.Fatalf("loaded %+v", back)
	}
	m1, m2 := back.members["m1"], back.members["m2"]
	if !bytes.Equal(m1.assignment, consumerAssignment("all", 0)) || !bytes.Equal(m2.assignment, emptyConsumerAssignment) {
		t.Fatalf("assignments %x, %x", m1.assignment, m2.assignment)
	}
	if !bytes.Equal(m1.metadataOf("range"), consumerMeta("m1")) || m1.metadataOf("roundrobin") != nil {
		t.Fatalf("protocols of m1: %+v", m1.protocols)
	}
	if m2.instanceID == nil || *m2.instanceID != inst || back.static[inst] != "m2" || m2.sessionTimeout != 10e9 || m2.rebalanceTimeout != 20e9 || m2.clientHost != "/127.0.0.1" {
		t.Fatalf("m2 %+v", m2)
	}
	if _, err := c.loadGroup("bad", StoredGroup{Value: []byte{0, 3, 1}}); err == nil {
		t.Fatal("a truncated value loaded")
	}
}
