package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlog/raftlog/cluster/node"
	"github.com/raftlog/raftlog/cluster/node/freeport"
	"github.com/raftlog/raftlog/cmd/raftlog/internal/bench"
	"github.com/twmb/franz-go/pkg/kfake"
	"gonum.org/v1/plot/vg"
)

// runBenchCompare is `raftlog bench compare`: in one run on this machine,
// the same kgo producer and consumer against
//
//   - a raw sequential write of the same bytes to the page cache (the
//     physical limit),
//   - franz-go's kfake (Kafka in memory, no replication, no disk),
//   - raftlog with 1 node, and with 3 nodes and RF 3, acks=all (clusters
//     in this process on loopback, real files in a temporary directory),
//
// for each record size and partition count; then the produce latency of
// the 3-node cluster at half its measured maximum. All targets stay up
// and take turns, shape by shape, for several rounds: a ratio is taken
// between runs a few seconds apart and the median over the rounds is
// reported, which survives a noisy machine far better than absolute
// figures. It prints Markdown tables and, with --out, draws a PNG chart.
// docs/performance.md shows and explains the latest run.
func runBenchCompare(args []string, stdout, stderr io.Writer) int {
	c := newCommand("bench compare", "", `Run raftlog (1 node, and 3 nodes with RF 3) beside a raw write and kfake on
this machine, round after round, and print Markdown tables (docs/performance.md).`)
	duration := c.Duration("duration", 3*time.Second, "length of each produce run")
	rounds := c.Int("rounds", 3, "rounds of every target and shape (the median ratio is reported)")
	halfDuration := c.Duration("half-duration", 10*time.Second, "length of the run at half load")
	halfRuns := c.Int("half-runs", 3, "runs of the last target at half load in each memory state (a new topic each); the p99 judged is their median, as the rounds' ratios are (of an even count, the higher of the middle two)")
	warmup := c.Duration("warmup", 5*time.Second, "unmeasured produce at half load at the start of each half-load run, on the same topic and client (leaders elected, connections open, pages and buffers in use)")
	sizes := c.String("sizes", "1024,100", "record value sizes in bytes, comma-separated")
	parts := c.String("partitions", "1,6", "partition counts, comma-separated")
	rawMiB := c.Int("raw-mib", 512, "MiB of the raw write of each round (the best counts)")
	out := c.String("out", "", "directory to write performance.png into (none: no chart)")
	cpuprofile := c.String("cpuprofile", "", "write a CPU profile of the first round's 3-node 1024 B × 6 partitions produce to this file (with --rounds 0: of its last run at half load)")
	dir := c.String("dir", "", "directory for the clusters' files (default: a new temporary directory, removed at the end)")
	halfRate := c.Float64("half-rate", 0, "records/s of the runs at half load (0: half the median maximum of the rounds; with --rounds 0, only those runs)")
	precondition := c.Bool("precondition", true, "before a second run at half load, fill the page cache as a broker that has run for a while has it (bench.FillPageCache; Linux)")
	level := c.String("log-level", "off", "log level of the raftlog nodes (deleting a measured topic makes its replicas' peers log errors as they go)")
	pos, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if code, ok := c.noArgs(pos, stderr); !ok {
		return code
	}
	shapes, err := compareShapes(*sizes, *parts)
	if err != nil {
		return c.fail(stderr, "%v", err)
	}
	if *duration <= 0 || *duration > time.Hour || *halfDuration <= 0 || *halfDuration > time.Hour || *warmup < 0 || *warmup > time.Hour ||
		*rounds < 0 || *rounds > 20 || (*rounds == 0 && *halfRate <= 0) || *halfRate < 0 || *halfRuns < 1 || *halfRuns > 20 || *rawMiB < 1 || *rawMiB > 16<<10 {
		return c.fail(stderr, "--duration and --half-duration must be in (0, 1h], --warmup in [0, 1h], --rounds in [1, 20] (0 with --half-rate), --half-rate ≥ 0, --half-runs in [1, 20], --raw-mib in [1, 16384]")
	}
	env, code, ok := newBenchEnv(c, stderr, *level, *dir, "raftlog-bench-")
	if !ok {
		return code
	}
	defer env.close()
	ctx, base, logger := env.ctx, env.dir, env.logger
	nodeSettings := node.ResolveGC(node.DefaultGCPercent, false, 0, false)

	targets := []compareTarget{
		{name: "kfake", rf: -1, start: func() ([]string, func(), error) {
			c, err := kfake.NewCluster(kfake.NumBrokers(3))
			if err != nil {
				return nil, nil, err
			}
			return c.ListenAddrs(), c.Close, nil
		}},
		{name: "raftlog 1 node", rf: 1, gc: &nodeSettings, start: func() ([]string, func(), error) {
			return startBenchCluster(ctx, 1, filepath.Join(base, "one"), logger, false)
		}},
		{name: "raftlog 3 nodes RF 3", rf: 3, gc: &nodeSettings, start: func() ([]string, func(), error) {
			return startBenchCluster(ctx, 3, filepath.Join(base, "three"), logger, false)
		}},
	}
	var stops []func()
	stopAll := func() {
		// Nodes going away one by one complain of their peers: not news.
		logger.SetLevel(hclog.Off)
		for _, stop := range stops {
			stop()
		}
		stops = nil
	}
	defer stopAll()
	run := compareRun{duration: *duration, rounds: *rounds, shapes: shapes, started: time.Now(), stderr: stderr, halfRate: *halfRate, halfRuns: *halfRuns}
	for i := range targets {
		boot, stop, err := targets[i].start()
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", targets[i].name, err)
			return 1
		}
		targets[i].boot = boot
		stops = append(stops, stop)
		run.names = append(run.names, targets[i].name)
	}
	for round := 0; round < *rounds; round++ {
		runtime.GC()
		mb, _, err := bench.RawWrite(base, int64(*rawMiB)<<20)
		if err != nil {
			fmt.Fprintln(stderr, "raw write:", err)
			return 1
		}
		run.raw = max(run.raw, mb)
		fmt.Fprintf(stderr, "round %d: raw write %.0f MB/s\n", round+1, mb)
		cells, err := run.round(ctx, round, targets, *cpuprofile)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		run.cells = append(run.cells, cells)
	}
	if *rounds == 0 {
		run.profile = *cpuprofile // the last run of the 3 nodes at half load
	}
	if err := run.halfLoad(ctx, targets, *halfDuration, *warmup, "free"); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *precondition && len(run.halves) > 0 {
		start := time.Now()
		filled, remove, err := bench.FillPageCache(base, preconditionLeave)
		if err != nil {
			fmt.Fprintln(stderr, "filling the page cache:", err)
			return 1
		}
		defer remove()
		fmt.Fprintf(stderr, "page cache filled with %d MiB in %v\n", filled>>20, time.Since(start).Round(100*time.Millisecond))
		if err := run.halfLoad(ctx, targets, *halfDuration, *warmup, "page cache full"); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	stopAll()
	run.writeMarkdown(stdout)
	if *out != "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		path := filepath.Join(*out, "performance.png")
		if err := run.chart().Save(path, 9*vg.Inch, 4*vg.Inch); err != nil {
			fmt.Fprintln(stderr, "chart:", err)
			return 1
		}
		fmt.Fprintf(stderr, "wrote %s\n", path)
	}
	if len(run.problems) > 0 {
		return 1
	}
	return 0
}

