package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/cluster/clustertest"
	"github.com/twmb/franz-go/pkg/kadm"
)

// TestAdminAndCLI: kadm's admin calls and the raftlog client commands
// against a running cluster.
func TestAdminAndCLI(t *testing.T) {
	c := clustertest.Start(t, 3)
	bs := strings.Join(c.Bootstrap, ",")
	var out, errb bytes.Buffer
	if code := run([]string{"topic", "create", "--bootstrap", bs, "--partitions", "2", "--config", "retention.ms=3600000", "cli"}, &out, &errb); code != 0 {
		t.Fatalf("topic create: %d %s", code, errb.String())
	}
	c.CreateTopic("cli", 2, 3) // waits for leaders (the create itself reports exists)
	out.Reset()
	if code := run([]string{"topic", "list", "--bootstrap", bs}, &out, &errb); code != 0 || !strings.Contains(out.String(), "cli\t2 partitions") {
		t.Fatalf("topic list: %d %q %s", code, out.String(), errb.String())
	}
	var in bytes.Buffer
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&in, "k%d:v%d\n", i, i)
	}
	if code := runProduce([]string{"--bootstrap", bs, "--topic", "cli", "--key-sep", ":"}, &in, &out, &errb); code != 0 {
		t.Fatalf("produce: %d %s", code, errb.String())
	}
	out.Reset()
	if code := runConsume([]string{"--bootstrap", bs, "--topic", "cli", "--exit"}, &out, &errb); code != 0 {
		t.Fatalf("consume: %d %s", code, errb.String())
	}
	if n := strings.Count(out.String(), "\tv"); n != 20 {
		t.Fatalf("consumed %d records:\n%s", n, out.String())
	}
	out.Reset()
	if code := run([]string{"topic", "describe", "--bootstrap", bs, "cli"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "partition 1 leader") {
		t.Fatalf("describe: %d %q %s", code, out.String(), errb.String())
	}

	adm := kadm.NewClient(c.Client())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := adm.CreatePartitions(ctx, 1, "cli"); err != nil {
		t.Fatal(err)
	}
	// Every node learns the new partition within a moment.
	for {
		td, err := adm.ListTopics(ctx, "cli")
		if err == nil && len(td["cli"].Partitions) == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("after CreatePartitions: %v %+v", err, td["cli"])
		}
		time.Sleep(100 * time.Millisecond) // retrying until the deadline
	}
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.bytes", Value: kadm.StringPtr("1048576")}}, "cli"); err != nil {
		t.Fatal(err)
	}
	// Every node applies the change within a moment.
	for {
		rcs, err := adm.DescribeTopicConfigs(ctx, "cli")
		if err != nil {
			t.Fatal(err)
		}
		rc, _ := rcs.On("cli", nil)
		got := map[string]string{}
		for _, cfg := range rc.Configs {
			got[cfg.Key] = cfg.MaybeValue()
		}
		if got["retention.bytes"] == "1048576" && got["retention.ms"] == "3600000" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("configs %v", got)
		}
		time.Sleep(100 * time.Millisecond) // retrying until the deadline
	}
	// The new partition elects its leader in a moment.
	var starts, ends kadm.ListedOffsets
	var err error
	for {
		starts, err = adm.ListStartOffsets(ctx, "cli")
		if err == nil {
			ends, err = adm.ListEndOffsets(ctx, "cli")
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // retrying until the deadline
	}
	s0, _ := starts.Lookup("cli", 0)
	e0, _ := ends.Lookup("cli", 0)
	if s0.Offset != 0 || e0.Offset <= 0 {
		t.Fatalf("offsets of cli-0: start %d end %d", s0.Offset, e0.Offset)
	}
	// DeleteRecords up to the end moves the log start.
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: "cli", Partition: 0, At: e0.Offset})
	dr, err := adm.DeleteRecords(ctx, os)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := dr.Lookup("cli", 0); !ok || r.Err != nil || r.LowWatermark != e0.Offset {
		t.Fatalf("delete records: %+v", r)
	}
	var ep kadm.OffsetForLeaderEpochRequest
	ep.Add("cli", 0, e0.LeaderEpoch)
	le, err := adm.OffsetForLeaderEpoch(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := le["cli"][0]; !ok || r.Err != nil || r.EndOffset <= 0 {
		t.Fatalf("offset for leader epoch: %+v", r)
	}
	if code := run([]string{"topic", "delete", "--bootstrap", bs, "cli"}, &out, &errb); code != 0 {
		t.Fatalf("topic delete: %d %s", code, errb.String())
	}
}
