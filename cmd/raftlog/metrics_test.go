package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kgo"
)

// scrape fetches and parses one node's /metrics.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics of %s: %s", addr, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics of %s: %v", addr, err)
	}
	return fams
}

// gaugeValue is the value of the series of family name whose labels
// include want (nil: the family's only series); ok is false when absent.
func gaugeValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
		return 0, true
	}
	return 0, false
}

// checkClusterMetrics checks the scrapes of every node of a cluster
// holding topic with partitions partitions, replicated on every node.
func checkClusterMetrics(all []map[string]*dto.MetricFamily, topic string, partitions int) error {
	perPartition := []string{
		"raftlog_partition_log_start_offset", "raftlog_partition_log_end_offset", "raftlog_partition_high_watermark",
		"raftlog_partition_log_size_bytes", "raftlog_partition_log_segments", "raftlog_partition_raft_term",
		"raftlog_partition_leader", "raftlog_partition_gated", "raftlog_partition_commit_lag",
		"raftlog_partition_recovery_duration_seconds", "raftlog_partition_recovery_truncated_bytes",
	}
	perNode := []string{
		"raftlog_node_info", "raftlog_node_ready", "raftlog_node_replicas", "raftlog_node_partitions_led",
		"raftlog_node_under_replicated_partitions", "raftlog_node_gated_replicas", "raftlog_node_controller_leader",
		"raftlog_node_live_brokers",
		// The standard collectors.
		"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes",
		"process_open_fds",
	}
	var led, controllers float64
	leaders := make([]int, partitions)
	for i, fams := range all {
		node := i + 1
		for _, name := range perNode {
			if _, ok := gaugeValue(fams, name, nil); !ok {
				return fmt.Errorf("node %d: no %s", node, name)
			}
		}
		if v, _ := gaugeValue(fams, "raftlog_node_info", map[string]string{"node_id": strconv.Itoa(node)}); v != 1 {
			return fmt.Errorf("node %d: raftlog_node_info names another node", node)
		}
		if v, _ := gaugeValue(fams, "raftlog_node_replicas", nil); v != float64(partitions) {
			return fmt.Errorf("node %d: %v replicas, want %d", node, v, partitions)
		}
		for _, name := range []string{"raftlog_node_under_replicated_partitions", "raftlog_node_gated_replicas"} {
			if v, _ := gaugeValue(fams, name, nil); v != 0 {
				return fmt.Errorf("node %d: %s = %v, want 0", node, name, v)
			}
		}
		if v, _ := gaugeValue(fams, "raftlog_node_live_brokers", nil); v != 3 {
			return fmt.Errorf("node %d: %v live brokers, want 3", node, v)
		}
		v, _ := gaugeValue(fams, "raftlog_node_partitions_led", nil)
		led += v
		v, _ = gaugeValue(fams, "raftlog_node_controller_leader", nil)
		controllers += v
		for p := 0; p < partitions; p++ {
			lbl := map[string]string{"topic": topic, "partition": strconv.Itoa(p)}
			val := map[string]float64{}
			for _, name := range perPartition {
				v, ok := gaugeValue(fams, name, lbl)
				if !ok {
					return fmt.Errorf("node %d: no %s%v", node, name, lbl)
				}
				val[name] = v
			}
			start, end, hw := val["raftlog_partition_log_start_offset"], val["raftlog_partition_log_end_offset"], val["raftlog_partition_high_watermark"]
			if start > hw || hw > end {
				return fmt.Errorf("node %d %s/%d: start %v, high watermark %v, end %v out of order", node, topic, p, start, hw, end)
			}
			if lag := val["raftlog_partition_commit_lag"]; lag != end-hw {
				return fmt.Errorf("node %d %s/%d: commit lag %v, want %v", node, topic, p, lag, end-hw)
			}
			if val["raftlog_partition_log_segments"] < 1 || val["raftlog_partition_log_size_bytes"] <= 0 || val["raftlog_partition_raft_term"] < 1 {
				return fmt.Errorf("node %d %s/%d: segments %v, size %v, term %v", node, topic, p,
					val["raftlog_partition_log_segments"], val["raftlog_partition_log_size_bytes"], val["raftlog_partition_raft_term"])
			}
			if val["raftlog_partition_gated"] != 0 || val["raftlog_partition_recovery_truncated_bytes"] != 0 || val["raftlog_partition_recovery_duration_seconds"] < 0 {
				return fmt.Errorf("node %d %s/%d: gated %v, truncated %v, recovery %vs", node, topic, p, val["raftlog_partition_gated"],
					val["raftlog_partition_recovery_truncated_bytes"], val["raftlog_partition_recovery_duration_seconds"])
			}
			if val["raftlog_partition_leader"] == 1 {
				leaders[p]++
				if hw <= 0 {
					return fmt.Errorf("node %d leads %s/%d with high watermark %v", node, topic, p, hw)
				}
			}
		}
	}
	if led != float64(partitions) {
		return fmt.Errorf("partitions led summed over the nodes: %v, want %d", led, partitions)
	}
	for p, n := range leaders {
		if n != 1 {
			return fmt.Errorf("%s/%d: %d nodes report leading it", topic, p, n)
		}
	}
	if controllers != 1 {
		return fmt.Errorf("%v nodes lead the controller", controllers)
	}
	return nil
}

// eventually retries check until it returns nil, failing the test with
// its last error at the deadline: leadership may still move just after a
// topic is created.
func eventually(t *testing.T, timeout time.Duration, check func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal(err)
		case <-tick.C:
		}
	}
}

// TestMetricsAndClusterStatus: /metrics of each node of a 3-node cluster
// and `raftlog cluster status` over all of them.
func TestMetricsAndClusterStatus(t *testing.T) {
	c := startTestCluster(t, 3)
	const topic, partitions = "obs", 3
	c.createTopic(topic, partitions, 3)
	prod := c.client(kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 20; i++ {
		if err := prod.ProduceSync(ctx, &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var addrs []string
	for _, f := range c.flags {
		addrs = append(addrs, f.httpAddr)
	}

	eventually(t, 20*time.Second, func() error {
		var all []map[string]*dto.MetricFamily
		for _, a := range addrs {
			all = append(all, scrape(t, a))
		}
		return checkClusterMetrics(all, topic, partitions)
	})

	// Every node given, then only the first (the others are discovered
	// from its gossip).
	for _, given := range [][]string{addrs, addrs[:1]} {
		eventually(t, 20*time.Second, func() error {
			var out, errb bytes.Buffer
			code := run([]string{"cluster", "status", "--http", strings.Join(given, ",")}, &out, &errb)
			if code != 0 {
				return fmt.Errorf("cluster status --http %v: exit %d\n%s%s", given, code, out.String(), errb.String())
			}
			return checkStatusOutput(out.String(), addrs, topic, partitions)
		})
	}
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
	addr := freeAddr(t) // closed again: nothing listens there
	var out, errb bytes.Buffer
	if code := run([]string{"cluster", "status", "--http", addr, "--timeout", "2s"}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), addr) || !strings.Contains(out.String(), "down") {
		t.Fatalf("the unreachable node is not listed as down:\n%s", out.String())
	}
}
