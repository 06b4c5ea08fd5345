// Package clustertest starts clusters of real raftlog nodes (cluster
// member, Kafka front end and HTTP listener: cluster/node) inside one test
// process, on loopback ports, with logs routed to the test. Cluster,
// node and client tests share it.
package clustertest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlog/raftlog/cluster"
	"github.com/raftlog/raftlog/cluster/node"
	"github.com/raftlog/raftlog/cluster/node/freeport"
	"github.com/raftlog/raftlog/log/testkit"
	"github.com/raftlog/raftlog/replication"
	"github.com/raftlog/raftlog/replication/faultnet"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Cluster is a set of nodes of one cluster.
type Cluster struct {
	T     testing.TB
	Nodes []*node.Node
	Cfgs  []node.Config
	// Net carries every Raft connection between the nodes: Net.Partition
	// and friends cut them (gossip and Kafka traffic are not affected).
	Net *faultnet.Network
	// Bootstrap holds the nodes' advertised Kafka addresses.
	Bootstrap []string
	mu        sync.Mutex
	down      map[int]bool
}

// FreePort returns a loopback address with a port free right now (see
// cluster/node/freeport).
func FreePort(t testing.TB) string {
	t.Helper()
	a, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Start starts n nodes (ids 1..n) that form one cluster, and waits until
// it is ready.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartWith(t, n, nil)
}

// StartWith is Start with node i's (0-based) configuration passed to
// configure (when not nil) before the node starts. The defaults: fast
// Raft timings (400 ms), local gossip, one boot id for all, topics of 3
// partitions by default, logs at warn (RAFTLOG_TEST_DEBUG=1: debug).
func StartWith(t testing.TB, n int, configure func(i int, cfg *node.Config)) *Cluster {
	t.Helper()
	logger := testkit.Logger(t, hclog.Warn)
	c := &Cluster{T: t, down: map[int]bool{}, Net: faultnet.New()}
	var seeds []string
	for i := 0; i < n; i++ {
		seeds = append(seeds, FreePort(t))
	}
	base := t.TempDir()
	for i := 0; i < n; i++ {
		raftAddr := FreePort(t)
		cfg := node.Config{
			KafkaAddr: FreePort(t), HTTPAddr: FreePort(t),
			Cluster: cluster.Config{
				NodeID: int32(i + 1), DataDir: filepath.Join(base, fmt.Sprintf("node-%d", i+1)),
				RaftAddr: raftAddr, GossipAddr: seeds[i], Join: seeds,
				ControllerVoters: min(3, n), ExpectNodes: n, BootID: "boot-1", LocalGossip: true,
				DefaultPartitions: 3, DefaultReplication: -1,
				Dial:   c.Net.Dialer(raftAddr),
				Logger: logger.Named(fmt.Sprintf("n%d", i+1)),
				Raft: replication.RaftConfig{HeartbeatTimeout: 400 * time.Millisecond, ElectionTimeout: 400 * time.Millisecond,
					LeaderLeaseTimeout: 200 * time.Millisecond},
			},
		}
		if configure != nil {
			configure(i, &cfg)
		}
		c.Cfgs = append(c.Cfgs, cfg)
		nd, err := node.Start(cfg)
		if err != nil {
			t.Fatalf("start node %d: %v", i+1, err)
		}
		c.Nodes = append(c.Nodes, nd)
		c.Bootstrap = append(c.Bootstrap, cmp.Or(cfg.Cluster.AdvertisedKafkaAddr, nd.KafkaAddr()))
	}
	t.Cleanup(func() {
		for i, nd := range c.Nodes {
			if !c.Down(i) {
				nd.Close()
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, nd := range c.Nodes {
		if err := nd.WaitReady(ctx); err != nil {
			t.Fatalf("node %d not ready: %v", i+1, err)
		}
	}
	return c
}

// Down reports whether node i (0-based) was killed or stopped.
func (c *Cluster) Down(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.down[i]
}

// ControllerLeader waits for a node to lead the controller (and so
// coordinate the consumer groups) and returns its index.
func (c *Cluster) ControllerLeader() int {
	c.T.Helper()
	lead := -1
	WaitFor(c.T, "a controller leader", 30*time.Second, func() bool {
		for i, nd := range c.Nodes {
			if !c.Down(i) && nd.ControllerID() == nd.ID() {
				lead = i
				return true
			}
		}
		return false
	})
	return lead
}

// IsolateRaft cuts node i's Raft links to every other node (gossip and
// Kafka traffic keep flowing); Net.Heal restores them.
func (c *Cluster) IsolateRaft(i int) {
	addrs := make([]string, len(c.Cfgs))
	for j, cfg := range c.Cfgs {
		addrs[j] = cfg.Cluster.RaftAddr
	}
	c.Net.Isolate(addrs[i], addrs)
}

// Kill stops node i (0-based) as a crash would.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	c.down[i] = true
	c.mu.Unlock()
	c.Nodes[i].Kill()
}

// Stop shuts node i down cleanly.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	c.down[i] = true
	c.mu.Unlock()
	c.Nodes[i].Close()
}

// Restart starts node i again with its data and configuration.
func (c *Cluster) Restart(i int) {
	c.T.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		nd, err := node.Start(c.Cfgs[i])
		if err == nil {
			c.Nodes[i] = nd
			c.mu.Lock()
			c.down[i] = false
			c.mu.Unlock()
			return
		}
		if time.Now().After(deadline) {
			c.T.Fatalf("restart node %d: %v", i+1, err)
		}
		time.Sleep(50 * time.Millisecond) // ports being released: retry until the deadline
	}
}

// Client is a franz-go client seeded with every node, closed when the
// test ends.
func (c *Cluster) Client(opts ...kgo.Opt) *kgo.Client {
	c.T.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Bootstrap...)}, opts...)...)
	if err != nil {
		c.T.Fatal(err)
	}
	c.T.Cleanup(cl.Close)
	return cl
}

