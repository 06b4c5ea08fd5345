package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/cluster/clustertest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestPartitionReassignCLI: `raftlog partition reassign` moves a
// partition from nodes {1,2,3} to {2,3,4} on a four-node cluster and
// follows the move to its end: the records are all there, node 1's
// directory of the partition is gone.
func TestPartitionReassignCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := clustertest.Start(t, 4)
	c.CreateTopic("mv", 1, 3)
	bs := strings.Join(c.Bootstrap, ",")
	adm := kadm.NewClient(c.Client())
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	td, err := adm.ListTopics(ctx, "mv")
	if err != nil {
		t.Fatal(err)
	}
	if got := td["mv"].Partitions[0].Replicas; !slices.Equal(got, []int32{1, 2, 3}) {
		t.Fatalf("replicas %v, want [1 2 3]", got)
	}
	prod := c.Client(kgo.DefaultProduceTopic("mv"))
	const total = 200
	for i := 0; i < total; i++ {
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("r%04d", i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	dir1 := filepath.Join(c.Cfgs[0].Cluster.DataDir, "mv-0")
	if _, err := os.Stat(dir1); err != nil {
		t.Fatal(err)
	}

	var out, errb bytes.Buffer
	if code := run([]string{"partition", "reassign", "--bootstrap", bs, "--topic", "mv", "--partition", "0", "--replicas", "2,3,9"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "INVALID_REPLICA_ASSIGNMENT") {
		t.Fatalf("reassign to a node that does not exist: exit %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	code := run([]string{"partition", "reassign", "--bootstrap", bs, "--topic", "mv", "--partition", "0", "--replicas", "2,3,4",
		"--http", c.Nodes[1].HTTPAddr(), "--timeout", "90s", "--interval", "100ms"}, &out, &errb)
	t.Logf("progress:\n%s", out.String())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"mv-0: reassignment to 2,3,4 started", "mv-0: moving: replicas 1,2,3,4; adding 4 (", "removing 1", "mv-0: done: replicas 2,3,4"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("no %q in the output", want)
		}
	}
	// Nothing in progress any more: following it again says done at once,
	// with the new replicas once the broker that answers the metadata
	// request has applied the end of the move (brokers apply the
	// controller's log each at its own pace).
	clustertest.Eventually(t, 10*time.Second, func() error {
		out.Reset()
		if code := run([]string{"partition", "reassign", "--bootstrap", bs, "--topic", "mv", "--partition", "0"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "done: replicas 2,3,4") {
			return fmt.Errorf("follow after the move: exit %d %q %s", code, out.String(), errb.String())
		}
		return nil
	})
	if code := run([]string{"partition", "reassign", "--bootstrap", bs, "--topic", "mv", "--partition", "0", "--cancel"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "NO_REASSIGNMENT_IN_PROGRESS") {
		t.Fatalf("cancel with no move: exit %d %s", code, errb.String())
	}

	clustertest.Eventually(t, 30*time.Second, func() error {
		if _, err := os.Stat(dir1); !os.IsNotExist(err) {
			return fmt.Errorf("node 1 still has %s: %v", dir1, err)
		}
		return nil
	})
	cons := c.Client(kgo.ConsumeTopics("mv"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := clustertest.ConsumeAll(t, cons, total, 60*time.Second)[0]
	for i, r := range got {
		if want := fmt.Sprintf("r%04d", i); string(r.Value) != want {
			t.Fatalf("record %d is %q, want %q", i, r.Value, want)
		}
	}
	// The new replica holds the whole log too.
	r4, ok := c.Nodes[3].Replica("mv", 0)
	if !ok || r4.Log().EndOffset() < int64(total) {
		t.Fatalf("node 4's replica: %v", ok)
	}
}
