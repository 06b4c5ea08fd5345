package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlog/raftlog/cmd/raftlog/internal/bench"
	"github.com/raftlog/raftlog/log/testkit"
)

// TestBenchProduceConsume runs `raftlog bench produce` then `consume`
// against a three-node cluster in this process, as `raftlog dev` starts
// it, and checks that the figures add up (not how fast they are).
func TestBenchProduceConsume(t *testing.T) {
	logger := testkit.Logger(t, hclog.Off)
	boot, stop, err := startBenchCluster(context.Background(), 3, t.TempDir(), logger, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logger.SetLevel(hclog.Off); stop() })
	bootstrap := strings.Join(boot, ",")

	benchRun := func(args ...string) (bench.Result, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := run(append([]string{"bench"}, args...), &out, &errb)
		if code != 0 {
			t.Fatalf("bench %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out.String(), errb.String())
		}
		var r bench.Result
		if strings.Contains(strings.Join(args, " "), "--json") {
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				t.Fatalf("bench %v: %v\n%s", args, err, out.String())
			}
		}
		return r, out.String() + errb.String()
	}

	p, perr := benchRun("produce", "--bootstrap", bootstrap, "--topic", "b", "--partitions", "3", "--replication-factor", "3",
		"--size", "200", "--duration", "20s", "--records", "3000", "--producers", "2", "--json")
	if !strings.Contains(perr, "created topic b: 3 partitions") {
		t.Errorf("no word of the topic's creation:\n%s", perr)
	}
	if p.Kind != "produce" || p.Records != 3000 || p.Errors != 0 || p.Bytes != 3000*200 || p.Partitions != 3 || p.Acks != "all" {
		t.Fatalf("produce: %+v", p)
	}
	if p.RecordsPerSec <= 0 || p.MBPerSec <= 0 || p.Elapsed <= 0 || p.Elapsed > 20*time.Second+time.Minute {
		t.Fatalf("produce rates: %+v", p)
	}
	if q := p.Latency; q.N != 3000 || q.P50 <= 0 || q.P50 > q.P99 || q.P99 > q.P999 || q.P999 > q.Max {
		t.Fatalf("produce latency quantiles out of order: %+v", q)
	}

	c, _ := benchRun("consume", "--bootstrap", bootstrap, "--topic", "b", "--duration", "30s", "--json")
	if c.Kind != "consume" || c.Records != p.Records || c.Bytes != p.Bytes || c.Errors != 0 || c.RecordsPerSec <= 0 {
		t.Fatalf("consume: %+v, produced %d", c, p.Records)
	}

	// A time-bound run stops by itself, and the summary names every figure.
	_, sum := benchRun("produce", "--bootstrap", bootstrap, "--topic", "b", "--size", "100", "--duration", "300ms", "--records", "0", "--rate", "500")
	for _, want := range []string{"produce b:", "records/s", "MB/s", "ack latency: p50", "p99", "p99.9", "errors: 0", "rate limit 500 records/s"} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
	_, sum = benchRun("consume", "--bootstrap", bootstrap, "--topic", "b", "--duration", "30s", "--records", "100", "--progress=false")
	if !strings.Contains(sum, "consume b: 100 records") || !strings.Contains(sum, "errors: 0") {
		t.Errorf("consume summary:\n%s", sum)
	}
}

func TestBenchFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench"},
		{"bench", "nope"},
		{"bench", "produce", "--acks", "2"},
		{"bench", "consume", "--from", "middle"},
		{"bench", "compare", "--sizes", "0"},
		{"bench", "compare", "--rounds", "0"},
		{"bench", "compare", "--half-runs", "0"},
		{"bench", "partitions", "--counts", "0"},
		{"bench", "partitions", "--idle", "0s"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)\n%s", args, code, errb.String())
		}
	}
}

// TestBenchPartitions runs `raftlog bench partitions` on a small count
// and checks that its row adds up (not how fast anything is): the crashed
// node led some partitions, and every figure is there.
func TestBenchPartitions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := filepath.Join(t.TempDir(), "raftlog")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	prof := t.TempDir()
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "partitions", "--bin", bin, "--counts", "6", "--idle", "1s", "--settle", "0s", "--dir", t.TempDir(), "--profile-dir", prof}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[2], "| 6 | ") {
		t.Fatalf("table:\n%s", out.String())
	}
	var led, cores, gib, largest, produce, failoverLed, failover, closing float64
	var killed int
	if _, err := fmt.Sscanf(lines[2], "| 6 | %f s | %f cores | %f GiB (%f) | %f s | %f s, %f s (%d leaders) | %f s |", &led, &cores, &gib, &largest, &produce, &failoverLed, &failover, &killed, &closing); err != nil {
		t.Fatalf("row %q: %v", lines[2], err)
	}
	if led <= 0 || cores <= 0 || gib <= 0 || largest <= 0 || largest > gib || produce <= 0 || failoverLed <= 0 || failoverLed > failover || failover <= 0 || killed < 1 || killed > 6 || closing <= 0 {
		t.Fatalf("row %q does not add up", lines[2])
	}
	for _, f := range []string{"idle-6.cpu.pprof", "idle-6.heap.pprof"} {
		if st, err := os.Stat(filepath.Join(prof, f)); err != nil || st.Size() == 0 {
			t.Fatalf("profile %s: %v", f, err)
		}
	}
}

// TestCompareHalfLoadJudged: the latency target is judged on the median
// of the last memory state's runs' p99s, each run shown.
func TestCompareHalfLoadJudged(t *testing.T) {
	res := func(recs float64, p99ms int) bench.Result {
		return bench.Result{RecordsPerSec: recs, TargetRate: 1000, Latency: bench.Quantiles{P99: time.Duration(p99ms) * time.Millisecond}}
	}
	r := compareRun{
		names:  []string{"ref", "mid", "last"},
		shapes: []compareShape{targetShape},
		cells: [][][]compareCell{{{
			{produce: res(1000, 0), consume: res(1000, 0)},
			{produce: res(1000, 0), consume: res(1000, 0)},
			{produce: res(600, 0), consume: res(800, 0)},
		}}},
		halfRuns: 3,
		halves: []halfRun{
			{memory: "free", last: []bench.Result{res(1000, 30), res(1000, 31), res(1000, 32)}, ref: res(1000, 50)},
			{memory: "page cache full", last: []bench.Result{res(1000, 17), res(1000, 19), res(1000, 25)}, ref: res(1000, 50)},
		},
	}
	var out bytes.Buffer
	r.writeHalfLoad(&out)
	for _, want := range []string{
		"| last, run 3 | page cache full | 1000 | 0.0 ms | 25.0 ms |",
		"| p99 produce latency < 20 ms at half that load | 19.0 ms (median of 17.0, 19.0, 25.0) | met |",
		"| last produce ≥ 0.50 × ref records/s, 1 KiB × 6 | 0.60 | met |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in\n%s", want, out.String())
		}
	}
	r.halves[1].last = []bench.Result{res(1000, 25), res(1000, 21), res(1000, 18)}
	out.Reset()
	r.writeHalfLoad(&out)
	if !strings.Contains(out.String(), "| 21.0 ms (median of 25.0, 21.0, 18.0) | **not met** |") {
		t.Errorf("two runs of three over 20 ms:\n%s", out.String())
	}
}