// CreateTopic creates a topic through the Kafka protocol and waits until
// every partition has a leader that takes a write (one record "warmup"
// per partition).
func (c *Cluster) CreateTopic(name string, partitions int32, rf int16) {
	c.T.Helper()
	adm := kadm.NewClient(c.Client())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		resp, err := adm.CreateTopic(ctx, partitions, rf, nil, name)
		if errors.Is(err, kerr.TopicAlreadyExists) || (err == nil && (resp.Err == nil || errors.Is(resp.Err, kerr.TopicAlreadyExists))) {
			break
		}
		if ctx.Err() != nil {
			c.T.Fatalf("create topic %s: %v %v", name, err, resp.Err)
		}
		time.Sleep(100 * time.Millisecond) // the cluster is forming: retry until the deadline
	}
	cl := c.Client(kgo.DefaultProduceTopic(name), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := int32(0); p < partitions; p++ {
		for {
			err := cl.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte("warmup")}).FirstErr()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				c.T.Fatalf("partition %d of %s takes no writes: %v", p, name, err)
			}
		}
	}
}

// Produce writes n records (keys k0.., value "v") to topic and waits for
// each to be acknowledged.
func (c *Cluster) Produce(topic string, n int) {
	c.T.Helper()
	prod := c.Client(kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		if err := prod.ProduceSync(ctx, &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")}).FirstErr(); err != nil {
			c.T.Fatal(err)
		}
	}
}

// ConsumeAll reads every record of topic from the start until want records
// (warm-up records excluded) were seen, returning them per partition.
func ConsumeAll(t *testing.T, cl *kgo.Client, want int, timeout time.Duration) map[int32][]*kgo.Record {
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

// WaitFor checks cond until it holds, and fails the test saying what it
// waited for once timeout has passed.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, what, timeout, cond)
}

// Eventually checks check until it returns nil, and fails the test with
// its last error once timeout has passed.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	testkit.Eventually(t, timeout, check)
}
