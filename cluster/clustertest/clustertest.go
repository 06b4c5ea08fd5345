// Package clustertest starts clusters of real raftlog nodes inside one
// test process, on loopback ports, with logs routed to the test.
package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlog/raftlog/cluster"
	"github.com/raftlog/raftlog/internal/freeport"
	"github.com/raftlog/raftlog/replication"
)

// Cluster is a set of nodes of one cluster.
type Cluster struct {
	T     testing.TB
	Nodes []*cluster.Node
	Cfgs  []cluster.Config
	mu    sync.Mutex
	down  map[int]bool
}

type writer struct {
	t  testing.TB
	mu sync.Mutex
	on bool
}

func (w *writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.on {
		w.t.Log(string(bytes.TrimRight(p, "\n")))
	}
	return len(p), nil
}

// FreePort returns a loopback address with a port free right now (see
// internal/freeport).
func FreePort(t testing.TB) string {
	t.Helper()
	a, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Start starts n nodes (ids 1..n) that form one cluster, and waits until
// it is ready. kafkaAddrs[i] is advertised as node i+1's Kafka address
// (nil: made up; the caller serves Kafka itself if it needs to).
func Start(t testing.TB, n int, kafkaAddrs []string) *Cluster {
	t.Helper()
	return StartWith(t, n, kafkaAddrs, nil)
}

// StartWith is Start with each node's configuration passed to configure
// (when not nil) before the node starts.
func StartWith(t testing.TB, n int, kafkaAddrs []string, configure func(*cluster.Config)) *Cluster {
	t.Helper()
	level := hclog.Warn
	if os.Getenv("RAFTLOG_TEST_DEBUG") != "" {
		level = hclog.Debug
	}
	w := &writer{t: t, on: true}
	logger := hclog.New(&hclog.LoggerOptions{Level: level, Output: w, Name: t.Name()})
	c := &Cluster{T: t, down: map[int]bool{}}
	var seeds []string
	for i := 0; i < n; i++ {
		seeds = append(seeds, FreePort(t))
	}
	base := t.TempDir()
	for i := 0; i < n; i++ {
		ka := fmt.Sprintf("127.0.0.1:%d", 1+i)
		if kafkaAddrs != nil {
			ka = kafkaAddrs[i]
		}
		cfg := cluster.Config{
			NodeID: int32(i + 1), DataDir: filepath.Join(base, fmt.Sprintf("node-%d", i+1)),
			AdvertisedKafkaAddr: ka, RaftAddr: FreePort(t), GossipAddr: seeds[i], Join: seeds,
			ControllerVoters: min(3, n), ExpectNodes: n, BootID: "boot-1", LocalGossip: true,
			Logger: logger.Named(fmt.Sprintf("n%d", i+1)),
			Raft: replication.RaftConfig{HeartbeatTimeout: 400 * time.Millisecond, ElectionTimeout: 400 * time.Millisecond,
				LeaderLeaseTimeout: 200 * time.Millisecond},
		}
		if configure != nil {
			configure(&cfg)
		}
		c.Cfgs = append(c.Cfgs, cfg)
		nd, err := cluster.Start(cfg)
		if err != nil {
			t.Fatalf("start node %d: %v", i+1, err)
		}
		c.Nodes = append(c.Nodes, nd)
	}
	t.Cleanup(func() {
		for i, nd := range c.Nodes {
			if !c.isDown(i) {
				nd.Close()
			}
		}
		w.mu.Lock()
		w.on = false
		w.mu.Unlock()
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

func (c *Cluster) isDown(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.down[i]
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

// Restart starts node i again with its data.
func (c *Cluster) Restart(i int) {
	c.T.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		nd, err := cluster.Start(c.Cfgs[i])
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

// WaitFor polls cond until it holds or the deadline passes.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
}
