package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// `raftlog bench partitions` measures what partitions cost a cluster:
// for each count, three `raftlog serve` processes (no partition limit)
// get a topic of that many partitions of replication factor 3, and the
// run times how long until every partition has a leader, the processes'
// CPU and resident memory while the cluster idles, one acks=all record to
// every partition, after the node leading the most partitions is killed
// with SIGKILL, how long until every partition it led has a new leader
// that takes an acks=all record, and how long the two left take to stop
// on SIGTERM. The crash comes after the idle stretch and the records,
// once the cluster is idle again.

// partitionsRow is one count's measurements.
type partitionsRow struct {
	partitions  int
	led         time.Duration // CreateTopics sent → every partition led
	idleCores   float64       // CPU time / wall time while idle
	rss         uint64        // resident bytes of the nodes after the idle stretch
	rssMax      uint64        // of the largest
	produce     time.Duration // one record to every partition
	killedLed   int           // partitions the killed node led
	failover    time.Duration // kill → each of those led again and written
	failoverLed time.Duration // kill → each of those led again
	close       time.Duration // closing the surviving nodes
	closeOver   bool          // a node did not stop within closeLimit
}

// closeLimit is how long the bench waits for a node to stop after
// SIGTERM before it kills it (systemd's default stop timeout); a node
// slower than that is reported, not taken for a failed run.
const closeLimit = 90 * time.Second

func runBenchPartitions(args []string, stdout, stderr io.Writer) int {
	c := newCommand("bench partitions", "", `For each count, start 3 raftlog serve processes, create a topic of that
many partitions (replication factor 3) and measure: until every partition
has a leader, the idle nodes' CPU and resident memory, one acks=all
record to every partition, and after a SIGKILL of the node leading the
most, until every partition it led is led again and takes a write.
Prints a Markdown table (docs/performance.md).`)
	counts := c.String("counts", "1000,3000", "partition counts, comma-separated")
	idle := c.Duration("idle", 10*time.Second, "how long the idle cluster's CPU is measured")
	settle := c.Duration("settle", 5*time.Second, "unmeasured wait between every partition having a leader and the idle measurement")
	timeout := c.Duration("timeout", 15*time.Minute, "give up on a count after this long")
	dir := c.String("dir", "", "directory for the clusters' files (default: a new temporary directory, removed at the end)")
	level := c.String("log-level", "off", "log level of the raftlog nodes")
	profiles := c.String("profile-dir", "", "write a CPU profile of node 1's first 20 s of creation (create-N.cpu.pprof) and of its idle stretch and a heap profile at its end to this directory (idle-N.cpu.pprof, idle-N.heap.pprof), and of each survivor's first 15 s of failover (failover-N-node-K.cpu.pprof, goroutines at 3 s and 10 s, its metrics once all are led and written)")
	bin := c.String("bin", "", "the raftlog binary the nodes run (default: this one)")
	noQuiesce := c.Bool("no-quiesce", false, "run the nodes with --no-quiesce (the reference quiescence is measured against)")
	saturate := c.Bool("saturate", false, "keep every CPU busy from this process (a spinning goroutine per CPU) while each count runs, as other work on the machine would")
	pos, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if code, ok := c.noArgs(pos, stderr); !ok {
		return code
	}
	var ns []int
	for _, s := range strings.Split(*counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 100000 {
			return c.fail(stderr, "--counts %q: want partition counts from 1 to 100000, comma-separated", *counts)
		}
		ns = append(ns, n)
	}
	if *idle <= 0 || *idle > time.Hour || *settle < 0 || *settle > time.Hour || *timeout <= 0 {
		return c.fail(stderr, "--idle must be in (0, 1h], --settle in [0, 1h], --timeout positive")
	}
	if *bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return c.fail(stderr, "the binary to run: %v", err)
		}
		*bin = exe
	}
	env, code, ok := newBenchEnv(c, stderr, *level, *dir, "raftlog-bench-partitions-")
	if !ok {
		return code
	}
	defer env.close()
	ctx, base := env.ctx, env.dir
	nodeArgs := []string{"--max-partitions-per-node", "-1", "--max-partitions", "-1", "--log-level", *level, "--pprof"}
	if *noQuiesce {
		nodeArgs = append(nodeArgs, "--no-quiesce")
	}
	writePartitionsHeader(stdout)
	for _, n := range ns {
		fmt.Fprintf(stderr, "%d partitions...\n", n)
		cctx, ccancel := context.WithTimeout(ctx, *timeout)
		if *saturate {
			spin(cctx, runtime.NumCPU())
		}
		row, err := benchPartitions(cctx, stderr, *bin, nodeArgs, n, filepath.Join(base, fmt.Sprintf("p%d", n)), *idle, *settle, *profiles)
		ccancel()
		if err != nil {
			return c.fail(stderr, "%d partitions: %v", n, err)
		}
		writePartitionsRow(stdout, row)
	}
	return 0
}

