package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "plot" {
		// Draw a finished run's plot again from its history.json.
		if err := replot(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "jepsen:", err)
			os.Exit(2)
		}
		return
	}
	if len(os.Args) < 2 || os.Args[1] != "run" {
		fmt.Fprintln(os.Stderr, "usage: go run ./jepsen run [--quick] [--nemesis kill,leader,pause,power,member,partition,partition-leader,power-all] [--net auto|netns|docker|loopback] [--seed N] [--duration D] [--flush-messages N] [--lin-timeout D] [--out DIR]\n       go run ./jepsen plot DIR")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	quick := fs.Bool("quick", false, "a short campaign: 60 s of faults, every nemesis at least once (about 3 minutes in all)")
	nemeses := fs.String("nemesis", "", "faults to inject, comma separated, of kill, leader, pause, power, member, partition, partition-leader, power-all (default: all but power-all; the partitions only where network namespaces can be made)")
	network := fs.String("net", "auto", "where nodes run: netns (a network namespace each; needs root), docker (a container each of the FROM scratch image, on a private Docker network; needs root and a Docker engine), loopback, or auto (netns when possible)")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()%1e9), "seed of the fault schedule (a failing seed reproduces the schedule)")
	duration := fs.Duration("duration", 5*time.Minute, "how long the faults go on (--quick: 60s)")
	nodes := fs.Int("nodes", 3, "cluster size (3 or 5)")
	producers := fs.Int("producers", 4, "concurrent producers")
	partitions := fs.Int("partitions", 4, "partitions of the test topic")
	out := fs.String("out", "", "results directory (default results/<time>)")
	flushMessages := fs.Int("flush-messages", 0, "flush.messages of the test topics (1: fsync every append; 0: the default, no fsync)")
	linTimeout := fs.Duration("lin-timeout", 5*time.Minute, "time allowed to the linearizability check (past it the result is Unknown, not an anomaly)")
	fs.Parse(os.Args[2:])
	if *quick {
		*duration = 60 * time.Second
	}
	if *out == "" {
		*out = filepath.Join("results", time.Now().UTC().Format("20060102-150405"))
	}
	if *network == "auto" {
		*network = "loopback"
		if err := netnsUsable(); err == nil {
			*network = "netns"
		} else if os.Getenv("CI") == "true" {
			// CI must cut the network: a run without partitions is not
			// the campaign it asks for.
			fmt.Fprintf(os.Stderr, "jepsen: CI=true and %v\n", err)
			os.Exit(2)
		}
	}
	if *nemeses == "" {
		*nemeses = "kill,leader,pause,power,member"
		if *network == "netns" || *network == "docker" {
			*nemeses += ",partition,partition-leader"
		}
	}
	cfg := runConfig{Seed: *seed, Nemeses: strings.Split(*nemeses, ","), Duration: *duration, Nodes: *nodes,
		Producers: *producers, Partitions: *partitions, Out: *out, GoVersion: runtime.Version(), Net: *network, LinTimeout: *linTimeout, FlushMessages: *flushMessages}
	for _, k := range cfg.Nemeses {
		if !knownNemeses[k] {
			fmt.Fprintf(os.Stderr, "jepsen: unknown nemesis %q\n", k)
			os.Exit(2)
		}
		if partitionKinds[k] && cfg.Net == "loopback" {
			fmt.Fprintf(os.Stderr, "jepsen: nemesis %s cuts the network between nodes: it needs --net netns or docker (root and iproute2)\n", k)
			os.Exit(2)
		}
	}
	handleInterrupts()
	res, err := run(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "jepsen:", err)
		os.Exit(2)
	}
	if !res.OK() {
		os.Exit(1)
	}
}

type runConfig struct {
	Seed       uint64
	Nemeses    []string
	Duration   time.Duration
	Nodes      int
	Producers  int
	Partitions int
	Out        string
	GoVersion  string
	Net        string // netns or loopback
	LinTimeout time.Duration
	// FlushMessages is the topics' flush.messages (0: the default, no
	// fsync per append).
	FlushMessages int
}

var knownNemeses = map[string]bool{"member": true, "kill": true, "leader": true, "pause": true, "power": true, "power-all": true, "partition": true, "partition-leader": true}

// lossBound reports whether the run includes a fault that replication
// cannot survive without fsync (every node losing power at once) under a
// flush policy that does not fsync every append: acknowledged writes past
// the most complete surviving log may be lost, and what follows from that
// (their offsets reused, readers and the register going back) is the
// documented bound, measured rather than counted as anomalies.
func (c runConfig) lossBound() bool {
	if c.FlushMessages == 1 {
		return false
	}
	for _, k := range c.Nemeses {
		if k == "power-all" {
			return true
		}
	}
	return false
}

