package node_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlog/raftlog/cluster/clustertest"
	"github.com/raftlog/raftlog/cluster/node"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestConsumerGroupOnCluster: a kgo consumer group of three members on six
// partitions of a running cluster consumes everything; committed offsets
// survive the loss of the coordinator's node (the controller leader), and
// a new member resumes exactly where the group committed.
func TestConsumerGroupOnCluster(t *testing.T) {
	c := clustertest.Start(t, 3)
	c.CreateTopic("grp", 6, 3)
	const total = 600
	prod := c.Client(kgo.DefaultProduceTopic("grp"))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for i := 0; i < total; i++ {
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("g%04d", i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	var members []*kgo.Client
	for m := 0; m < 3; m++ {
		cl := c.Client(kgo.ConsumerGroup("g1"), kgo.ConsumeTopics("grp"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.DisableAutoCommit(), kgo.SessionTimeout(6*time.Second))
		members = append(members, cl)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, cl := range members {
		wg.Add(1)
		go func(cl *kgo.Client) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				pctx, pcancel := context.WithTimeout(ctx, time.Second)
				fs := cl.PollFetches(pctx)
				pcancel()
				fs.EachRecord(func(r *kgo.Record) {
					if string(r.Value) == "warmup" {
						return
					}
					mu.Lock()
					seen[string(r.Value)] = true
					mu.Unlock()
				})
				cl.CommitUncommittedOffsets(ctx)
			}
		}(cl)
	}
	// Done when every record was seen and the group committed every
	// partition to its end: the records all went to one partition (kgo's
	// sticky partitioner), so seeing them says nothing of the partitions
	// holding only a warm-up record, whose owner may not have polled or
	// committed yet (or lost them to a rebalance before committing).
	adm := kadm.NewClient(c.Client())
	ends, err := adm.ListEndOffsets(ctx, "grp")
	if err != nil {
		t.Fatal(err)
	}
	committedToEnd := func() bool {
		got, err := adm.FetchOffsets(ctx, "g1")
		if err != nil {
			return false
		}
		done := 0
		ends.Each(func(e kadm.ListedOffset) {
			if o, ok := got.Lookup(e.Topic, e.Partition); ok && o.Err == nil && o.At == e.Offset {
				done++
			}
		})
		return done == 6
	}
	start := time.Now()
	clustertest.Eventually(t, 90*time.Second, func() error {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == total && committedToEnd() {
			return nil
		}
		return fmt.Errorf("the group consumed %d of %d, committed to the end: %v", n, total, committedToEnd())
	})
	t.Logf("group consumed everything after %v", time.Since(start))
	close(stop)
	wg.Wait()
	for _, cl := range members {
		cl.CommitUncommittedOffsets(ctx)
		cl.LeaveGroup()
	}
	before, err := adm.FetchOffsets(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	nb := 0
	before.Each(func(o kadm.OffsetResponse) { nb++ })
	if nb != 6 {
		for i, nd := range c.Nodes {
			t.Logf("node %d groups with offsets %v: %+v", i+1, nd.Meta().OffsetGroups(), nd.Meta().GroupOffsets("g1", nil))
		}
		t.Fatalf("committed offsets of %d partitions, want 6: %+v", nb, before)
	}
	coord := c.ControllerLeader()
	t.Logf("killing node %d, the controller leader and group coordinator", coord+1)
	c.Kill(coord)
	var rest []string
	for i, b := range c.Bootstrap {
		if i != coord {
			rest = append(rest, b)
		}
	}
	// The survivors elect a new controller, the coordinator of groups.
	clustertest.WaitFor(t, "a new controller after the old one's node died", 30*time.Second, func() bool {
		for i, nd := range c.Nodes {
			if !c.Down(i) && (nd.ControllerID() < 0 || nd.ControllerID() == int32(coord+1)) {
				return false
			}
		}
		return true
	})
	cl2, err := kgo.NewClient(kgo.SeedBrokers(rest...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	adm2 := kadm.NewClient(cl2)
	var after kadm.OffsetResponses
	for {
		fctx, fcancel := context.WithTimeout(ctx, 3*time.Second)
		after, err = adm2.FetchOffsets(fctx, "g1")
		fcancel()
		if err == nil && after.Error() == nil && len(after) > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("offsets after the coordinator's loss: %v %v", err, after.Error())
		}
		time.Sleep(200 * time.Millisecond) // a new controller is being elected
	}
	before.Each(func(o kadm.OffsetResponse) {
		a, ok := after.Lookup(o.Topic, o.Partition)
		if !ok || a.At != o.At {
			t.Errorf("%s/%d: committed %d before the coordinator died, %d after", o.Topic, o.Partition, o.At, a.At)
		}
	})
	// A new member resumes at the committed offsets: nothing to read.
	fresh, err := kgo.NewClient(kgo.SeedBrokers(rest...), kgo.ConsumerGroup("g1"), kgo.ConsumeTopics("grp"))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	pctx, pcancel := context.WithTimeout(ctx, 8*time.Second)
	fs := fresh.PollFetches(pctx)
	pcancel()
	n := 0
	fs.EachRecord(func(r *kgo.Record) {
		if string(r.Value) != "warmup" {
			n++
		}
	})
	if n != 0 {
		t.Fatalf("a member joining after the commits read %d records again", n)
	}
}

// TestKcatBalancedConsumer: kcat -G (librdkafka's balanced consumer)
// reads a topic through a group.
func TestKcatBalancedConsumer(t *testing.T) {
	path, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("kcat is not installed")
		}
		t.Skip("kcat not installed")
	}
	c := clustertest.Start(t, 3)
	c.CreateTopic("kg", 2, 3)
	prod := c.Client(kgo.DefaultProduceTopic("kg"))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for i := 0; i < 40; i++ {
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("kg-%02d", i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(ctx, path, "-b", strings.Join(c.Bootstrap, ","), "-G", "kcat-group", "-o", "beginning", "-e",
		"-X", "auto.offset.reset=earliest", "-f", "%s\n", "kg")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat -G: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "kg-"); n != 40 {
		t.Fatalf("kcat -G read %d of 40 records:\n%s", n, out)
	}
}

// TestOffsetRetentionOnCluster: with a retention of 3 s, the offsets a
// memberless group committed are deleted 3 s after their commit (not
// after the node took the coordinator's role: a first group's expiry
// shows that lies behind), while those of a group whose member is alive
// stay, though committed earlier.
func TestOffsetRetentionOnCluster(t *testing.T) {
	c := clustertest.StartWith(t, 1, func(_ int, cfg *node.Config) {
		cfg.Groups.OffsetsRetention, cfg.Groups.OffsetsRetentionCheckInterval = 3*time.Second, 100*time.Millisecond
	})
	c.CreateTopic("ret", 1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prod := c.Client(kgo.DefaultProduceTopic("ret"))
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("r")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// "live": a member that consumes and commits, and stays.
	member := c.Client(kgo.ConsumerGroup("live"), kgo.ConsumeTopics("ret"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	for got := 0; got == 0; {
		fs := member.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatal(err)
		}
		got = fs.NumRecords()
	}
	if err := member.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(c.Client())
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: "ret", Partition: 0, At: 1})
	commit := func(group string) {
		t.Helper()
		if _, err := adm.CommitOffsets(ctx, group, offs); err != nil {
			t.Fatal(err)
		}
	}
	committed := func(group string) int {
		t.Helper()
		r, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		r.Each(func(o kadm.OffsetResponse) {
			if o.Err == nil && o.At >= 0 {
				n++
			}
		})
		return n
	}
	gone := func(group string) {
		t.Helper()
		clustertest.Eventually(t, 30*time.Second, func() error {
			if n := committed(group); n != 0 {
				return fmt.Errorf("%s still has %d offsets", group, n)
			}
			return nil
		})
	}
	// "first" expires at least 3 s after the node took the role.
	commit("first")
	gone("first")
	// "solo": committed after, with no member.
	before := time.Now()
	commit("solo")
	if committed("solo") != 1 || committed("live") != 1 {
		t.Fatalf("committed: solo %d, live %d", committed("solo"), committed("live"))
	}
	gone("solo")
	if d := time.Since(before); d < 3*time.Second-10*time.Millisecond {
		t.Fatalf("solo's offsets went %v after their commit, before the retention", d)
	}
	if n := committed("live"); n != 1 {
		t.Fatalf("the live group's offsets went with the memberless one's: %d left", n)
	}
}

// TestGroupSurvivesCoordinatorMove: the node coordinating a consumer
// group (the controller leader) is cut off from the others' Raft links and
// loses the role; the node taking it loads the group as its last
// rebalance stored it, so the members go on at their generation: a
// heartbeat at that generation is accepted, the members consume what is
// produced after the move, and none of them lost or gave up its
// partitions. (The node stays up: when a coordinator's node dies, kgo may
// end a member's session on the refused connection and rejoin, which
// rebalances the group whatever the new coordinator knows.)
func TestGroupSurvivesCoordinatorMove(t *testing.T) {
	c := clustertest.Start(t, 3)
	c.CreateTopic("keep", 2, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var mu sync.Mutex
	seen := map[string]bool{}
	changes := 0 // partitions revoked or lost after the group first settled
	settled := false
	var members []*kgo.Client
	for m := 0; m < 2; m++ {
		cl := c.Client(kgo.ConsumerGroup("keepers"), kgo.ConsumeTopics("keep"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			// Sessions and retries that outlast the election and the
			// load by far, on a machine as slow as -race on 2 cores
			// makes it: what is tested is that the new coordinator
			// knows the members, not how fast they reach it.
			kgo.SessionTimeout(45*time.Second), kgo.RetryTimeout(2*time.Minute), kgo.HeartbeatInterval(200*time.Millisecond),
			// Eager: a cooperative group that moved a partition rejoins
			// once more after its members settled (KIP-429), which
			// would move the generation on by design.
			kgo.Balancers(kgo.RangeBalancer()),
			kgo.OnPartitionsRevoked(func(context.Context, *kgo.Client, map[string][]int32) {
				mu.Lock()
				if settled {
					changes++
				}
				mu.Unlock()
			}),
			kgo.OnPartitionsLost(func(context.Context, *kgo.Client, map[string][]int32) {
				mu.Lock()
				if settled {
					changes++
				}
				mu.Unlock()
			}))
		members = append(members, cl)
		go func() {
			for ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				fs.EachRecord(func(r *kgo.Record) {
					mu.Lock()
					seen[string(r.Value)] = true
					mu.Unlock()
				})
			}
		}()
	}
	adm := kadm.NewClient(c.Client())
	// Settled: both members in one generation, the group Stable with
	// each owning a partition.
	type identity struct {
		id  string
		gen int32
	}
	var ids [2]identity
	clustertest.Eventually(t, 60*time.Second, func() error {
		for i, cl := range members {
			id, gen := cl.GroupMetadata()
			ids[i] = identity{id, gen}
		}
		if ids[0].gen <= 0 || ids[0].gen != ids[1].gen {
			return fmt.Errorf("members at generations %d and %d", ids[0].gen, ids[1].gen)
		}
		d, err := adm.DescribeGroups(ctx, "keepers")
		if err != nil {
			return err
		}
		g := d["keepers"]
		if g.State != "Stable" || len(g.Members) != 2 {
			return fmt.Errorf("group %s with %d members", g.State, len(g.Members))
		}
		for _, m := range g.Members {
			if a, ok := m.Assigned.AsConsumer(); !ok || len(a.Topics) != 1 || len(a.Topics[0].Partitions) != 1 {
				return fmt.Errorf("member %s assigned %+v", m.MemberID, m.Assigned)
			}
		}
		return nil
	})
	mu.Lock()
	settled = true
	mu.Unlock()
	t.Logf("group settled at generation %d", ids[0].gen)

	coord := c.ControllerLeader()
	t.Logf("cutting node %d, the controller leader and group coordinator, off the Raft links", coord+1)
	c.IsolateRaft(coord)
	clustertest.WaitFor(t, "the group coordinator to move", 30*time.Second, func() bool {
		id := c.Nodes[(coord+1)%3].ControllerID()
		return id > 0 && id != int32(coord+1)
	})

	// The new coordinator accepts a heartbeat at the settled generation.
	probe := c.Client()
	clustertest.Eventually(t, 60*time.Second, func() error {
		req := kmsg.NewPtrHeartbeatRequest()
		req.Group, req.MemberID, req.Generation = "keepers", ids[0].id, ids[0].gen
		hctx, hcancel := context.WithTimeout(ctx, 3*time.Second)
		defer hcancel()
		resp, err := req.RequestWith(hctx, probe)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	})
	prod := c.Client(kgo.DefaultProduceTopic("keep"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	for i := 0; i < 20; i++ {
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("after-%02d", i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	clustertest.Eventually(t, 60*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for i := 0; i < 20; i++ {
			if !seen[fmt.Sprintf("after-%02d", i)] {
				return fmt.Errorf("after-%02d not consumed", i)
			}
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if changes != 0 {
		t.Errorf("partitions revoked or lost %d times after the coordinator moved", changes)
	}
	for i, cl := range members {
		if id, gen := cl.GroupMetadata(); id != ids[i].id || gen != ids[i].gen {
			t.Errorf("member %d: %s at generation %d after the move, was %s at %d", i, id, gen, ids[i].id, ids[i].gen)
		}
	}
}