// benchPartitions measures one count on a new 3-node cluster.
func benchPartitions(ctx context.Context, progress io.Writer, bin string, nodeArgs []string, n int, dir string, idle, settle time.Duration, profiles string) (partitionsRow, error) {
	row := partitionsRow{partitions: n}
	if err := os.RemoveAll(dir); err != nil { // left by an earlier run with the same --dir
		return row, err
	}
	nodes, err := startBenchProcs(ctx, bin, 3, dir, nodeArgs)
	if err != nil {
		return row, err
	}
	defer func() {
		for _, p := range nodes {
			p.kill()
		}
	}()
	var boot []string
	for _, p := range nodes {
		boot = append(boot, p.kafka)
	}
	cl, err := kgo.NewClient(benchClientOpts(boot)...)
	if err != nil {
		return row, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	const topic = "partitions"

	created := make(chan error, 1)
	if profiles != "" {
		// Where creation's time goes: node 1's first 20 s of it.
		go func() {
			created <- fetchTo(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=20", nodes[0].http), filepath.Join(profiles, fmt.Sprintf("create-%d.cpu.pprof", n)))
		}()
	}
	start := time.Now()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 0 // answer once created: the leaders are waited for below
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, int32(n), 3
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return row, err
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		return row, fmt.Errorf("create the topic: %w", err)
	}
	leaders, err := awaitAllLed(ctx, adm, topic, n, -1)
	if err != nil {
		return row, err
	}
	row.led = time.Since(start)
	fmt.Fprintf(progress, "  every partition led after %v\n", row.led.Round(time.Millisecond))
	if profiles != "" {
		if err := <-created; err != nil {
			return row, fmt.Errorf("creation profile: %w", err)
		}
	}

	if err := sleepCtx(ctx, settle); err != nil {
		return row, err
	}
	profiled := make(chan error, 1)
	if profiles != "" {
		go func() {
			profiled <- fetchTo(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", nodes[0].http, max(1, int(idle.Seconds()))),
				filepath.Join(profiles, fmt.Sprintf("idle-%d.cpu.pprof", n)))
		}()
	}
	before, t0 := procsCPU(nodes), time.Now()
	if err := sleepCtx(ctx, idle); err != nil {
		return row, err
	}
	row.idleCores = (procsCPU(nodes) - before) / time.Since(t0).Seconds()
	for _, p := range nodes {
		r := p.resident()
		row.rss += r
		row.rssMax = max(row.rssMax, r)
	}
	fmt.Fprintf(progress, "  idle: %.2f cores, %.2f GiB resident\n", row.idleCores, float64(row.rss)/(1<<30))
	if profiles != "" {
		if err := <-profiled; err != nil {
			return row, fmt.Errorf("CPU profile: %w", err)
		}
		if err := fetchTo(ctx, fmt.Sprintf("http://%s/debug/pprof/heap?gc=1", nodes[0].http), filepath.Join(profiles, fmt.Sprintf("idle-%d.heap.pprof", n))); err != nil {
			return row, fmt.Errorf("heap profile: %w", err)
		}
	}

	all := make([]int32, n)
	for p := range all {
		all[p] = int32(p)
	}
	start = time.Now()
	if err := produceOneEach(ctx, cl, topic, all); err != nil {
		return row, err
	}
	row.produce = time.Since(start)
	fmt.Fprintf(progress, "  one record to each partition in %v\n", row.produce.Round(time.Millisecond))

	// Crash the node leading the most partitions, once the cluster is
	// idle again (its groups quiesced, unless --no-quiesce), as a node of
	// an idle cluster dies.
	if err := sleepCtx(ctx, settle); err != nil {
		return row, err
	}
	led := map[int32][]int32{}
	for p, ld := range leaders {
		led[ld] = append(led[ld], int32(p))
	}
	victim := int32(-1)
	for id, ps := range led {
		if victim < 0 || len(ps) > len(led[victim]) {
			victim = id
		}
	}
	row.killedLed = len(led[victim])
	var rest []string
	var left []*benchProc
	for _, p := range nodes {
		if int32(p.id) == victim {
			start = time.Now()
			p.kill()
		} else {
			rest = append(rest, p.kafka)
			left = append(left, p)
		}
	}
	fmt.Fprintf(progress, "  killed node %d, leader of %d partitions\n", victim, row.killedLed)
	failoverProfiled := make(chan error, 3*len(left))
	if profiles != "" {
		// Where the survivors' time goes while they take over: a CPU
		// profile of each one's first 15 s and its goroutines at 3 s and
		// 10 s.
		for _, p := range left {
			h, name := p.http, fmt.Sprintf("failover-%d-node-%d", n, p.id)
			go func() {
				failoverProfiled <- fetchTo(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=15", h), filepath.Join(profiles, name+".cpu.pprof"))
			}()
			for _, at := range []time.Duration{3 * time.Second, 10 * time.Second} {
				go func() {
					err := sleepCtx(ctx, at-time.Since(start))
					if err == nil {
						err = fetchTo(ctx, fmt.Sprintf("http://%s/debug/pprof/goroutine?debug=1", h), filepath.Join(profiles, fmt.Sprintf("%s-%v.goroutine.txt", name, at)))
					}
					failoverProfiled <- err
				}()
			}
		}
	}
	survivors, err := kgo.NewClient(benchClientOpts(rest)...)
	if err != nil {
		return row, err
	}
	defer survivors.Close()
	if _, err := awaitAllLed(ctx, kadm.NewClient(survivors), topic, n, victim); err != nil {
		return row, err
	}
	row.failoverLed = time.Since(start)
	if err := produceOneEach(ctx, survivors, topic, led[victim]); err != nil {
		return row, err
	}
	row.failover = time.Since(start)
	fmt.Fprintf(progress, "  led again after %v, written after %v\n", row.failoverLed.Round(time.Millisecond), row.failover.Round(time.Millisecond))
	if profiles != "" {
		for _, p := range left {
			if err := fetchTo(ctx, fmt.Sprintf("http://%s/metrics", p.http), filepath.Join(profiles, fmt.Sprintf("failover-%d-node-%d.metrics.txt", n, p.id))); err != nil {
				return row, fmt.Errorf("failover metrics: %w", err)
			}
		}
		for range cap(failoverProfiled) {
			if err := <-failoverProfiled; err != nil {
				return row, fmt.Errorf("failover profile: %w", err)
			}
		}
	}
	survivors.Close()
	cl.Close()
	start = time.Now()
	for _, p := range left {
		if err := p.stop(closeLimit); err != nil {
			fmt.Fprintf(progress, "  %v\n", err)
			row.closeOver = true
		}
	}
	row.close = time.Since(start)
	fmt.Fprintf(progress, "  closed after %v\n", row.close.Round(time.Millisecond))
	return row, nil
}

// spin keeps n goroutines busy until ctx ends.
func spin(ctx context.Context, n int) {
	for i := 0; i < n; i++ {
		go func() {
			for x := uint64(1); ctx.Err() == nil; x++ {
				for j := 0; j < 1<<16; j++ {
					x = x*6364136223846793005 + 1442695040888963407
				}
				_ = x
			}
		}()
	}
}

// benchClientOpts are the options of the bench's clients: their metadata
// may be as young as 50 ms, where kgo caches it for 5 s by default (the
// metadata requests of kadm too), which would have every figure measure
// that cache.
func benchClientOpts(seeds []string) []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MetadataMinAge(50 * time.Millisecond)}
}

