package rpc

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// reassignBroker is the memory broker with a table of reassignments: a
// move is recorded and never finishes.
type reassignBroker struct {
	*memBroker
	mu     sync.Mutex
	moves  map[TopicPartition][]int32
	calls  []reassignCall
	refuse error
}

type reassignCall struct {
	tp       TopicPartition
	replicas []int32
	allowRF  bool
}

func (b *reassignBroker) ReassignPartition(_ context.Context, topic string, p int32, replicas []int32, allowRF bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	tp := TopicPartition{Topic: topic, Partition: p}
	b.calls = append(b.calls, reassignCall{tp, replicas, allowRF})
	if b.refuse != nil {
		return b.refuse
	}
	if replicas == nil {
		if _, ok := b.moves[tp]; !ok {
			return kerr.NoReassignmentInProgress
		}
		delete(b.moves, tp)
		return nil
	}
	b.moves[tp] = replicas
	return nil
}

func (b *reassignBroker) Reassignments() []PartitionReassignment {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []PartitionReassignment
	for tp, target := range b.moves {
		out = append(out, PartitionReassignment{Topic: tp.Topic, Partition: tp.Partition,
			Replicas: append([]int32{1}, target...), Adding: target, Removing: []int32{1}})
	}
	slices.SortFunc(out, func(a, b PartitionReassignment) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}

func TestPartitionReassignments(t *testing.T) {
	b := &reassignBroker{memBroker: newMemBroker(t), moves: map[TopicPartition][]int32{}}
	_, addr := startServer(t, b)
	adm := kadm.NewClient(newClient(t, addr))
	ctx := testCtx(t)

	var req kadm.AlterPartitionAssignmentsReq
	req.Assign("a", 0, []int32{2, 3})
	req.Assign("a", 1, []int32{4})
	req.Assign("b", 0, []int32{5})
	resp, err := adm.AlterPartitionAssignments(ctx, req)
	if err != nil || resp.Error() != nil {
		t.Fatalf("alter: %v %v", err, resp.Error())
	}
	if len(b.calls) != 3 || !b.calls[0].allowRF {
		t.Fatalf("calls: %+v", b.calls)
	}
	list, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{"a": {0: {}, 7: {}}, "nope": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := list.Sorted(); len(got) != 1 || got[0].Topic != "a" || got[0].Partition != 0 ||
		!slices.Equal(got[0].Replicas, []int32{1, 2, 3}) || !slices.Equal(got[0].AddingReplicas, []int32{2, 3}) || !slices.Equal(got[0].RemovingReplicas, []int32{1}) {
		t.Fatalf("list: %+v", got)
	}
	// Null topics: everything.
	r := dialRaw(t, addr)
	all := r.roundTrip(kmsg.NewPtrListPartitionReassignmentsRequest()).(*kmsg.ListPartitionReassignmentsResponse)
	n := 0
	for _, rt := range all.Topics {
		n += len(rt.Partitions)
	}
	if n != 3 {
		t.Fatalf("list of everything: %+v", all.Topics)
	}

	// Cancel: nil replicas; twice is NO_REASSIGNMENT_IN_PROGRESS.
	var cancel kadm.AlterPartitionAssignmentsReq
	cancel.CancelAssign("b", 0)
	if resp, err := adm.AlterPartitionAssignments(ctx, cancel); err != nil || resp.Error() != nil {
		t.Fatalf("cancel: %v %v", err, resp.Error())
	}
	if resp, _ := adm.AlterPartitionAssignments(ctx, cancel); !errors.Is(resp.Error(), kerr.NoReassignmentInProgress) {
		t.Fatalf("second cancel: %v", resp.Error())
	}
	if last := b.calls[len(b.calls)-1]; last.replicas != nil {
		t.Fatalf("cancel passed replicas %v", last.replicas)
	}

	// v1 without a replication factor change; a partition named twice.
	raw := kmsg.NewPtrAlterPartitionAssignmentsRequest()
	raw.SetVersion(1)
	raw.AllowReplicationFactorChange = false
	rt := kmsg.NewAlterPartitionAssignmentsRequestTopic()
	rt.Topic = "c"
	rt.Partitions = []kmsg.AlterPartitionAssignmentsRequestTopicPartition{{Partition: 0, Replicas: []int32{1}}}
	dup := kmsg.NewAlterPartitionAssignmentsRequestTopic()
	dup.Topic = "d"
	dup.Partitions = []kmsg.AlterPartitionAssignmentsRequestTopicPartition{{Partition: 0, Replicas: []int32{1}}, {Partition: 0, Replicas: []int32{2}}}
	raw.Topics = append(raw.Topics, rt, dup)
	before := len(b.calls)
	out := r.roundTrip(raw).(*kmsg.AlterPartitionAssignmentsResponse)
	if out.AllowReplicationFactorChange || len(out.Topics) != 2 || out.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("v1: %+v", out)
	}
	for _, p := range out.Topics[1].Partitions {
		if p.ErrorCode != kerr.InvalidRequest.Code {
			t.Fatalf("partition named twice: %+v", out.Topics[1])
		}
	}
	if len(b.calls) != before+1 || b.calls[before].allowRF {
		t.Fatalf("calls: %+v", b.calls[before:])
	}
	// Broker errors travel as their codes.
	b.refuse = kerr.InvalidReplicaAssignment
	var bad kadm.AlterPartitionAssignmentsReq
	bad.Assign("a", 0, []int32{9})
	if resp, _ := adm.AlterPartitionAssignments(ctx, bad); !errors.Is(resp.Error(), kerr.InvalidReplicaAssignment) {
		t.Fatalf("refused: %v", resp.Error())
	}

	// The plain memory broker moves nothing.
	_, plain := startServer(t, newMemBroker(t))
	pr := dialRaw(t, plain)
	if l := pr.roundTrip(kmsg.NewPtrListPartitionReassignmentsRequest()).(*kmsg.ListPartitionReassignmentsResponse); l.ErrorCode != 0 || len(l.Topics) != 0 {
		t.Fatalf("list on a plain broker: %+v", l)
	}
	raw.Topics = raw.Topics[:1]
	if a := pr.roundTrip(raw).(*kmsg.AlterPartitionAssignmentsResponse); a.Topics[0].Partitions[0].ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("alter on a plain broker: %+v", a)
	}
}
