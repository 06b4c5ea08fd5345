package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlog/raftlog/cluster/clustertest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// testCluster is n full nodes (cluster + Kafka front end) in this process
// on loopback.
type testCluster struct {
	t         *testing.T
	flags     []serveFlags
	nodes     []*runningNode
	bootstrap []string
	logger    hclog.Logger
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return clustertest.FreePort(t)
}

func startTestCluster(t *testing.T, n int) *testCluster {
	t.Helper()
	return startTestClusterWith(t, n, nil)
}

// startTestClusterWith is startTestCluster with adjust applied to each
// node's flags (i is 0-based) before it starts; the bootstrap list holds
// the advertised Kafka addresses.
func startTestClusterWith(t *testing.T, n int, adjust func(i int, f *serveFlags)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, logger: hclog.New(&hclog.LoggerOptions{Level: hclog.LevelFromString(envOr("RAFTLOG_TEST_LOG", "error")), Output: testLogWriter{t}})}
	var gossip []string
	for i := 0; i < n; i++ {
		gossip = append(gossip, freeAddr(t))
	}
	dir := t.TempDir()
	for i := 0; i < n; i++ {
		f := serveFlags{
			nodeID: i + 1, dataDir: filepath.Join(dir, fmt.Sprintf("node-%d", i+1)), kafkaAddr: freeAddr(t),
			raftAddr: freeAddr(t), gossipAddr: gossip[i], httpAddr: freeAddr(t), join: strings.Join(gossip, ","),
			controllerVoters: min(3, n), expectNodes: n, partitions: 3, replication: -1, bootIDFile: "/proc/sys/kernel/random/boot_id",
		}
		if adjust != nil {
			adjust(i, &f)
		}
		c.flags = append(c.flags, f)
		c.bootstrap = append(c.bootstrap, cmp.Or(f.advertisedKafka, f.kafkaAddr))
		nd, err := startNode(f, c.logger, true)
		if err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, nd)
	}
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			if nd != nil {
				nd.close()
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, nd := range c.nodes {
		if err := nd.node.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (c *testCluster) client(opts ...kgo.Opt) *kgo.Client {
	c.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.bootstrap...)}, opts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

func (c *testCluster) createTopic(name string, partitions int32, rf int16) {
	c.t.Helper()
	adm := kadm.NewClient(c.client())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		resp, err := adm.CreateTopic(ctx, partitions, rf, nil, name)
		if errors.Is(err, kerr.TopicAlreadyExists) || (err == nil && (resp.Err == nil || errors.Is(resp.Err, kerr.TopicAlreadyExists))) {
			break
		}
		if ctx.Err() != nil {
			c.t.Fatalf("create topic %s: %v %v", name, err, resp.Err)
		}
		time.Sleep(100 * time.Millisecond) // the cluster is forming: retry until the deadline
	}
	// Wait until every partition has a leader that takes writes.
	cl := c.client(kgo.DefaultProduceTopic(name), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := int32(0); p < partitions; p++ {
		for {
			err := cl.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte("warmup")}).FirstErr()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				c.t.Fatalf("partition %d of %s takes no writes: %v", p, name, err)
			}
		}
	}
}

// consumeAll reads every record of topic from the start until want records
// (warm-up records excluded) were seen, returning them per partition.
func consumeAll(t *testing.T, cl *kgo.Client, want int, timeout time.Duration) map[int32][]*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out := map[int32][]*kgo.Record{}
	n := 0
	for n < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d", n, want)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Value) == "warmup" {
				return
			}
			out[r.Partition] = append(out[r.Partition], r)
			n++
		})
	}
	return out
}

// TestKgoProduceConsume: franz-go's default producer (idempotent,
// acks=all) writes 100k records to 3 partitions × RF 3; a consumer reads
// them all back, in order per partition.
func TestKgoProduceConsume(t *testing.T) {
	c := startTestCluster(t, 3)
	c.createTopic("events", 3, 3)
	const total = 100_000
	prod := c.client(kgo.DefaultProduceTopic("events"), kgo.ProducerLinger(2*time.Millisecond))
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
	cons := c.client(kgo.ConsumeTopics("events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := consumeAll(t, cons, total, 120*time.Second)
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
	c := startTestCluster(t, 3)
	c.createTopic("fo", 1, 3)
	prod := c.client(kgo.DefaultProduceTopic("fo"), kgo.RecordRetries(1000), kgo.RecordDeliveryTimeout(60*time.Second))
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
	for i, nd := range c.nodes {
		if _, err := nd.node.LeaderPartition("fo", 0); err == nil {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no leader of fo-0")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.nodes[leader].node.Kill()
		c.nodes[leader].rpc.Close()
	}()
	produce(200, 200)
	<-done
	c.nodes[leader] = nil
	cons := c.client(kgo.ConsumeTopics("fo"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := consumeAll(t, cons, len(acked), 60*time.Second)
	for _, r := range got[0] {
		delete(acked, string(r.Value))
	}
	if len(acked) > 0 {
		t.Fatalf("%d acknowledged records missing after failover", len(acked))
	}
}
