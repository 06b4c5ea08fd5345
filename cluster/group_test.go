package cluster

import (
	"fmt"
	"testing"

	"github.com/raftlog/raftlog/replication"
)

// groupName is persisted (replica directories name their group) and
// compared across nodes: its bytes must stay those of "%s-%d@%x" over the
// topic id's first 8 bytes.
func TestGroupNameFormat(t *testing.T) {
	id := [16]byte{0x00, 0x01, 0xab, 0xcd, 0xef, 0x10, 0x7f, 0xff, 9, 9, 9, 9, 9, 9, 9, 9}
	for _, c := range []struct {
		name string
		p    int32
	}{{"orders", 0}, {"a", 12345}, {"x.y_z-1", 2147483647}, {"", 7}} {
		tp := Topic{Name: c.name, ID: id}
		if got, want := groupName(tp, c.p), fmt.Sprintf("%s-%d@%x", c.name, c.p, id[:8]); got != want {
			t.Errorf("groupName(%q, %d) = %q, want %q", c.name, c.p, got, want)
		}
	}
}

// Looking up the local replica of a partition, as every produced and
// fetched partition does, allocates nothing.
func TestReplicaLookupAllocatesNothing(t *testing.T) {
	n := &Node{meta: newMeta(), replicas: map[string]*replication.Replica{}}
	id := [16]byte{1, 2, 3}
	n.meta.topics["orders"] = &Topic{Name: "orders", ID: id, Partitions: [][]int32{{1}, {1}}}
	n.replicas[groupName(Topic{Name: "orders", ID: id}, 1)] = nil
	allocs := testing.AllocsPerRun(100, func() {
		if _, ok := n.Replica("orders", 1); !ok {
			t.Fatal("replica not found")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per lookup", allocs)
	}
}