type compareShape struct {
	size       int
	partitions int32
}

func (s compareShape) String() string {
	sz := fmt.Sprintf("%d B", s.size)
	if s.size%1024 == 0 {
		sz = fmt.Sprintf("%d KiB", s.size/1024)
	}
	return fmt.Sprintf("%s × %d", sz, s.partitions)
}

// consumePasses is how many times each produced topic is read.
const consumePasses = 3

// The shape the targets and the latency at half load are stated for.
var targetShape = compareShape{size: 1024, partitions: 6}

func compareShapes(sizes, parts string) ([]compareShape, error) {
	ints := func(s string, lo, hi int) ([]int, error) {
		var out []int
		for _, f := range strings.Split(s, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || v < lo || v > hi {
				return nil, fmt.Errorf("%q: want comma-separated integers in [%d, %d]", s, lo, hi)
			}
			out = append(out, v)
		}
		return out, nil
	}
	ss, err := ints(sizes, 1, bench.MaxSize)
	if err != nil {
		return nil, err
	}
	ps, err := ints(parts, 1, 64)
	if err != nil {
		return nil, err
	}
	var out []compareShape
	for _, s := range ss {
		for _, p := range ps {
			out = append(out, compareShape{s, int32(p)})
		}
	}
	return out, nil
}

