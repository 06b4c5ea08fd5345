package rpc

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestMetadataListsNamedBrokers: a partition led by a broker that is not
// live in this node's view (Brokers lists node 1 only) but is registered
// (LookupBroker knows node 2) is answered with that leader, and node 2 is
// among the brokers at its registered address; a leader nobody can look
// up (node 3) is answered as none, LEADER_NOT_AVAILABLE. DescribeCluster
// lists the same brokers.
func TestMetadataListsNamedBrokers(t *testing.T) {
	b := newMemBroker(t)
	if err := b.CreateTopic(testCtx(t), "", "t", 3, 1, nil, false); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	b.leaders = map[string]int32{"t/0": 2, "t/1": 3}
	b.registered = map[int32]BrokerInfo{2: {NodeID: 2, Host: "127.0.0.2", Port: 19092}}
	b.mu.Unlock()
	_, addr := startServer(t, b)
	r := dialRaw(t, addr)

	brokersOf := func(bs []kmsg.MetadataResponseBroker) map[int32]kmsg.MetadataResponseBroker {
		m := map[int32]kmsg.MetadataResponseBroker{}
		for _, b := range bs {
			m[b.NodeID] = b
		}
		return m
	}
	for _, v := range []int16{1, 7, 12} {
		for _, all := range []bool{false, true} {
			req := kmsg.NewPtrMetadataRequest()
			req.SetVersion(v)
			if !all {
				req.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("t")}}
			}
			resp := r.roundTrip(req).(*kmsg.MetadataResponse)
			listed := brokersOf(resp.Brokers)
			if len(listed) != 2 || listed[1].Port != b.port.Load() || listed[2].Host != "127.0.0.2" || listed[2].Port != 19092 {
				t.Fatalf("v%d all=%v: brokers %+v, want node 1 and node 2 at its registered address", v, all, resp.Brokers)
			}
			if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 3 {
				t.Fatalf("v%d all=%v: topics %+v", v, all, resp.Topics)
			}
			ps := resp.Topics[0].Partitions
			slices.SortFunc(ps, func(a, b kmsg.MetadataResponseTopicPartition) int { return int(a.Partition - b.Partition) })
			if ps[0].Leader != 2 || ps[0].ErrorCode != 0 {
				t.Fatalf("v%d all=%v: partition 0 %+v, want led by node 2", v, all, ps[0])
			}
			if ps[1].Leader != -1 || ps[1].ErrorCode != kerr.LeaderNotAvailable.Code || !slices.Contains(ps[1].Replicas, 3) {
				t.Fatalf("v%d all=%v: partition 1 %+v, want no leader, LEADER_NOT_AVAILABLE, node 3 still a replica", v, all, ps[1])
			}
			if ps[2].Leader != 1 || ps[2].ErrorCode != 0 {
				t.Fatalf("v%d all=%v: partition 2 %+v", v, all, ps[2])
			}
			for _, p := range ps {
				if _, ok := listed[p.Leader]; p.Leader >= 0 && !ok {
					t.Fatalf("v%d all=%v: partition %d names leader %d, not among the brokers %+v", v, all, p.Partition, p.Leader, resp.Brokers)
				}
			}
			if _, ok := listed[resp.ControllerID]; !ok {
				t.Fatalf("v%d all=%v: controller %d not listed", v, all, resp.ControllerID)
			}
		}
	}

	dc := kmsg.NewPtrDescribeClusterRequest()
	dresp := r.roundTrip(dc).(*kmsg.DescribeClusterResponse)
	var ids []int32
	for _, b := range dresp.Brokers {
		ids = append(ids, b.NodeID)
		if b.NodeID == 2 && (b.Host != "127.0.0.2" || b.Port != 19092) {
			t.Fatalf("describe cluster: node 2 at %s:%d", b.Host, b.Port)
		}
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []int32{1, 2}) {
		t.Fatalf("describe cluster lists %v, want [1 2] as Metadata", ids)
	}
}
