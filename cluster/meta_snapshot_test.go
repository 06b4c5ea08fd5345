package cluster

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/raftlog/raftlog/log"
	"github.com/twmb/franz-go/pkg/kerr"
)

// batchAt is the batch of one command at offset.
func batchAt(t testing.TB, c command, offset int64) []byte {
	t.Helper()
	v, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return log.BuildBatch(nil, log.BatchOptions{BaseOffset: offset, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, []log.Record{{Value: v, Timestamp: 1}})
}

func applyAt(t testing.TB, m *Meta, c command, offset int64) error {
	t.Helper()
	return m.apply(batchAt(t, c, offset))
}

func sampleMeta(t testing.TB) *Meta {
	t.Helper()
	m := newMeta()
	cmds := []command{
		{Op: "init", ClusterID: "c1"},
		{Op: "create_topic", Topic: "t", TopicID: "00112233445566778899aabbccddeeff", Assignment: [][]int32{{1, 2, 3}, {2, 3, 1}}, Configs: map[string]string{"cleanup.policy": "delete"}, DenseOffsets: true},
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
	Stored   map[string]StoredGroup
}

func fullViewOf(m *Meta) fullView {
	return fullView{m.ClusterID(), m.Topics(), m.GroupOffsets("g", nil), m.OffsetGroups(), m.LastProducerID(), m.StoredGroups()}
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

// commandsOf decodes the command of each batch.
func commandsOf(t *testing.T, batches [][]byte) []command {
	t.Helper()
	var out []command
	for _, b := range batches {
		log.Batches(b, func(bt log.Batch) bool {
			recs, _, ok := log.DecodeRecords(bt)
			if !ok || len(recs) != 1 {
				t.Fatalf("a snapshot batch of %d records (decoded %v)", len(recs), ok)
			}
			var c command
			if err := json.Unmarshal(recs[0].Value, &c); err != nil {
				t.Fatal(err)
			}
			out = append(out, c)
			return true
		})
	}
	return out
}

// bigMeta is sampleMeta with offsets of 400 more partitions, each with
// 200 bytes of metadata that compress poorly.
func bigMeta(t *testing.T) *Meta {
	t.Helper()
	m := sampleMeta(t)
	offs := make([]GroupOffset, 400)
	for i := range offs {
		md := make([]byte, 150)
		rand.Read(md)
		offs[i] = GroupOffset{Topic: "t", Partition: int32(i + 2), Offset: int64(i), Metadata: base64.StdEncoding.EncodeToString(md)}
	}
	if err := applyAt(t, m, command{Op: "commit_offsets", Group: "g", Offsets: offs}, 5); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMetaPackedSnapshot: a state too large for one command is packed
// into parts that each fit; applied after a gap they restore the state,
// applied after the commands they were taken from they only mark the
// snapshot; a command between the parts makes the snapshot ignored there
// and the log unusable after a gap, as does a part out of order or data
// that does not decode.
func TestMetaPackedSnapshot(t *testing.T) {
	const maxBatch = 16 << 10
	small, after := sampleMeta(t).capture()
	if b, err := snapshotBatches(small, after, maxBatch); err != nil || len(b) != 1 || commandsOf(t, b)[0].State == nil {
		t.Fatalf("a small state: %d batches, %v", len(b), err)
	}

	m := bigMeta(t)
	want := fullViewOf(m)
	st, after := m.capture()
	batches, err := snapshotBatches(st, after, maxBatch)
	if err != nil {
		t.Fatal(err)
	}
	parts := commandsOf(t, batches)
	if len(parts) < 3 {
		t.Fatalf("%d parts, want several", len(parts))
	}
	for i, b := range batches {
		if len(b) > maxBatch || parts[i].Part != i || parts[i].Parts != len(parts) || parts[i].State != nil {
			t.Fatalf("part %d: %d bytes, %d of %d", i, len(b), parts[i].Part, parts[i].Parts)
		}
	}
	applyParts := func(m *Meta, at int64, cmds []command) error {
		for i, c := range cmds {
			if err := applyAt(t, m, c, at+int64(i)); err != nil {
				return err
			}
		}
		return nil
	}

	// Restored after a gap, with a control batch between two parts.
	fresh := newMeta()
	if err := applyParts(fresh, 100, parts[:2]); err != nil {
		t.Fatal(err)
	}
	if fresh.snapshotAt(100) || fresh.ClusterID() != "" {
		t.Fatal("the state was installed before the last part")
	}
	ctl := log.BuildBatch(nil, log.BatchOptions{BaseOffset: 102, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Attributes: 1 << 5}, []log.Record{{Value: []byte{0, 0, 0, 0}, Timestamp: 1}})
	if err := fresh.apply(ctl); err != nil {
		t.Fatal(err)
	}
	if err := applyParts(fresh, 103, parts[2:]); err != nil {
		t.Fatal(err)
	}
	if got := fullViewOf(fresh); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored from the packed snapshot: %d offsets, want %d", len(got.Offsets), len(want.Offsets))
	}
	if !fresh.snapshotAt(100) || fresh.sinceSnapshot() != int64(len(parts)) {
		t.Fatalf("after the packed snapshot: at %d since %d", fresh.snapAt, fresh.sinceSnapshot())
	}

	// Directly after its capture: marked, the state unchanged.
	same := bigMeta(t) // other metadata than m's: its state stays
	sameWant := fullViewOf(same)
	if err := applyParts(same, 6, parts); err != nil {
		t.Fatal(err)
	}
	if !same.snapshotAt(6) || !reflect.DeepEqual(fullViewOf(same), sameWant) {
		t.Fatalf("a packed snapshot right after its capture: at %d", same.snapAt)
	}

	// A command between its capture and part 0, or between two parts:
	// ignored, the command applied.
	between := command{Op: "delete_offsets", Group: "g", Offsets: []GroupOffset{{Topic: "t", Partition: 0}}}
	for _, at := range []int{0, 1} {
		moved := bigMeta(t)
		cmds := append(append(append([]command{}, parts[:at]...), between), parts[at:]...)
		if err := applyParts(moved, 6, cmds); err != nil {
			t.Fatal(err)
		}
		if moved.snapAt != -1 || len(moved.GroupOffsets("g", nil)) != len(want.Offsets)-1 {
			t.Fatalf("command before part %d: snapshot at %d, %d offsets", at, moved.snapAt, len(moved.GroupOffsets("g", nil)))
		}
	}

	// After a gap nothing but the next part may follow part 0.
	for name, rest := range map[string][]command{
		"a command":         {parts[1], between},
		"a part skipped":    {parts[2]},
		"part 0 once more":  {parts[0]},
		"another snapshot":  {{Op: "snapshot", State: &small, After: 7}},
		"a part of another": {{Op: "snapshot", Part: 1, Parts: len(parts) + 1, Data: parts[1].Data}},
	} {
		cut := newMeta()
		if err := applyAt(t, cut, parts[0], 100); err != nil {
			t.Fatal(err)
		}
		err := applyParts(cut, 101, rest)
		if err == nil || !strings.Contains(err.Error(), "is followed by") {
			t.Fatalf("%s after part 0 of a restore: %v", name, err)
		}
		if cut.snapAt != -1 || cut.ClusterID() != "" {
			t.Fatalf("%s: a state was installed", name)
		}
	}

	// The log start moving on while a restore is under way (the node
	// fell behind its own log by a snapshot): the snapshot it resumes at
	// replaces the one being restored, packed or plain.
	moving := newMeta()
	if err := applyParts(moving, 100, parts[:2]); err != nil {
		t.Fatal(err)
	}
	if err := applyParts(moving, 200, parts); err != nil {
		t.Fatalf("a packed snapshot after a gap in a restore: %v", err)
	}
	if !moving.snapshotAt(200) || !reflect.DeepEqual(fullViewOf(moving), want) {
		t.Fatalf("restored from the second snapshot: at %d", moving.snapAt)
	}
	plainAfter := newMeta()
	if err := applyParts(plainAfter, 100, parts[:2]); err != nil {
		t.Fatal(err)
	}
	if err := applyAt(t, plainAfter, command{Op: "snapshot", State: &small, After: 4}, 300); err != nil {
		t.Fatalf("a plain snapshot after a gap in a restore: %v", err)
	}
	if !plainAfter.snapshotAt(300) || plainAfter.ClusterID() != "c1" {
		t.Fatalf("restored from the plain snapshot: at %d", plainAfter.snapAt)
	}

	// Data that does not decode: refused after a gap, again when applied
	// again (as the apply loop retries), and nothing installed.
	bad := append([]command{}, parts...)
	last := len(bad) - 1
	bad[last].Data = append([]byte("not zstd"), bad[last].Data...)
	corrupt := newMeta()
	if err := applyParts(corrupt, 100, bad); err == nil || !strings.Contains(err.Error(), "decompress") {
		t.Fatalf("a packed snapshot that does not decode: %v", err)
	}
	for range 2 {
		if err := applyAt(t, corrupt, bad[last], int64(100+last)); err == nil {
			t.Fatal("the part that does not decode was taken when applied again")
		}
	}
	if corrupt.snapAt != -1 || corrupt.ClusterID() != "" || corrupt.Applied() != int64(100+last) {
		t.Fatalf("after the refused part: snapshot at %d, applied %d", corrupt.snapAt, corrupt.Applied())
	}
}

// TestDeleteTopicDropsOffsets: deleting a topic deletes the committed
// offsets of its partitions, and a group left with none; a commit applied
// after the deletion (checked before it) does not bring them back.
func TestDeleteTopicDropsOffsets(t *testing.T) {
	m := sampleMeta(t)
	cmds := []command{
		{Op: "create_topic", Topic: "u", Assignment: [][]int32{{1}}},
		{Op: "commit_offsets", Group: "g", Offsets: []GroupOffset{{Topic: "u", Partition: 0, Offset: 3}}},
		{Op: "commit_offsets", Group: "h", Offsets: []GroupOffset{{Topic: "t", Partition: 0, Offset: 4}}},
		{Op: "delete_topic", Topic: "t"},
	}
	for i, c := range cmds {
		if err := applyAt(t, m, c, int64(5+i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.GroupOffsets("g", nil); len(got) != 1 || got[0].Topic != "u" {
		t.Fatalf("group g after deleting t: %+v", got)
	}
	if got := m.OffsetGroups(); !reflect.DeepEqual(got, []string{"g"}) {
		t.Fatalf("groups after deleting t: %v", got)
	}
	if err := applyAt(t, m, command{Op: "commit_offsets", Group: "late", Offsets: []GroupOffset{{Topic: "t", Partition: 0, Offset: 9}}}, 9); err != nil {
		t.Fatal(err)
	}
	if got := m.OffsetGroups(); !reflect.DeepEqual(got, []string{"g"}) {
		t.Fatalf("groups after a commit to the deleted t: %v", got)
	}
}

// TestCommitTime: a committed offset's commit time is its command's
// record timestamp, whatever the command says.
func TestCommitTime(t *testing.T) {
	m := sampleMeta(t)
	v, err := json.Marshal(command{Op: "commit_offsets", Group: "g", Offsets: []GroupOffset{{Topic: "t", Offset: 3, CommitTime: 999}}})
	if err != nil {
		t.Fatal(err)
	}
	b := log.BuildBatch(nil, log.BatchOptions{BaseOffset: 5, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, []log.Record{{Value: v, Timestamp: 1700000000123}})
	if err := m.apply(b); err != nil {
		t.Fatal(err)
	}
	if got := m.GroupOffsets("g", nil); len(got) != 2 || got[0].CommitTime != 1700000000123 || got[1].CommitTime != 1 {
		t.Fatalf("committed %+v, want the commit time of each record", got)
	}
}

// TestExpireOffsets: an expiry deletes an offset only while it still has
// the commit time the expiry saw; one committed again since is kept.
func TestExpireOffsets(t *testing.T) {
	m := sampleMeta(t) // t/0 and t/1 of g, committed at 1
	v, err := json.Marshal(command{Op: "commit_offsets", Group: "g", Offsets: []GroupOffset{{Topic: "t", Partition: 1, Offset: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.apply(log.BuildBatch(nil, log.BatchOptions{BaseOffset: 5, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, []log.Record{{Value: v, Timestamp: 50}})); err != nil {
		t.Fatal(err)
	}
	// Both were seen at commit time 1; t/1 was committed again (at 50).
	expire := command{Op: "delete_offsets", Group: "g", Expire: true, Offsets: []GroupOffset{{Topic: "t", Partition: 0, CommitTime: 1}, {Topic: "t", Partition: 1, CommitTime: 1}}}
	if err := applyAt(t, m, expire, 6); err != nil {
		t.Fatal(err)
	}
	if got := m.GroupOffsets("g", nil); len(got) != 1 || got[0].Partition != 1 || got[0].Offset != 8 {
		t.Fatalf("after the expiry: %+v, want t/1 committed again kept", got)
	}
}

// TestRegistrySnapshot: register_broker records a node's entry (a later
// one replaces it); snapshots, plain and packed, carry the registry; a
// snapshot of a version without the registry restores an empty one.
func TestRegistrySnapshot(t *testing.T) {
	m := newMeta()
	r1 := Registration{NodeID: 1, Incarnation: "a", KafkaAddr: "h1:9092", RaftAddr: "h1:9192", HTTPAddr: "h1:9392", GossipAddr: "h1:9292"}
	r2 := Registration{NodeID: 2, Incarnation: "b", KafkaAddr: "h2:9092", GossipAddr: "h2:9292", Rack: "r2"}
	moved := r1
	moved.KafkaAddr = "h1b:9092"
	for i, c := range []command{{Op: "init", ClusterID: "c"}, {Op: "register_broker", Broker: &r1}, {Op: "register_broker", Broker: &r2},
		{Op: "register_broker", Broker: &moved}, {Op: "register_broker"}} {
		if err := applyAt(t, m, c, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	want := []Registration{moved, r2}
	if got := m.Brokers(); !reflect.DeepEqual(got, want) {
		t.Fatalf("registry %+v, want %+v", got, want)
	}
	if got, ok := m.Broker(2); !ok || got != r2 {
		t.Fatalf("broker 2: %+v %v", got, ok)
	}
	// Enough entries that a 1100-byte batch cannot hold them plain.
	for id := int32(3); id < 40; id++ {
		r := Registration{NodeID: id, Incarnation: fmt.Sprintf("%08x", id*7919), KafkaAddr: fmt.Sprintf("broker-%d.example:9092", id),
			RaftAddr: fmt.Sprintf("broker-%d.example:9192", id), GossipAddr: fmt.Sprintf("10.0.%d.%d:9292", id, id*3)}
		if err := applyAt(t, m, command{Op: "register_broker", Broker: &r}, int64(id+2)); err != nil {
			t.Fatal(err)
		}
		want = append(want, r)
	}
	st, after := m.capture()
	for _, maxBatch := range []int{1 << 20, 1100} { // plain, packed
		batches, err := snapshotBatches(st, after, maxBatch)
		if err != nil {
			t.Fatal(err)
		}
		if maxBatch < 2000 && len(batches) < 2 {
			t.Fatalf("%d-byte batches: %d parts, want a packed snapshot", maxBatch, len(batches))
		}
		fresh := newMeta()
		off := int64(20)
		for _, b := range batches {
			log.Batches(b, func(bt log.Batch) bool {
				recs, _, _ := log.DecodeRecords(bt)
				var c command
				if err := json.Unmarshal(recs[0].Value, &c); err != nil {
					t.Fatal(err)
				}
				if err := applyAt(t, fresh, c, off); err != nil {
					t.Fatal(err)
				}
				return true
			})
			off++
		}
		if got := fresh.Brokers(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%d-byte batches: restored registry %+v, want %+v", maxBatch, got, want)
		}
	}
	// A state as a version without the registry wrote it.
	var old metaState
	if err := json.Unmarshal([]byte(`{"cluster_id":"c","last_producer_id":-1}`), &old); err != nil {
		t.Fatal(err)
	}
	fresh := newMeta()
	if err := applyAt(t, fresh, command{Op: "snapshot", State: &old, After: 3}, 9); err != nil {
		t.Fatal(err)
	}
	if got := fresh.Brokers(); len(got) != 0 || fresh.ClusterID() != "c" {
		t.Fatalf("an old snapshot restored registry %+v, cluster %q", got, fresh.ClusterID())
	}
	if err := applyAt(t, fresh, command{Op: "register_broker", Broker: &r2}, 10); err != nil {
		t.Fatal(err)
	}
	if _, ok := fresh.Broker(2); !ok {
		t.Fatal("no registration after an old snapshot")
	}
}

// A topic's offset layout is kept by the metadata and its snapshots.
func TestSnapshotKeepsOffsetLayout(t *testing.T) {
	m := sampleMeta(t)
	st, after := m.capture()
	fresh := newMeta()
	if err := applyAt(t, fresh, command{Op: "snapshot", State: &st, After: after}, 10); err != nil {
		t.Fatal(err)
	}
	for _, mm := range []*Meta{m, fresh} {
		if tp, ok := mm.Topic("t"); !ok || !tp.DenseOffsets {
			t.Fatalf("topic t: %+v", tp)
		}
	}
}

// A stored group is replaced by the next store and removed by a removal
// under its token or none; a removal under another token (a group
// incarnation emptied after a later one stored) keeps it.
func TestStoreGroup(t *testing.T) {
	m := newMeta()
	off := int64(0)
	apply := func(c command) {
		t.Helper()
		c.Op = "store_group"
		if err := applyAt(t, m, c, off); err != nil {
			t.Fatal(err)
		}
		off++
	}
	stored := func() map[string]StoredGroup { return m.StoredGroups() }
	apply(command{Group: "a", Token: "t1", GroupValue: []byte("gen1")})
	apply(command{Group: "a", Token: "t1", GroupValue: []byte("gen2")})
	apply(command{Group: "b", Token: "t9", GroupValue: []byte("b")})
	if got := stored(); !reflect.DeepEqual(got, map[string]StoredGroup{"a": {"t1", []byte("gen2")}, "b": {"t9", []byte("b")}}) {
		t.Fatalf("stored %v", got)
	}
	// A snapshot holds them.
	st, after := m.capture()
	fresh := newMeta()
	if err := applyAt(t, fresh, command{Op: "snapshot", State: &st, After: after}, 100); err != nil {
		t.Fatal(err)
	}
	if got := fresh.StoredGroups(); !reflect.DeepEqual(got, stored()) {
		t.Fatalf("restored from a snapshot: %v", got)
	}
	apply(command{Group: "a", Token: "t0"}) // an earlier incarnation's removal
	if _, ok := stored()["a"]; !ok {
		t.Fatal("a removal under another token removed the group")
	}
	apply(command{Group: "a", Token: "t1"})
	apply(command{Group: "b"})
	apply(command{Group: "nosuch", Token: "x"})
	if got := stored(); len(got) != 0 {
		t.Fatalf("stored after the removals: %v", got)
	}
}

// The partition limits count every replica a node is assigned (both
// sides of a reassignment) and every partition of the cluster.
func TestCheckPartitionLimits(t *testing.T) {
	m := newMeta()
	if err := applyAt(t, m, command{Op: "create_topic", Topic: "t", TopicID: "00112233445566778899aabbccddeeff", Assignment: [][]int32{{1, 2}, {2, 3}, {3, 1}}}, 0); err != nil {
		t.Fatal(err)
	}
	if err := applyAt(t, m, command{Op: "reassign", Topic: "t", Partition: 0, Replicas: []int32{4, 2}}, 1); err != nil {
		t.Fatal(err)
	}
	// Now node 1: 2 replicas, 2: 2 (+ none new), 3: 2, 4: 1; 3 partitions.
	ctl := &Controller{cfg: Config{MaxPartitionsPerNode: 3, MaxPartitions: 5}, meta: m}
	for _, c := range []struct {
		assign [][]int32
		want   string // "" for none
	}{
		{[][]int32{{1, 4}}, ""},
		{[][]int32{{1, 4}, {2, 4}}, ""},
		{[][]int32{{1, 2}, {1, 3}}, "node 1 would hold 4 partition replicas, over its limit of 3 (--max-partitions-per-node)"},
		{[][]int32{{4}, {4}, {4}}, "the cluster would hold 6 partitions, over its limit of 5 (--max-partitions)"},
	} {
		err := ctl.checkPartitionLimits(c.assign)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v refused: %v", c.assign, err)
		case c.want != "" && (err == nil || !errors.Is(err, kerr.PolicyViolation) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want POLICY_VIOLATION %q", c.assign, err, c.want)
		}
	}
	ctl.cfg = Config{MaxPartitionsPerNode: -1, MaxPartitions: -1}
	if err := ctl.checkPartitionLimits([][]int32{{1, 2}, {1, 2}, {1, 2}, {1, 2}}); err != nil {
		t.Errorf("no limits: %v", err)
	}
}

// TestSnapshotRefusesMiskeyedState: a snapshot whose map keys are not
// what their entries name is refused where it would be the state, plain
// or packed, and leaves the state as it was.
func TestSnapshotRefusesMiskeyedState(t *testing.T) {
	bad := []metaState{
		{Offsets: map[string]map[string]GroupOffset{"g": {"a": {Topic: "t", Partition: 0}, "t/0": {Topic: "t", Partition: 0}}}},
		{Topics: map[string]Topic{"t": {Name: "u"}}},
		{Brokers: map[int32]Registration{1: {NodeID: 2}}},
	}
	for i, st := range bad {
		m := sampleMeta(t)
		want := fullViewOf(m)
		if err := applyAt(t, m, command{Op: "snapshot", State: &st}, 10); err == nil {
			t.Fatalf("state %d: a plain snapshot after a gap applied", i)
		}
		if got := fullViewOf(m); !reflect.DeepEqual(got, want) {
			t.Fatalf("state %d: the refused snapshot changed the state:\n got %+v\nwant %+v", i, got, want)
		}
		// A limit the plain command does not fit (its cluster id alone is
		// over it) but the compressed state does.
		st.ClusterID = strings.Repeat("c", 3000)
		packed, err := snapshotBatches(st, 0, 2000)
		if err != nil || len(packed) < 1 || bytes.Contains(packed[0], []byte(`"state"`)) {
			t.Fatalf("state %d: packed into %d parts: %v", i, len(packed), err)
		}
		fresh := newMeta()
		for j, b := range packed {
			err = fresh.apply(rebase(b, int64(20+j)))
		}
		if err == nil {
			t.Fatalf("state %d: a packed snapshot after a gap applied", i)
		}
	}
}