type compareTarget struct {
	name  string
	rf    int16
	start func() (bootstrap []string, stop func(), err error)
	boot  []string
	// gc, when set, are the collector settings the target's runs have:
	// a raftlog cluster runs with those of `raftlog serve`, kfake with the
	// process's own (Go's defaults unless GOGC or GOMEMLIMIT say else).
	gc *node.GCSettings
}

// collect applies t's collector settings and returns what restores the
// process's.
func (t compareTarget) collect() (restore func()) {
	if t.gc == nil {
		return func() {}
	}
	prev := node.SetGC(*t.gc)
	return func() { node.SetGC(prev) }
}

type compareCell struct {
	produce, consume bench.Result
}

type compareRun struct {
	duration time.Duration
	rounds   int
	shapes   []compareShape
	started  time.Time
	stderr   io.Writer
	raw      float64           // MB/s, the best round
	names    []string          // targets, in order; the first is the reference
	cells    [][][]compareCell // [round][shape][target]
	halfRate float64           // records/s at half load (0: half the median maximum)
	halfRuns int               // runs of the last target at half load per memory state
	profile  string            // CPU profile of the last target's runs at half load (the last one written wins)
	halves   []halfRun         // the runs at half load, in order; the target is judged on the last
	problems []string
}

// halfRun is the last target's runs and the reference's run at half
// load, with the machine's memory in one state.
type halfRun struct {
	memory string // "free", "page cache full"
	last   []bench.Result
	ref    bench.Result
}

// p99s are the last target's runs' p99 latencies, and their median.
func (h halfRun) p99s() (all []time.Duration, median time.Duration) {
	for _, p := range h.last {
		all = append(all, p.Latency.P99)
	}
	sorted := slices.Sorted(slices.Values(all))
	return all, sorted[len(sorted)/2]
}

// preconditionLeave is the free memory bench.FillPageCache leaves: room
// for the process to grow without waiting on reclaim.
const preconditionLeave = 512 << 20

func (r *compareRun) config(boot []string, topic string, s compareShape, rf int16) bench.Config {
	return bench.Config{Bootstrap: boot, Topic: topic, Partitions: s.partitions, Replication: rf, Size: s.size,
		Duration: r.duration, Records: 100_000_000, Acks: -1, Producers: 1}
}

// round runs every shape against every target in turn: a produce, then a
// consume of what it wrote, into a topic deleted afterwards.
func (r *compareRun) round(ctx context.Context, round int, targets []compareTarget, cpuprofile string) ([][]compareCell, error) {
	var out [][]compareCell
	for _, s := range r.shapes {
		var cells []compareCell
		for ti, t := range targets {
			profile := ""
			if round == 0 && ti == len(targets)-1 && s == targetShape {
				profile = cpuprofile
			}
			cell, err := r.one(ctx, t, fmt.Sprintf("bench-%d-%d-r%d", s.size, s.partitions, round+1), s, profile)
			if err != nil {
				return nil, fmt.Errorf("%s %v: %w", t.name, s, err)
			}
			cells = append(cells, cell)
		}
		out = append(out, cells)
	}
	return out, nil
}