// boundKinds are the anomalies a coordinated power loss may cause.
var boundKinds = []string{"lost", "inconsistent-offset", "nonmonotonic-poll", "nonlinearizable"}

// fault is one injected fault, for the report.
type fault struct {
	Kind   string  `json:"kind"`
	Node   int     `json:"node"`
	Start  float64 `json:"start"`
	End    float64 `json:"end"`
	Detail string  `json:"detail,omitempty"`
	// Recovery is the seconds from the heal to the next acknowledged write.
	Recovery float64 `json:"recovery"`
}

const topic = "jepsen"

func run(cfg runConfig) (Result, error) {
	// A run starts from nothing: results of an earlier run in the same
	// directory (its node data above all) are removed.
	if err := os.RemoveAll(cfg.Out); err != nil {
		return Result{}, err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return Result{}, err
	}
	logf, err := os.Create(filepath.Join(cfg.Out, "run.log"))
	if err != nil {
		return Result{}, err
	}
	defer logf.Close()
	say := func(format string, a ...any) {
		line := fmt.Sprintf("%s "+format, append([]any{time.Now().UTC().Format("15:04:05.000")}, a...)...)
		fmt.Println(line)
		fmt.Fprintln(logf, line)
	}
	say("seed %d nemeses %v duration %v nodes %d net %s", cfg.Seed, cfg.Nemeses, cfg.Duration, cfg.Nodes, cfg.Net)
	bin := filepath.Join(cfg.Out, "raftlog")
	build := exec.Command("go", "build", "-o", bin, "./cmd/raftlog")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		return Result{}, fmt.Errorf("build: %v\n%s", err, b)
	}
	spare := false
	for _, k := range cfg.Nemeses {
		spare = spare || k == "member"
	}
	var net *netns
	var dock *dockerNet
	if cfg.Net == "docker" {
		if dock, err = newDockerNet(cfg.Nodes + 1); err != nil {
			return Result{}, err
		}
		defer atExit(dock.teardown)()
		say("network: a container per node on Docker network %s (%s.0/24)", dock.name, dock.net.subnet)
	}
	if cfg.Net == "netns" {
		if net, err = newNetns(cfg.Nodes + 1); err != nil {
			return Result{}, err
		}
		defer atExit(net.teardown)()
		say("network: a namespace per node on %s.0/24", net.subnet)
	}
	c, err := startCluster(bin, cfg.Out, cfg.Nodes, cfg.Partitions, net, dock, spare)
	if err != nil {
		return Result{}, err
	}
	defer atExit(c.stopAll)()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	if err := c.waitReady(ctx); err != nil {
		cancel()
		return Result{}, err
	}
	cancel()
	var topicConfigs map[string]*string
	if cfg.FlushMessages > 0 {
		topicConfigs = map[string]*string{"flush.messages": kmsg.StringPtr(strconv.Itoa(cfg.FlushMessages))}
	}
	if err := c.createTopic(topic, int32(cfg.Partitions), topicConfigs); err != nil {
		return Result{}, err
	}
	if err := c.createTopic(linTopic, 1, topicConfigs); err != nil {
		return Result{}, err
	}
	say("cluster ready: %v", c.bootstrap())

	start := time.Now()
	since := func() float64 { return time.Since(start).Seconds() }
	var mu sync.Mutex
	frozen := false // set when the check starts: late answers are not recorded
	var writes []Write
	var reads []Read
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Producers: sequential idempotent writes, acks=all.
	for p := 0; p < cfg.Producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.bootstrap()...), kgo.DefaultProduceTopic(topic),
				kgo.RecordDeliveryTimeout(10*time.Second), kgo.RequestTimeoutOverhead(5*time.Second),
				kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
			if err != nil {
				say("producer %d: %v", p, err)
				return
			}
			defer cl.Close()
			for seq := 1; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				v := fmt.Sprintf("p%d-%07d", p, seq)
				t0 := time.Now()
				at := since()
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				r, err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).First()
				cancel()
				w := Write{Producer: p, Seq: seq, Value: v, At: at, Took: time.Since(t0).Seconds(), Offset: -1, Partition: -1}
				if err == nil {
					w.Acked, w.Offset, w.Partition = true, r.Offset, r.Partition
				} else {
					w.Err = err.Error()
				}
				mu.Lock()
				if !frozen {
					writes = append(writes, w)
				}
				mu.Unlock()
			}
		}(p)
	}
	// Register clients on their own partition, for porcupine.
	lin := &linHistory{start: start}
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			linClient(i, c.bootstrap(), lin, cfg.Seed, stop)
		}(i)
	}
	// A reader polling while faults go on.
	wg.Add(1)
	go func() {
		defer wg.Done()
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.bootstrap()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			return
		}
		defer cl.Close()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			fs := cl.PollFetches(ctx)
			cancel()
			var batch []Read
			fs.EachRecord(func(r *kgo.Record) {
				batch = append(batch, Read{Reader: 0, Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)})
			})
			mu.Lock()
			if !frozen {
				reads = append(reads, batch...)
			}
			mu.Unlock()
		}
	}()

	// The nemesis: one fault at a time on a seeded schedule, healed before
	// the next.
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6a657073))
	var faults []fault
	order := append([]string(nil), cfg.Nemeses...)
	deadline := time.Now().Add(cfg.Duration)
	for i := 0; time.Now().Before(deadline) || i < len(order); i++ { // every nemesis at least once
		time.Sleep(time.Duration(2000+rng.IntN(2000)) * time.Millisecond) // the schedule's quiet time between faults
		kind := order[i%len(order)]
		if i >= len(order) {
			kind = order[rng.IntN(len(order))]
		}
		f := fault{Kind: kind, Start: since()}
		f.Node, f.Detail = c.inject(kind, rng)
		last := time.Duration(1500+rng.IntN(2500)) * time.Millisecond
		if partitionKinds[kind] {
			last += 2 * time.Second // long enough for the cut-off side to lose its leases and the rest to elect
		}
		time.Sleep(last) // the fault lasts this long
		c.heal(kind, f.Node)
		f.End = since()
		say("fault %s node %d [%.1fs, %.1fs] %s", f.Kind, f.Node, f.Start, f.End, f.Detail)
		faults = append(faults, f)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if err := c.waitReady(ctx); err != nil {
			say("after %s: cluster not ready: %v (the nodes' goroutines and status are saved under stuck/)", kind, err)
			c.dump("not-ready-after-" + kind)
		}
		cancel()
	}
	time.Sleep(3 * time.Second) // the workload runs on healthy nodes for a moment before it stops
	close(stop)
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Minute):
		// A client stuck in a call must not hold the run forever: its
		// open operation stays unacknowledged and the check goes on.
		say("workload: some clients did not stop within 2 minutes; checking what was recorded")
	}
	mu.Lock()
	frozen = true
	mu.Unlock()
	say("workload stopped: %d attempts", len(writes))
	for i := range faults {
		faults[i].Recovery = -1
		for _, w := range writes {
			if w.Acked && w.At+w.Took >= faults[i].End {
				faults[i].Recovery = w.At + w.Took - faults[i].End
				break
			}
		}
	}

	// Final read of everything, from every partition's start to its end.
	final, unread, err := c.readAll(topic, 120*time.Second)
	if err != nil {
		say("final read: %v", err)
	}
	if len(unread) > 0 {
		say("final read: partitions %v had no leader within the limit; their writes are counted as unreadable", slices.Sorted(maps.Keys(unread)))
	}
	reads = append(reads, final...)
	// The harness's own warm-up records (one per partition, before the
	// run) are not part of the history; they hold offsets all the same.
	for i := range reads {
		reads[i].Harness = reads[i].Value == "warmup"
	}
	res := Check(writes, reads, unread)
	ops := lin.history()
	res.LinOps = len(ops)
	linStart := time.Now()
	lr, err := checkLinearizable(ops, cfg.LinTimeout, filepath.Join(cfg.Out, "linearizability.html"))
	res.LinResult = string(lr)
	if err != nil {
		say("linearizability visualization: %v", err)
	}
	res.Counts["nonlinearizable"] = 0
	if lr == "Illegal" {
		res.Counts["nonlinearizable"] = 1
		res.Examples = append(res.Examples, Anomaly{Kind: "nonlinearizable", Detail: "no order of the register operations explains the answers; see linearizability.html"})
	}
	say("linearizability of %d register operations: %s (%.1fs)", len(ops), lr, time.Since(linStart).Seconds())
	if cfg.lossBound() {
		res.Bound = map[string]int{}
		for _, k := range boundKinds {
			res.Bound[k], res.Counts[k] = res.Counts[k], 0
		}
		say("every node lost power at once without flush.messages=1: %v measured, not counted as anomalies", res.Bound)
	}
	say("checked: attempted %d acknowledged %d failed/unknown %d final records %d", res.Attempted, res.Acked, res.Failed, res.FinalRecords)
	kinds := make([]string, 0, len(res.Counts))
	for k := range res.Counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		say("  %-20s %d", k, res.Counts[k])
	}
	for _, e := range res.Examples {
		say("  example %s: %s", e.Kind, e.Detail)
	}
	if err := writePlot(filepath.Join(cfg.Out, "plot.png"), writes, faults); err != nil {
		say("plot: %v", err)
	}
	if err := writeReport(cfg, res, faults, writes); err != nil {
		say("report: %v", err)
	}
	hist, _ := json.Marshal(map[string]any{"writes": writes, "reads": reads, "faults": faults})
	os.WriteFile(filepath.Join(cfg.Out, "history.json"), hist, 0o644)
	if res.OK() {
		say("no anomaly found")
	} else {
		say("ANOMALIES FOUND")
	}
	return res, nil
}

