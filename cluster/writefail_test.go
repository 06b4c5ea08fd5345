package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/cluster/clustertest"
	"github.com/raftlog/raftlog/cluster/node"
	"github.com/raftlog/raftlog/log/vfs"
	"github.com/raftlog/raftlog/log/vfs/errorfs"
	"github.com/raftlog/raftlog/replication"
)

// TestReplicaReopensAfterWriteError: node 3's disk fills up. Its replica
// of the partition stops at the first failed write (the log's error is
// sticky), the node says why it is not ready, and the partition goes on
// with the other two replicas. The node closes the replica to reopen it
// (gated: see TestGateOnReopen in replication), and while the disk stays
// full the reopen fails (at open, or at the first append) and is tried
// again with a growing backoff. Once
// the disk has room the next open recovers the log, the replica catches up
// and is released by the vote guard, without a restart: every replica then
// holds the same records.
func TestReplicaReopensAfterWriteError(t *testing.T) {
	// A full disk on which segments (preallocated, but sparse) take no
	// write; overwriting blocks a file has (a replica's Raft state) works.
	full := &errorfs.DiskFull{Sparse: func(path string) bool { return strings.HasSuffix(path, ".log") }}
	c := clustertest.StartWith(t, 3, func(_ int, nc *node.Config) {
		cfg := &nc.Cluster
		if cfg.NodeID == 3 {
			cfg.FS = errorfs.Wrap(vfs.OS, full)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Nodes[0].Controller().CreateTopic(ctx, "full", 1, 3, nil, false); err != nil {
		t.Fatal(err)
	}
	var want []string
	add := func(v string) {
		appendValue(t, c, nil, "full", 0, v)
		want = append(want, v)
	}
	for i := 0; i < 5; i++ {
		add(fmt.Sprintf("before-%d", i))
	}
	n3 := c.Nodes[2]
	// Ready first: its controller replica writes to the same full disk,
	// so a registration not applied before would never be.
	clustertest.WaitFor(t, "node 3 to be ready before its disk fills", 30*time.Second, func() bool {
		ok, _ := n3.Ready()
		return ok
	})
	full.Set(true)
	for i := 0; i < 5; i++ {
		add(fmt.Sprintf("full-%d", i))
	}
	stopped := func(what string, not *replication.Replica) *replication.Replica {
		var got *replication.Replica
		clustertest.WaitFor(t, what, 60*time.Second, func() bool {
			r, ok := n3.Replica("full", 0)
			if ok && r != not && r.WriteError() != nil {
				got = r
				return true
			}
			return false
		})
		if ok, why := n3.Ready(); ok || !strings.Contains(why, "write error") {
			t.Fatalf("node 3 ready=%v (%q) with a replica stopped by a write error", ok, why)
		}
		return got
	}
	first := stopped("node 3's replica to stop on the full disk", nil)
	// Closed to be reopened while the disk stays full: the open fails
	// when its recovery has a checkpoint to write, and the node says the
	// replica is not open; or it opens (nothing to write) and stops again
	// at its first append. Either way it is tried again later.
	clustertest.WaitFor(t, "node 3 to fail a reopen on the full disk", 60*time.Second, func() bool {
		r, open := n3.Replica("full", 0)
		ok, why := n3.Ready()
		if ok || !strings.Contains(why, "no space left") {
			return false
		}
		return !open && strings.Contains(why, "is not open") || open && r != first && r.WriteError() != nil
	})
	full.Set(false)
	add("after")
	clustertest.WaitFor(t, "node 3's replica to be reopened and caught up", 60*time.Second, func() bool {
		r, ok := n3.Replica("full", 0)
		if !ok || r.WriteError() != nil || r.Gated() {
			return false
		}
		_, lead := leaderOf(t, c, nil, "full", 0)
		return r.Log().EndOffset() == lead.Log().EndOffset() && r.HighWatermark() == lead.HighWatermark()
	})
	clustertest.WaitFor(t, "node 3 to be ready", 30*time.Second, func() bool {
		ok, _ := n3.Ready()
		return ok
	})
	for i, nd := range c.Nodes {
		r, ok := nd.Replica("full", 0)
		if !ok {
			t.Fatalf("node %d has no replica", i+1)
		}
		if got := values(t, r); !slices.Equal(got, want) {
			t.Fatalf("node %d holds %v, want %v", i+1, got, want)
		}
	}
}