func (r *compareRun) one(ctx context.Context, t compareTarget, topic string, s compareShape, cpuprofile string) (compareCell, error) {
	c := r.config(t.boot, topic, s, t.rf)
	defer t.collect()()
	if _, _, err := bench.EnsureTopic(ctx, c); err != nil {
		return compareCell{}, err
	}
	freeHeap() // the garbage of the run before is not this run's
	stopProfile, err := startProfile(cpuprofile)
	if err != nil {
		return compareCell{}, err
	}
	p, err := bench.Produce(ctx, c)
	stopProfile()
	if err != nil {
		return compareCell{}, fmt.Errorf("produce: %w", err)
	}
	// A consume takes a fraction of the produce's time: the median of a
	// few reads of the whole topic steadies it.
	c.Duration = 4*r.duration + 10*time.Second // reads to the end, well before this
	var reads []bench.Result
	for range consumePasses {
		runtime.GC()
		cr, err := bench.Consume(ctx, c)
		if err != nil {
			return compareCell{}, fmt.Errorf("consume: %w", err)
		}
		reads = append(reads, cr)
	}
	slices.SortFunc(reads, func(a, b bench.Result) int { return cmp.Compare(a.RecordsPerSec, b.RecordsPerSec) })
	cr := reads[len(reads)/2]
	for _, x := range reads {
		if x.Records != p.Records || x.Errors > 0 {
			cr = x // the check below reports it
		}
	}
	if err := bench.DeleteTopic(ctx, c); err != nil {
		return compareCell{}, err
	}
	fmt.Fprintf(r.stderr, "%-22s %-12v produce %8.0f records/s %7.1f MB/s p99 %7.1f ms | consume %8.0f records/s\n",
		t.name, s, p.RecordsPerSec, p.MBPerSec, float64(p.Latency.P99)/1e6, cr.RecordsPerSec)
	r.check(t.name, s, p, cr)
	return compareCell{p, cr}, nil
}

// freeHeap collects the garbage and hands the memory it freed back to
// the system now. A kfake run leaves gigabytes of heap behind (its
// records); left to the runtime's background scavenger, they are handed
// back during the next runs, in madvise calls of the scavenger's that
// took 0.2 s of CPU in a half-load run of raftlog.
func freeHeap() { debug.FreeOSMemory() }

// startProfile starts a CPU profile into path, if not empty, and returns
// the function that stops it.
func startProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func (r *compareRun) check(name string, s compareShape, p, c bench.Result) {
	switch {
	case p.Errors > 0 || c.Errors > 0:
		r.problems = append(r.problems, fmt.Sprintf("%s %v: %d produce and %d consume errors (first: %s%s)", name, s, p.Errors, c.Errors, p.FirstError, c.FirstError))
	case p.Records == 0:
		r.problems = append(r.problems, fmt.Sprintf("%s %v: nothing produced", name, s))
	case c.Records != p.Records:
		r.problems = append(r.problems, fmt.Sprintf("%s %v: consumed %d records of %d produced", name, s, c.Records, p.Records))
	}
}

