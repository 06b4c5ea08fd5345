package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/cluster/clustertest"
)

// TestClusterStatus: `raftlog cluster status` over the nodes of a 3-node
// cluster, every node given, then only the first (the others discovered
// from its gossip).
func TestClusterStatus(t *testing.T) {
	c := clustertest.Start(t, 3)
	const topic, partitions = "obs", 3
	c.CreateTopic(topic, partitions, 3)
	c.Produce(topic, 20)
	var addrs []string
	for _, nd := range c.Nodes {
		addrs = append(addrs, nd.HTTPAddr())
	}
	for _, given := range [][]string{addrs, addrs[:1]} {
		clustertest.Eventually(t, 20*time.Second, func() error {
			var out, errb bytes.Buffer
			code := run([]string{"cluster", "status", "--http", strings.Join(given, ",")}, &out, &errb)
			if code != 0 {
				return fmt.Errorf("cluster status --http %v: exit %d\n%s%s", given, code, out.String(), errb.String())
			}
			return checkStatusOutput(out.String(), addrs, topic, partitions)
		})
	}
	// Only the first asked: the others are live members of unknown
	// health, not down, and the command does not fail for them.
	clustertest.Eventually(t, 20*time.Second, func() error {
		var out, errb bytes.Buffer
		code := run([]string{"cluster", "status", "--http", addrs[0], "--discover=false"}, &out, &errb)
		if code != 0 {
			return fmt.Errorf("cluster status --discover=false: exit %d\n%s%s", code, out.String(), errb.String())
		}
		if strings.Contains(out.String(), "down") || strings.Count(out.String(), "not-asked") != 2 {
			return fmt.Errorf("cluster status --discover=false: want nodes 2 and 3 not asked, none down\n%s", out.String())
		}
		return nil
	})
}

// checkStatusOutput checks that the table names every node as ready and
// every partition with a leader and no commit lag.
func checkStatusOutput(out string, addrs []string, topic string, partitions int) error {
	nodes := map[string]bool{}
	parts := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 6 && f[2] == "ready":
			id, _ := strconv.Atoi(f[0])
			if id < 1 || id > len(addrs) || f[1] != addrs[id-1] {
				return fmt.Errorf("node row %q: unknown node or address\n%s", line, out)
			}
			nodes[f[0]] = true
		case len(f) >= 8 && f[0] == topic:
			if ld, err := strconv.Atoi(f[2]); err != nil || ld < 1 || ld > len(addrs) {
				return fmt.Errorf("partition row %q: no leader\n%s", line, out)
			}
			if hw, _ := strconv.Atoi(f[4]); hw <= 0 {
				return fmt.Errorf("partition row %q: high watermark %s\n%s", line, f[4], out)
			}
			parts[f[1]] = true
		}
	}
	for i := range addrs {
		if !nodes[strconv.Itoa(i+1)] {
			return fmt.Errorf("node %d not listed as ready\n%s", i+1, out)
		}
	}
	for p := 0; p < partitions; p++ {
		if !parts[strconv.Itoa(p)] {
			return fmt.Errorf("partition %s/%d not listed\n%s", topic, p, out)
		}
	}
	return nil
}

// TestClusterStatusUnreachable: a node that does not answer is listed as
// down and the command exits 1.
func TestClusterStatusUnreachable(t *testing.T) {
	addr := clustertest.FreePort(t) // closed again: nothing listens there
	var out, errb bytes.Buffer
	if code := run([]string{"cluster", "status", "--http", addr, "--timeout", "2s"}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), addr) || !strings.Contains(out.String(), "down") {
		t.Fatalf("the unreachable node is not listed as down:\n%s", out.String())
	}
}