// awaitAllLed polls the metadata until every partition of topic has a
// leader other than not (-1: any), and returns the leaders.
func awaitAllLed(ctx context.Context, adm *kadm.Client, topic string, n int, not int32) ([]int32, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		m, err := adm.Metadata(ctx, topic)
		if err == nil {
			if td, ok := m.Topics[topic]; ok && len(td.Partitions) == n {
				leaders := make([]int32, n)
				done := true
				for _, p := range td.Partitions {
					if p.Leader < 0 || p.Leader == not || p.Err != nil {
						done = false
						break
					}
					leaders[p.Partition] = p.Leader
				}
				if done {
					return leaders, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("not every partition led: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// produceOneEach writes one acks=all record to each of the partitions.
func produceOneEach(ctx context.Context, cl *kgo.Client, topic string, partitions []int32) error {
	rs := make([]*kgo.Record, len(partitions))
	for i, p := range partitions {
		rs[i] = &kgo.Record{Topic: topic, Partition: p, Value: []byte("x")}
	}
	return cl.ProduceSync(ctx, rs...).FirstErr()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// writePartitionsHeader and writePartitionsRow print the table a row at
// a time, so that the counts measured are shown when a later one fails.
func writePartitionsHeader(w io.Writer) {
	fmt.Fprintln(w, "| partitions (RF 3) | until every partition has a leader | idle CPU of the 3 nodes | resident memory of the 3 nodes (the largest) | one acks=all record to every partition | SIGKILL of the node leading the most: until each partition it led is led again, and written | closing the 2 left |")
	fmt.Fprintln(w, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
}

func writePartitionsRow(w io.Writer, r partitionsRow) {
	closing := fmt.Sprintf("%.2f s", r.close.Seconds())
	if r.closeOver {
		closing = fmt.Sprintf("over %v a node: killed", closeLimit)
	}
	fmt.Fprintf(w, "| %d | %.2f s | %.2f cores | %.2f GiB (%.2f) | %.2f s | %.2f s, %.2f s (%d leaders) | %s |\n",
		r.partitions, r.led.Seconds(), r.idleCores, float64(r.rss)/(1<<30), float64(r.rssMax)/(1<<30), r.produce.Seconds(), r.failoverLed.Seconds(), r.failover.Seconds(), r.killedLed, closing)
}