// median of the values of f over the rounds.
func (r *compareRun) median(f func(round int) float64) float64 {
	var v []float64
	for i := range r.cells {
		v = append(v, f(i))
	}
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func (c compareCell) op(op string) bench.Result {
	if op == "produce" {
		return c.produce
	}
	return c.consume
}

// vsRef is the median over the rounds of target ti's records/s over the
// reference's, for shape si.
func (r *compareRun) vsRef(op string, si, ti int) float64 {
	return r.median(func(round int) float64 {
		c := r.cells[round][si]
		return ratio(c[ti].op(op).RecordsPerSec, c[0].op(op).RecordsPerSec)
	})
}

// halfLoad measures the produce latency of the last target at half the
// median maximum it reached for targetShape, and that of the reference at
// the same rate (what the client and loopback alone cost), and adds them
// to r.halves. memory says what state the machine's memory is in.
func (r *compareRun) halfLoad(ctx context.Context, targets []compareTarget, d, warmup time.Duration, memory string) error {
	si := slices.Index(r.shapes, targetShape)
	if si < 0 {
		return nil
	}
	h := halfRun{memory: memory}
	ti := len(targets) - 1
	rate := r.halfRate
	if rate == 0 {
		rate = r.median(func(round int) float64 { return r.cells[round][si][ti].produce.RecordsPerSec }) / 2
	}
	runs := slices.Repeat([]int{ti}, r.halfRuns)
	for k, i := range append(runs, 0) {
		profile := ""
		if i == ti {
			profile = r.profile
		}
		// A topic of its own each: a topic deleted a moment ago may not
		// be gone from every node yet.
		topic := fmt.Sprintf("bench-half-%s-%d", strings.ReplaceAll(memory, " ", "-"), k+1)
		p, err := r.halfOne(ctx, targets[i], topic, rate, d, warmup, memory, profile)
		if err != nil {
			return err
		}
		if i == ti {
			h.last = append(h.last, p)
		} else {
			h.ref = p
		}
	}
	r.halves = append(r.halves, h)
	return nil
}

// halfOne loads t at rate for d after warmup, into topic, deleted after.
func (r *compareRun) halfOne(ctx context.Context, t compareTarget, topic string, rate float64, d, warmup time.Duration, memory, profile string) (bench.Result, error) {
	c := r.config(t.boot, topic, targetShape, t.rf)
	c.Rate, c.Duration, c.Warmup, c.Timeline = rate, d, warmup, true
	defer t.collect()()
	if _, _, err := bench.EnsureTopic(ctx, c); err != nil {
		return bench.Result{}, err
	}
	freeHeap()
	stopProfile, err := startProfile(profile)
	if err != nil {
		return bench.Result{}, err
	}
	before := bench.SnapshotProcess()
	p, err := bench.Produce(ctx, c)
	spent := bench.SnapshotProcess().Sub(before)
	stopProfile()
	if err != nil {
		return bench.Result{}, fmt.Errorf("%s: produce at half load: %w", t.name, err)
	}
	// What a target holds is not the next one's burden: kfake keeps
	// its records on the heap this process collects.
	if err := bench.DeleteTopic(ctx, c); err != nil {
		return bench.Result{}, err
	}
	fmt.Fprintf(r.stderr, "%-22s %-12v at %.0f records/s, memory %s: ack latency %v\n", t.name, targetShape, c.Rate, memory, p.Latency)
	fmt.Fprintf(r.stderr, "  worst per %v (ms): %s\n", bench.TimelineStep, bench.FormatTimeline(p.Timeline))
	fmt.Fprintf(r.stderr, "  the process over the warm-up and the run: %v\n", spent)
	if p.Errors > 0 {
		r.problems = append(r.problems, fmt.Sprintf("%s %v at half load, %s: %d errors (first: %s)", t.name, targetShape, memory, p.Errors, p.FirstError))
	}
	return p, nil
}

// startBenchCluster starts n raftlog nodes in this process on free
// loopback ports and waits until they are ready, with Raft's default
// timings (heartbeat and election 1 s, leader lease 500 ms) and, with
// local, the local-network gossip timings of `raftlog dev` (LAN gossip
// otherwise).
func startBenchCluster(ctx context.Context, n int, dir string, logger hclog.Logger, local bool) ([]string, func(), error) {
	_, boot, stop, err := startBenchNodes(ctx, n, dir, logger, local, nil)
	return boot, stop, err
}

// startBenchNodes is startBenchCluster with each node's flags passed to
// adjust (when not nil) and the nodes returned.
func startBenchNodes(ctx context.Context, n int, dir string, logger hclog.Logger, local bool, adjust func(*serveFlags)) ([]*node.Node, []string, func(), error) {
	var running []*node.Node
	stop := func() {
		for _, r := range running {
			r.Close()
		}
	}
	addrs := make([]string, 4*n) // kafka, raft, gossip, http of each node
	for i := range addrs {
		a, err := loopbackAddr()
		if err != nil {
			return nil, nil, nil, err
		}
		addrs[i] = a
	}
	var gossip, boot []string
	for i := 0; i < n; i++ {
		gossip = append(gossip, addrs[4*i+2])
		boot = append(boot, addrs[4*i])
	}
	for i := 0; i < n; i++ {
		f := serveFlags{
			nodeID: i + 1, dataDir: filepath.Join(dir, fmt.Sprintf("node-%d", i+1)),
			kafkaAddr: addrs[4*i], raftAddr: addrs[4*i+1], gossipAddr: addrs[4*i+2], httpAddr: addrs[4*i+3],
			join: strings.Join(gossip, ","), controllerVoters: min(3, n), expectNodes: n,
			partitions: 1, replication: -1, bootIDFile: "/proc/sys/kernel/random/boot_id",
		}
		if adjust != nil {
			adjust(&f)
		}
		r, err := node.Start(nodeConfig(f, logger, local))
		if err != nil {
			stop()
			return nil, nil, nil, fmt.Errorf("node %d: %w", i+1, err)
		}
		running = append(running, r)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for i, r := range running {
		if err := r.WaitReady(wctx); err != nil {
			stop()
			return nil, nil, nil, fmt.Errorf("node %d not ready: %w", i+1, err)
		}
	}
	return running, boot, stop, nil
}

// benchEnv is what a bench command that starts clusters sets up from its
// --log-level and --dir: the directory (a new temporary one when --dir is
// empty), the nodes' logger, and a context that Ctrl-C ends; close undoes
// them.
type benchEnv struct {
	dir    string
	ctx    context.Context
	logger hclog.Logger
	close  func()
}

func newBenchEnv(c *command, stderr io.Writer, level, dir, prefix string) (benchEnv, int, bool) {
	if !validLogLevel(level) {
		return benchEnv{}, c.fail(stderr, "--log-level %q: want trace, debug, info, warn, error or off", level), false
	}
	remove := func() {}
	if dir == "" {
		d, err := os.MkdirTemp("", prefix)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return benchEnv{}, 1, false
		}
		dir, remove = d, func() { os.RemoveAll(d) }
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	return benchEnv{dir: dir, ctx: ctx, logger: newLogger("raftlog", false, level, stderr), close: func() { cancel(); remove() }}, 0, true
}

// loopbackAddr is a loopback address whose port is free for TCP and UDP
// and below the ephemeral range (cluster/node/freeport: a listen on port 0
// would hand out the ports outgoing connections take next).
func loopbackAddr() (string, error) { return freeport.Addr() }

// ratio is a/b, or 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// writeMarkdown prints the run's tables.
func (r *compareRun) writeMarkdown(w io.Writer) {
	fmt.Fprintf(w, "Run of %s on %s/%s, %d CPUs, %s: %d rounds of %v per produce run, acks=all, one kgo client, records spread round-robin, random values, no compression; each consume the median of %d reads of the topic.\n\n",
		r.started.UTC().Format("2006-01-02 15:04 MST"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), r.rounds, r.duration, consumePasses)
	if len(r.cells) > 0 {
		r.writeRounds(w)
	}
	r.writeHalfLoad(w)
	if len(r.problems) == 0 {
		fmt.Fprintln(w, "Every run: no errors, and every consume read back exactly the records produced.")
	} else {
		fmt.Fprintln(w, "Problems:")
		for _, p := range r.problems {
			fmt.Fprintf(w, "- %s\n", p)
		}
	}
}

// writeRounds prints the tables of the rounds.
func (r *compareRun) writeRounds(w io.Writer) {
	fmt.Fprintf(w, "Raw sequential write to the page cache (1 MiB writes, best round): %.0f MB/s.\n\n", r.raw)
	header := func() {
		fmt.Fprint(w, "| case |")
		for _, n := range r.names {
			fmt.Fprintf(w, " %s |", n)
		}
		fmt.Fprint(w, "\n| --- |")
		for range r.names {
			fmt.Fprint(w, " ---: |")
		}
		fmt.Fprintln(w)
	}
	table := func(cell func(op string, si, ti int) string) {
		header()
		for _, op := range []string{"produce", "consume"} {
			for si, s := range r.shapes {
				fmt.Fprintf(w, "| %s %v |", op, s)
				for ti := range r.names {
					fmt.Fprintf(w, " %s |", cell(op, si, ti))
				}
				fmt.Fprintln(w)
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "Records/s relative to %s (same client code; median over the rounds of the ratio within a round):\n\n", r.names[0])
	table(func(op string, si, ti int) string { return fmt.Sprintf("%.2f", r.vsRef(op, si, ti)) })
	fmt.Fprintln(w, "Value MB/s relative to the raw write (bytes the client sent or received; RF 3 stores each three times):")
	fmt.Fprintln(w)
	table(func(op string, si, ti int) string {
		return fmt.Sprintf("%.3f", r.median(func(round int) float64 { return ratio(r.cells[round][si][ti].op(op).MBPerSec, r.raw) }))
	})
	fmt.Fprintln(w, "The same runs in absolute figures, for orientation only (median records/s; produce: and the median p99 acknowledgement latency at full load, which is queueing in the client):")
	fmt.Fprintln(w)
	table(func(op string, si, ti int) string {
		rate := r.median(func(round int) float64 { return r.cells[round][si][ti].op(op).RecordsPerSec })
		if op == "consume" {
			return fmt.Sprintf("%.0f", rate)
		}
		p99 := r.median(func(round int) float64 { return float64(r.cells[round][si][ti].produce.Latency.P99) / 1e6 })
		return fmt.Sprintf("%.0f (p99 %.0f ms)", rate, p99)
	})
}

// writeHalfLoad prints the latency at half load and the targets.
func (r *compareRun) writeHalfLoad(w io.Writer) {
	si, ti := slices.Index(r.shapes, targetShape), len(r.names)-1
	if si < 0 || ti == 0 || len(r.halves) == 0 {
		return
	}
	judged := r.halves[len(r.halves)-1]
	load := "half the median maximum of " + r.names[ti]
	if r.halfRate > 0 {
		load = "a rate given (--half-rate)"
	}
	fmt.Fprintf(w, "Produce acknowledgement latency, %v, at %s (%.0f records/s asked, %v):\n\n",
		targetShape, load, judged.ref.TargetRate, judged.ref.Elapsed.Round(100*time.Millisecond))
	fmt.Fprintln(w, "| at half load | memory | records/s achieved | p50 | p99 | p99.9 | max |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: |")
	type row struct {
		name string
		res  bench.Result
	}
	for _, h := range r.halves {
		var rows []row
		for i, p := range h.last {
			name := r.names[ti]
			if len(h.last) > 1 {
				name += fmt.Sprintf(", run %d", i+1)
			}
			rows = append(rows, row{name, p})
		}
		for _, x := range append(rows, row{r.names[0] + " (the client's own share)", h.ref}) {
			q := x.res.Latency
			fmt.Fprintf(w, "| %s | %s | %.0f | %.1f ms | %.1f ms | %.1f ms | %.1f ms |\n", x.name, h.memory, x.res.RecordsPerSec,
				float64(q.P50)/1e6, float64(q.P99)/1e6, float64(q.P999)/1e6, float64(q.Max)/1e6)
		}
	}
	fmt.Fprintln(w)
	if len(r.halves) > 1 {
		fmt.Fprintln(w, "\"free\": new log pages come from free memory; \"page cache full\": after bench.FillPageCache, from clean pages the kernel reclaims, as on a broker that has run for a while. The target is judged on the last.")
		fmt.Fprintln(w)
	}
	if len(r.cells) == 0 || r.halfRate > 0 {
		return // no targets without the rounds' maximum
	}
	met := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**not met**"
	}
	prod, cons := r.vsRef("produce", si, ti), r.vsRef("consume", si, ti)
	all, median := judged.p99s()
	p99 := float64(median) / 1e6
	of := ""
	if len(all) > 1 {
		var each []string
		for _, d := range all {
			each = append(each, fmt.Sprintf("%.1f", float64(d)/1e6))
		}
		of = fmt.Sprintf(" (median of %s)", strings.Join(each, ", "))
	}
	fmt.Fprintln(w, "| target | measured | |")
	fmt.Fprintln(w, "| --- | ---: | --- |")
	fmt.Fprintf(w, "| %s produce ≥ 0.50 × %s records/s, %v | %.2f | %s |\n", r.names[ti], r.names[0], targetShape, prod, met(prod >= 0.5))
	fmt.Fprintf(w, "| p99 produce latency < 20 ms at half that load | %.1f ms%s | %s |\n", p99, of, met(p99 < 20))
	fmt.Fprintf(w, "| %s consume ≥ 0.70 × %s records/s, %v | %.2f | %s |\n", r.names[ti], r.names[0], targetShape, cons, met(cons >= 0.7))
	fmt.Fprintln(w)
}

// chart draws records/s relative to the reference for every case.
func (r *compareRun) chart() bench.Chart {
	c := bench.Chart{
		Title:  fmt.Sprintf("records/s relative to %s, median of %d rounds, %s", r.names[0], r.rounds, r.started.UTC().Format("2006-01-02")),
		YLabel: "records/s relative to " + r.names[0],
		Marks:  []bench.Mark{{Name: "produce target 0.5", Y: 0.5}, {Name: "consume target 0.7", Y: 0.7}},
	}
	for _, op := range []string{"produce", "consume"} {
		for _, s := range r.shapes {
			c.Categories = append(c.Categories, fmt.Sprintf("%s\n%v", op, s))
		}
	}
	for ti, name := range r.names {
		ser := bench.Series{Name: name}
		for _, op := range []string{"produce", "consume"} {
			for si := range r.shapes {
				ser.Values = append(ser.Values, r.vsRef(op, si, ti))
			}
		}
		c.Series = append(c.Series, ser)
	}
	return c
}
