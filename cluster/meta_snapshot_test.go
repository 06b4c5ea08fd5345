package cluster

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/raftlog/raftlog/log"
)

// batchAt is the batch of one command at offset.
func batchAt(t *testing.T, c command, offset int64) []byte {
	t.Helper()
	v, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return log.BuildBatch(nil, log.BatchOptions{BaseOffset: offset, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, []log.Record{{Value: v, Timestamp: 1}})
}

func applyAt(t *testing.T, m *Meta, c command, offset int64) error {
	t.Helper()
	return m.apply(batchAt(t, c, offset))
}

func sampleMeta(t *testing.T) *Meta {
	t.Helper()
	m := newMeta()
	cmds := []command{
		{Op: "init", ClusterID: "c1"},
		{Op: "create_topic", Topic: "t", TopicID: "00112233445566778899aabbccddeeff", Assignment: [][]int32{{1, 2, 3}, {2, 3, 1}}, Configs: map[string]string{"cleanup.policy": "delete"}},
		{Op: "commit_offsets", Group: "g", Offsets: []GroupOffset{{Topic: "t", Partition: 0, Offset: 5, LeaderEpoch: 2, Metadata: "x"}, {Topic: "t", Partition: 1, Offset: 7}}},
		{Op: "alloc_producer_id"},
		{Op: "reassign", Topic: "t", Partition: 1, Replicas: []int32{4, 3, 1}},
	}
	for i, c := range cmds {
		if err := applyAt(t, m, c, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

type fullView struct {
	Cluster  string
	Topics   []Topic
	Offsets  []GroupOffset
	Groups   []string
	Producer int64
}

func fullViewOf(m *Meta) fullView {
	return fullView{m.ClusterID(), m.Topics(), m.GroupOffsets("g", nil), m.OffsetGroups(), m.LastProducerID()}
}

// TestMetaSnapshot: a snapshot is the state where it follows its capture
// directly or where the log resumes at it after a gap; a snapshot with a
// command between its capture and it is ignored; a log that resumes after
// a gap with anything but a snapshot is refused.
func TestMetaSnapshot(t *testing.T) {
	m := sampleMeta(t)
	want := fullViewOf(m)
	st, after := m.capture()
	if after != 4 {
		t.Fatalf("capture after %d, want 4", after)
	}
	snap := command{Op: "snapshot", State: &st, After: after}

	// Restored after a gap: a new meta whose log starts at the snapshot.
	fresh := newMeta()
	if err := applyAt(t, fresh, snap, 10); err != nil {
		t.Fatal(err)
	}
	if got := fullViewOf(fresh); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored from the snapshot:\n got %+v\nwant %+v", got, want)
	}
	if !fresh.snapshotAt(10) || fresh.sinceSnapshot() != 0 || fresh.Applied() != 11 {
		t.Fatalf("after the snapshot: at %d since %d applied %d", fresh.snapAt, fresh.sinceSnapshot(), fresh.Applied())
	}
	// Commands go on from there.
	if err := applyAt(t, fresh, command{Op: "commit_offsets", Group: "g", Offsets: []GroupOffset{{Topic: "t", Partition: 0, Offset: 9}}}, 11); err != nil {
		t.Fatal(err)
	}
	if o := fresh.GroupOffsets("g", nil); o[0].Offset != 9 || fresh.sinceSnapshot() != 1 {
		t.Fatalf("after a commit: %+v, since %d", o, fresh.sinceSnapshot())
	}

	// Directly after its capture (with a control batch between): valid.
	same := sampleMeta(t)
	ctl := log.BuildBatch(nil, log.BatchOptions{BaseOffset: 5, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Attributes: 1 << 5}, []log.Record{{Value: []byte{0, 0, 0, 0}, Timestamp: 1}})
	if err := same.apply(ctl); err != nil {
		t.Fatal(err)
	}
	if err := applyAt(t, same, snap, 6); err != nil {
		t.Fatal(err)
	}
	if !same.snapshotAt(6) || !reflect.DeepEqual(fullViewOf(same), want) {
		t.Fatalf("a snapshot right after its capture was not taken: at %d", same.snapAt)
	}

	// A command between the capture and the snapshot: ignored.
	moved := sampleMeta(t)
	if err := applyAt(t, moved, command{Op: "delete_offsets", Group: "g"}, 5); err != nil {
		t.Fatal(err)
	}
	if err := applyAt(t, moved, snap, 6); err != nil {
		t.Fatal(err)
	}
	if moved.snapshotAt(6) || len(moved.GroupOffsets("g", nil)) != 0 {
		t.Fatalf("a stale snapshot was applied: at %d, offsets %+v", moved.snapAt, moved.GroupOffsets("g", nil))
	}

	// A gap followed by an ordinary command: refused, nothing applied.
	gapped := sampleMeta(t)
	err := applyAt(t, gapped, command{Op: "delete_offsets", Group: "g"}, 9)
	if err == nil || !strings.Contains(err.Error(), "not a snapshot") {
		t.Fatalf("a command after a gap: %v", err)
	}
	if gapped.Applied() != 5 || len(gapped.GroupOffsets("g", nil)) != 2 {
		t.Fatalf("after the refused gap: applied %d", gapped.Applied())
	}
	// Nor may it resume at a control batch, or at a snapshot with no state.
	ctlGap := log.BuildBatch(nil, log.BatchOptions{BaseOffset: 9, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Attributes: 1 << 5}, []log.Record{{Value: []byte{0, 0, 0, 0}, Timestamp: 1}})
	if err := gapped.apply(ctlGap); err == nil {
		t.Fatal("a control batch after a gap was taken")
	}
	if err := applyAt(t, gapped, command{Op: "snapshot", After: 4}, 9); err == nil {
		t.Fatal("a snapshot with no state after a gap was taken")
	}
	if gapped.Applied() != 5 {
		t.Fatalf("after the refused gaps: applied %d", gapped.Applied())
	}
}
