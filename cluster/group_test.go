package cluster

import (
	"fmt"
	"os"
	"path/filepath"
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

// TestGroupDir: a group's directory is its name up to the '@'.
func TestGroupDir(t *testing.T) {
	tp := Topic{Name: "a-b.c", ID: [16]byte{7}}
	if got, want := groupDir(groupName(tp, 12)), partitionDir("a-b.c", 12); got != want {
		t.Errorf("groupDir = %q, want %q", got, want)
	}
}

// TestClaimDir: a new directory is claimed with its group file; one of
// the same group is kept as it is; one of another group, or with a group
// file a crash tore (empty or cut short), is emptied and claimed anew.
func TestClaimDir(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "t-0")
	read := func() string {
		b, err := os.ReadFile(filepath.Join(dir, groupFile))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if err := claimDir(dir, "t-0@01"); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "t-0@01" {
		t.Fatalf("group file %q", got)
	}
	keep := filepath.Join(dir, "raft.stable")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := claimDir(dir, "t-0@01"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("the same group's files went: %v", err)
	}
	for _, torn := range []string{"", "t-0@0", "other@02"} {
		if err := os.WriteFile(filepath.Join(dir, groupFile), []byte(torn), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := claimDir(dir, "t-0@01"); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(keep); !os.IsNotExist(err) {
			t.Errorf("group file %q: the directory was not emptied (%v)", torn, err)
		}
		if got := read(); got != "t-0@01" {
			t.Errorf("group file %q: claimed as %q", torn, got)
		}
	}
}
