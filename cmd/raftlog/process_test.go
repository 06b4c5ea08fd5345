package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlog/raftlog/cluster/clustertest"
	"github.com/raftlog/raftlog/cluster/clustertest/promtest"
	"github.com/raftlog/raftlog/cluster/node"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestThreeServeProcesses builds the binary and runs three `raftlog serve`
// processes configured through RAFTLOG_* variables; a kgo client produces
// and consumes; one process is killed with SIGKILL and production goes on;
// SIGTERM stops the rest cleanly.
func TestThreeServeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := filepath.Join(t.TempDir(), "raftlog")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	const n = 3
	var kafka, gossip, httpAddrs []string
	for i := 0; i < n; i++ {
		kafka = append(kafka, clustertest.FreePort(t))
		gossip = append(gossip, clustertest.FreePort(t))
		httpAddrs = append(httpAddrs, clustertest.FreePort(t))
	}
	dir := t.TempDir()
	procs := make([]*exec.Cmd, n)
	for i := 0; i < n; i++ {
		cmd := exec.Command(bin, "serve")
		cmd.Env = append(os.Environ(),
			fmt.Sprintf("RAFTLOG_NODE_ID=%d", i+1),
			"RAFTLOG_DATA_DIR="+filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			"RAFTLOG_KAFKA_ADDR="+kafka[i], "RAFTLOG_RAFT_ADDR="+clustertest.FreePort(t),
			"RAFTLOG_GOSSIP_ADDR="+gossip[i], "RAFTLOG_HTTP_ADDR="+httpAddrs[i],
			"RAFTLOG_JOIN="+strings.Join(gossip, ","), "RAFTLOG_LOG_LEVEL=warn", "RAFTLOG_LOG_JSON=true",
			"RAFTLOG_DEFAULT_PARTITIONS=2")
		// The collector: node 1 on serve's defaults, node 2 on GOGC (the
		// flag not given), node 3 on its flag over GOGC.
		cmd.Env = append(cmd.Env, [...][]string{{"GOGC=", "GOMEMLIMIT="}, {"GOGC=150", "GOMEMLIMIT=1GiB"},
			{"GOGC=150", "RAFTLOG_GC_PERCENT=250", "RAFTLOG_MEMORY_LIMIT_BYTES=-1"}}[i]...)
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("n%d.log", i+1)))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[i] = cmd
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
			logf.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logf.Name())
				t.Logf("log of node %d:\n%s", i+1, tail(string(b), 3000))
			}
		})
	}
	// /readyz on every node.
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < n; i++ {
		for {
			resp, err := http.Get("http://" + httpAddrs[i] + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d never ready", i+1)
			}
			time.Sleep(100 * time.Millisecond) // polling readiness with a deadline
		}
	}
	for i, want := range []struct{ gogc, limit float64 }{
		{node.DefaultGCPercent, float64(node.MemoryAvailable() / 2)}, {150, 1 << 30}, {250, math.MaxInt64},
	} {
		fams := promtest.Scrape(t, httpAddrs[i])
		gogc, _ := promtest.GaugeValue(fams, "go_gc_gogc_percent", nil)
		limit, _ := promtest.GaugeValue(fams, "go_gc_gomemlimit_bytes", nil)
		if gogc != want.gogc || limit != want.limit {
			t.Fatalf("node %d runs the collector at %v %% under %v bytes, want %v %% under %v", i+1, gogc, limit, want.gogc, want.limit)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Auto-created topic (2 partitions by RAFTLOG_DEFAULT_PARTITIONS).
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka...), kgo.DefaultProduceTopic("proc"), kgo.AllowAutoTopicCreation(),
		kgo.RecordRetries(1000), kgo.RecordDeliveryTimeout(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	acked := map[string]bool{}
	produce := func(from, count int) {
		for i := from; i < from+count; i++ {
			v := fmt.Sprintf("p%04d", i)
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", v, err)
			}
			acked[v] = true
		}
	}
	produce(0, 100)
	procs[2].Process.Signal(syscall.SIGKILL)
	procs[2].Wait()
	produce(100, 100)
	cons, err := kgo.NewClient(kgo.SeedBrokers(kafka[:2]...), kgo.ConsumeTopics("proc"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for len(acked) > 0 {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d acknowledged records never read", len(acked))
		}
		fs.EachRecord(func(r *kgo.Record) { delete(acked, string(r.Value)) })
	}
	// SIGTERM: clean shutdown, exit status 0.
	for i := 0; i < 2; i++ {
		procs[i].Process.Signal(syscall.SIGTERM)
	}
	for i := 0; i < 2; i++ {
		done := make(chan error, 1)
		go func() { done <- procs[i].Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("node %d exit after SIGTERM: %v", i+1, err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("node %d did not stop after SIGTERM", i+1)
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestServeRestartRejoins: three `raftlog serve` processes each started
// with --join naming node 1's gossip address, as a user starts them.
// Node 1 stops on SIGTERM (it leaves the membership) and starts again
// with the same flags, its seed list naming only itself: it rejoins the
// members it knows, and both sides' /v1/status list all three nodes.
func TestServeRestartRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := filepath.Join(t.TempDir(), "raftlog")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	const n = 3
	dir := t.TempDir()
	var args [n][]string
	var httpAddrs [n]string
	var gossip0 string
	for i := 0; i < n; i++ {
		gossip := clustertest.FreePort(t)
		if i == 0 {
			gossip0 = gossip
		}
		httpAddrs[i] = clustertest.FreePort(t)
		args[i] = []string{"serve", "--node-id", fmt.Sprint(i + 1), "--data-dir", filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			"--kafka-addr", clustertest.FreePort(t), "--raft-addr", clustertest.FreePort(t), "--gossip-addr", gossip,
			"--http-addr", httpAddrs[i], "--join", gossip0, "--log-level", "info"}
	}
	procs := make([]*exec.Cmd, n)
	start := func(i int) {
		cmd := exec.Command(bin, args[i]...)
		logf, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("n%d.log", i+1)), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[i] = cmd
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
			logf.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logf.Name())
				t.Logf("log of node %d:\n%s", i+1, tail(string(b), 3000))
			}
		})
	}
	for i := 0; i < n; i++ {
		start(i)
	}
	// members polls node i's /v1/status for the node ids of its members.
	members := func(i int) ([]int32, error) {
		hc := &http.Client{Timeout: 2 * time.Second}
		resp, err := hc.Get("http://" + httpAddrs[i] + "/v1/status")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var st node.Status
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			return nil, err
		}
		var ids []int32
		for _, b := range st.Brokers {
			ids = append(ids, b.NodeID)
		}
		slices.Sort(ids)
		return ids, nil
	}
	all := []int32{1, 2, 3}
	everyoneSeesAll := func(what string) {
		t.Helper()
		clustertest.Eventually(t, 90*time.Second, func() error {
			for i := 0; i < n; i++ {
				ids, err := members(i)
				if err != nil {
					return fmt.Errorf("%s: node %d: %v", what, i+1, err)
				}
				if !slices.Equal(ids, all) {
					return fmt.Errorf("%s: node %d lists members %v, want %v", what, i+1, ids, all)
				}
			}
			return nil
		})
	}
	everyoneSeesAll("first start")
	// Every node registered (its gossip address is in the metadata on
	// node 1's disk) before node 1 stops: /readyz says so.
	clustertest.Eventually(t, 60*time.Second, func() error {
		for i := 0; i < n; i++ {
			resp, err := http.Get("http://" + httpAddrs[i] + "/readyz")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("node %d not ready: %s", i+1, resp.Status)
			}
		}
		return nil
	})
	procs[0].Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- procs[0].Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("node 1 exit after SIGTERM: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("node 1 did not stop after SIGTERM")
	}
	clustertest.Eventually(t, 30*time.Second, func() error {
		ids, err := members(1)
		if err != nil || slices.Contains(ids, 1) {
			return fmt.Errorf("node 2 still lists node 1 after it left: %v %v", ids, err)
		}
		return nil
	})
	start(0)
	everyoneSeesAll("after node 1's restart")
}