// writeReport writes report.md: what ran and what was found.
func writeReport(cfg runConfig, res Result, faults []fault, writes []Write) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# raftlog jepsen run\n\n")
	fmt.Fprintf(&b, "- seed: %d (reproduce: `go run ./jepsen run --seed %d --nemesis %s --duration %v --nodes %d --net %s --flush-messages %d`)\n", cfg.Seed, cfg.Seed, strings.Join(cfg.Nemeses, ","), cfg.Duration, cfg.Nodes, cfg.Net, cfg.FlushMessages)
	fmt.Fprintf(&b, "- nodes %d, producers %d, partitions %d, flush.messages %d, network %s, %s\n", cfg.Nodes, cfg.Producers, cfg.Partitions, cfg.FlushMessages, cfg.Net, cfg.GoVersion)
	fmt.Fprintf(&b, "- writes attempted %d, acknowledged %d, failed or unknown %d; records in the final read %d\n\n", res.Attempted, res.Acked, res.Failed, res.FinalRecords)
	fmt.Fprintf(&b, "| anomaly | count |\n| --- | --- |\n")
	for _, k := range []string{"lost", "unreadable", "duplicate", "inconsistent-offset", "reorder", "nonmonotonic-poll", "unexpected", "nonlinearizable"} {
		fmt.Fprintf(&b, "| %s | %d |\n", k, res.Counts[k])
	}
	if res.Bound != nil {
		fmt.Fprintf(&b, "\nEvery node lost power at once and the topics do not fsync every append (flush.messages=%d): what that cost is the bound docs/durability.md states, measured here, not counted above:\n\n| consequence | count |\n| --- | --- |\n", cfg.FlushMessages)
		for _, k := range boundKinds {
			fmt.Fprintf(&b, "| %s | %d |\n", k, res.Bound[k])
		}
	}
	fmt.Fprintf(&b, "\nLinearizability (porcupine) of %d register operations on `%s`: **%s**", res.LinOps, linTopic, res.LinResult)
	if res.LinResult == "Unknown" {
		fmt.Fprintf(&b, " (the check ran out of its %v)", cfg.LinTimeout)
	}
	fmt.Fprintf(&b, "\n")
	if len(res.Examples) > 0 {
		fmt.Fprintf(&b, "\nExamples:\n\n")
		for _, e := range res.Examples {
			fmt.Fprintf(&b, "- %s: %s\n", e.Kind, e.Detail)
		}
	}
	fmt.Fprintf(&b, "\n| fault | node | start s | end s | first ack after heal, s | detail |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, f := range faults {
		fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %.2f | %s |\n", f.Kind, f.Node, f.Start, f.End, f.Recovery, f.Detail)
	}
	// Throughput and latency per second, as text (the plot is to come).
	fmt.Fprintf(&b, "\n| second | acks | p50 ms | max ms |\n| --- | --- | --- | --- |\n")
	bySec := map[int][]float64{}
	maxSec := 0
	for _, w := range writes {
		if w.Acked {
			s := int(w.At + w.Took)
			bySec[s] = append(bySec[s], w.Took*1000)
			maxSec = max(maxSec, s)
		}
	}
	for s := 0; s <= maxSec; s++ {
		l := bySec[s]
		sort.Float64s(l)
		p50, mx := 0.0, 0.0
		if len(l) > 0 {
			p50, mx = l[len(l)/2], l[len(l)-1]
		}
		fmt.Fprintf(&b, "| %d | %d | %.1f | %.1f |\n", s, len(l), p50, mx)
	}
	return os.WriteFile(filepath.Join(cfg.Out, "report.md"), []byte(b.String()), 0o644)
}
