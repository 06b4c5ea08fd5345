package node_test

import (
	"context"
	"errors"
	"fmt"
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

// TestKgoProduceConsume: franz-go's default producer (idempotent,
// acks=all) writes 100k records to 3 partitions × RF 3; a consumer reads
// them all back, in order per partition.
func TestKgoProduceConsume(t *testing.T) {
	c := clustertest.Start(t, 3)
	c.CreateTopic("events", 3, 3)
	const total = 100_000
	prod := c.Client(kgo.DefaultProduceTopic("events"), kgo.ProducerLinger(2*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := 0; i < total; i++ {
		wg.Add(1)
		r := &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i%97)), Value: []byte(fmt.Sprintf("v%06d", i))}
		prod.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	cons := c.Client(kgo.ConsumeTopics("events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := clustertest.ConsumeAll(t, cons, total, 120*time.Second)
	seen := map[string]bool{}
	for p, recs := range got {
		var last int64 = -1
		// Per key, values must come in the order produced (one key, one
		// partition, one producer).
		byKey := map[string]string{}
		for _, r := range recs {
			if r.Offset <= last {
				t.Fatalf("partition %d: offset %d after %d", p, r.Offset, last)
			}
			last = r.Offset
			if prev := byKey[string(r.Key)]; prev != "" && string(r.Value) <= prev {
				t.Fatalf("partition %d key %s: %s after %s", p, r.Key, r.Value, prev)
			}
			byKey[string(r.Key)] = string(r.Value)
			if seen[string(r.Value)] {
				t.Fatalf("duplicate %s", r.Value)
			}
			seen[string(r.Value)] = true
		}
	}
	if len(seen) != total {
		t.Fatalf("read %d distinct records of %d", len(seen), total)
	}
}

// TestLeaderFailover: the process leading a partition goes away while a
// producer runs; production resumes through the new leader and nothing
// acknowledged is missing.
func TestLeaderFailover(t *testing.T) {
	c := clustertest.Start(t, 3)
	c.CreateTopic("fo", 1, 3)
	prod := c.Client(kgo.DefaultProduceTopic("fo"), kgo.RecordRetries(1000), kgo.RecordDeliveryTimeout(60*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	acked := map[string]bool{}
	produce := func(from, n int) {
		for i := from; i < from+n; i++ {
			v := fmt.Sprintf("r%05d", i)
			if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", v, err)
			}
			acked[v] = true
		}
	}
	produce(0, 200)
	leader := -1
	for i, nd := range c.Nodes {
		if _, err := nd.LeaderPartition("fo", 0); err == nil {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no leader of fo-0")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Kill(leader)
	}()
	produce(200, 200)
	<-done
	cons := c.Client(kgo.ConsumeTopics("fo"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := clustertest.ConsumeAll(t, cons, len(acked), 60*time.Second)
	for _, r := range got[0] {
		delete(acked, string(r.Value))
	}
	if len(acked) > 0 {
		t.Fatalf("%d acknowledged records missing after failover", len(acked))
	}
}

// TestPartitionLimitRefused: a topic past the per-node partition limit is
// refused with POLICY_VIOLATION and a message naming the limit, also
// when only validated, and so is growing one past it; nothing is created.
func TestPartitionLimitRefused(t *testing.T) {
	c := clustertest.StartWith(t, 1, func(_ int, cfg *node.Config) { cfg.Cluster.MaxPartitionsPerNode = 4 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := kadm.NewClient(c.Client())
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, "small"); err != nil {
		t.Fatal(err)
	}
	refused := func(what string, err error, msg string) {
		t.Helper()
		if !errors.Is(err, kerr.PolicyViolation) || !strings.Contains(msg, "over its limit of 4 (--max-partitions-per-node)") {
			t.Fatalf("%s: %v %q, want POLICY_VIOLATION naming the limit", what, err, msg)
		}
	}
	for _, validate := range []bool{true, false} {
		create := adm.CreateTopics
		if validate {
			create = adm.ValidateCreateTopics
		}
		r, err := create(ctx, 2, 1, nil, "big")
		if err != nil {
			t.Fatal(err)
		}
		refused(fmt.Sprintf("create a topic past the limit (validate only: %v)", validate), r["big"].Err, r["big"].ErrMessage)
	}
	cr, err := adm.CreatePartitions(ctx, 2, "small")
	if err != nil {
		t.Fatal(err)
	}
	refused("grow a topic past the limit", cr["small"].Err, cr["small"].ErrMessage)
	if cr, err := adm.CreatePartitions(ctx, 1, "small"); err != nil || cr.Error() != nil {
		t.Fatalf("grow to the limit: %v %v", err, cr.Error())
	}
	if topics := c.Nodes[0].Meta().Topics(); len(topics) != 1 || len(topics[0].Partitions) != 4 {
		t.Fatalf("topics after the refusals: %+v", topics)
	}
}

// TestCreateTopicsAnswersWhenLed: CreateTopics and CreatePartitions answer
// once the node answering has a leader for every partition they made, so
// a client writes at once instead of meeting LEADER_NOT_AVAILABLE. The
// same request retried by the same client, through any node, succeeds as
// the first did; anyone else, or the same client asking for something
// else, hears TOPIC_ALREADY_EXISTS.
func TestCreateTopicsAnswersWhenLed(t *testing.T) {
	c := clustertest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := c.Client()
	const via = 1 // a node that need not be the controller's leader
	led := func(topic string, want int) {
		t.Helper()
		tp, ok := c.Nodes[via].Meta().Topic(topic)
		if !ok || len(tp.Partitions) != want {
			t.Fatalf("topic %s on node %d: %v, %d partitions, want %d", topic, via+1, ok, len(tp.Partitions), want)
		}
		for _, st := range c.Nodes[via].PartitionStates(tp) {
			if st.Leader < 0 {
				t.Fatalf("%s-%d has no leader on the node that answered", topic, st.Partition)
			}
		}
	}
	create := kmsg.NewPtrCreateTopicsRequest()
	create.TimeoutMillis = 30000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "led", 6, 3
	create.Topics = append(create.Topics, rt)
	resp, err := create.RequestWith(ctx, cl.Broker(int(c.Nodes[via].ID())))
	if err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create: %v %+v", err, resp)
	}
	led("led", 6)
	again := func(cl *kgo.Client, node int, partitions int32) int16 {
		t.Helper()
		req := kmsg.NewPtrCreateTopicsRequest()
		req.TimeoutMillis = 30000
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "led", partitions, 3
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl.Broker(int(c.Nodes[node].ID())))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].ErrorCode
	}
	if code := again(cl, 2, 6); code != 0 {
		t.Fatalf("the same request retried through another node: %v", kerr.ErrorForCode(code))
	}
	other := c.Client(kgo.ClientID("another"))
	if code := again(other, via, 6); code != kerr.TopicAlreadyExists.Code {
		t.Fatalf("the same request from another client: %v, want TOPIC_ALREADY_EXISTS", kerr.ErrorForCode(code))
	}
	if code := again(cl, via, 7); code != kerr.TopicAlreadyExists.Code {
		t.Fatalf("another partition count from the same client: %v, want TOPIC_ALREADY_EXISTS", kerr.ErrorForCode(code))
	}
	grow := kmsg.NewPtrCreatePartitionsRequest()
	grow.TimeoutMillis = 30000
	gt := kmsg.NewCreatePartitionsRequestTopic()
	gt.Topic, gt.Count = "led", 9
	grow.Topics = append(grow.Topics, gt)
	gresp, err := grow.RequestWith(ctx, cl.Broker(int(c.Nodes[via].ID())))
	if err != nil || gresp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create partitions: %v %+v", err, gresp)
	}
	led("led", 9)
}
