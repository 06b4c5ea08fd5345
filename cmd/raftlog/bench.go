package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"time"

	"github.com/raftlog/raftlog/cmd/raftlog/internal/bench"
	"github.com/twmb/franz-go/pkg/kgo"
)

// `raftlog bench produce|consume` measures any Kafka cluster through the
// bench package; `raftlog bench compare` (bench_compare.go) puts raftlog
// beside its references on this machine.

const benchUsage = `usage:
  raftlog bench produce [--bootstrap ADDRS] [--topic bench] [--size 1024] [--duration 10s] [--records N]
                        [--acks all|1|0] [--partitions 6] [--replication-factor -1] [--producers 1] [--rate R]
                        [--compression none] [--json] [--timeout 30s]
  raftlog bench consume [--bootstrap ADDRS] [--topic bench] [--from start|end] [--duration 10s] [--records N] [--json] [--timeout 30s]
  raftlog bench compare [--rounds 3] [--duration 3s] [--out docs] [--cpuprofile FILE]   (see docs/performance.md)
  raftlog bench partitions [--counts 1000,3000] [--idle 10s]   (the cost of partitions; docs/performance.md)
Run 'raftlog bench produce -h' (or consume, compare, partitions) for every flag of each.
`

func runBench(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "raftlog bench: a command is needed: produce, consume, compare or partitions")
		fmt.Fprint(stderr, benchUsage)
		return 2
	}
	switch args[0] {
	case "produce", "consume":
		return runBenchLoad(args[0], args[1:], stdout, stderr)
	case "compare":
		return runBenchCompare(args[1:], stdout, stderr)
	case "partitions":
		return runBenchPartitions(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, benchUsage)
		return 0
	}
	fmt.Fprintf(stderr, "raftlog bench: unknown command %q\n", args[0])
	fmt.Fprint(stderr, benchUsage)
	return 2
}

func runBenchLoad(kind string, args []string, stdout, stderr io.Writer) int {
	produce := kind == "produce"
	about := "Produce to the topic (created when missing) for --duration or --records and print records/s, MB/s, latency quantiles and errors."
	if !produce {
		about = "Consume the topic (created when missing) for --duration or --records and print records/s, MB/s, end-to-end latency (--from end) and errors."
	}
	c := newCommand("bench "+kind, "", about)
	cf := addClientFlags(c, 30*time.Second, "give up when the cluster has not answered, or the topic's partitions have no leaders, within this long")
	topic := c.String("topic", "bench", "topic (created when missing)")
	duration := c.Duration("duration", 10*time.Second, "stop after this long")
	records := c.Int64("records", 10_000_000, "... or after this many records (0: no count bound)")
	partitions := c.Int("partitions", 6, "partitions of the topic when it is created here")
	rf := c.Int("replication-factor", -1, "replicas of the topic when it is created here (-1: the cluster default)")
	clientLog := c.String("client-log-level", "none", "franz-go's own log on standard error: none, error, warn, info, debug")
	asJSON := c.Bool("json", false, "print the result as JSON instead of a summary")
	showProgress := c.Bool("progress", true, "show a progress bar on standard error")
	var (
		size, producers   *int
		warmup, linger    *time.Duration
		acks, codec, from *string
		rate              *float64
		timeline          *bool
	)
	if produce {
		size = c.Int("size", 1024, "bytes per record value")
		warmup = c.Duration("warmup", 0, "produce this long first on the same client, unmeasured")
		acks = c.String("acks", "all", "all, 1 or 0")
		producers = c.Int("producers", 1, "producing clients at once, each with its own connections")
		rate = c.Float64("rate", 0, "records per second over all producers (0: as fast as acknowledged)")
		codec = c.String("compression", "none", "none, gzip, snappy, lz4 or zstd (values are random bytes)")
		linger = c.Duration("linger", 10*time.Millisecond, "how long a partition's batch waits for more records (0: none)")
		timeline = c.Bool("timeline", false, "print the worst acknowledgement latency of every 100 ms of the run")
	} else {
		from = c.String("from", "start", "start: read up to the end offsets seen at the start; end: wait for new records and measure end-to-end latency")
	}
	pos, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if code, ok := c.noArgs(pos, stderr); !ok {
		return code
	}
	if code, ok := cf.check(c, stderr); !ok {
		return code
	}
	if *partitions < 1 || *partitions > math.MaxInt32 {
		return c.fail(stderr, "--partitions %d: want at least 1", *partitions)
	}
	if *rf == 0 || *rf < -1 || *rf > math.MaxInt16 {
		return c.fail(stderr, "--replication-factor %d: want -1 (the cluster's default) or at least 1", *rf)
	}
	cfg := bench.Config{
		Bootstrap: cf.seeds(), Topic: *topic, Partitions: int32(*partitions), Replication: int16(*rf),
		Duration: *duration, Records: *records,
	}
	if produce {
		ack, err := bench.ParseAcks(*acks)
		if err != nil {
			return c.fail(stderr, "--acks: %v", err)
		}
		if *linger < 0 {
			return c.fail(stderr, "--linger %v: want 0 (none) or more", *linger)
		}
		if *linger == 0 {
			*linger = -1 // bench.Config: no linger
		}
		cfg.Size, cfg.Warmup, cfg.Acks, cfg.Producers, cfg.Rate = *size, *warmup, ack, *producers, *rate
		cfg.Compression, cfg.Linger, cfg.Timeline = *codec, *linger, *timeline
	} else {
		if *from != "start" && *from != "end" {
			return c.fail(stderr, "--from %q: want start or end", *from)
		}
		cfg.FromEnd = *from == "end"
	}
	// Every flag is checked before the topic is created.
	if err := cfg.Check(produce); err != nil {
		return c.fail(stderr, "%v", err)
	}
	var logLevel kgo.LogLevel
	switch *clientLog {
	case "none":
	case "error":
		logLevel = kgo.LogLevelError
	case "warn":
		logLevel = kgo.LogLevelWarn
	case "info":
		logLevel = kgo.LogLevelInfo
	case "debug":
		logLevel = kgo.LogLevelDebug
	default:
		return c.fail(stderr, "--client-log-level %q: want none, error, warn, info or debug", *clientLog)
	}
	if logLevel != kgo.LogLevelNone {
		cfg.ClientOpts = append(cfg.ClientOpts, kgo.WithLogger(kgo.BasicLogger(stderr, logLevel, func() string { return time.Now().Format("15:04:05.000 ") })))
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	tctx, tcancel := context.WithTimeout(ctx, *cf.timeout)
	cl, err := cf.connect(tctx)
	if err == nil {
		cl.Close()
		var n int32
		var created bool
		n, created, err = bench.EnsureTopic(tctx, cfg)
		switch {
		case err != nil:
		case created:
			fmt.Fprintf(stderr, "created topic %s: %d partitions\n", cfg.Topic, n)
		case n != cfg.Partitions && produce:
			fmt.Fprintf(stderr, "topic %s exists with %d partitions: using them\n", cfg.Topic, n)
		}
	}
	tcancel()
	if err != nil {
		fmt.Fprintf(stderr, "raftlog %s: %v\n", c.name, timeoutErr(err, *cf.timeout))
		return 1
	}
	var bar *benchBar
	if *showProgress {
		bar = newBenchBar(kind, cfg, stderr)
		cfg.Progress = bar.update
	}
	var res bench.Result
	if produce {
		res, err = bench.Produce(ctx, cfg)
	} else {
		res, err = bench.Consume(ctx, cfg)
	}
	if bar != nil {
		bar.finish()
	}
	if err != nil {
		fmt.Fprintf(stderr, "raftlog %s: %v\n", c.name, err)
		if res.Records == 0 {
			return 1
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(res)
	} else {
		res.WriteSummary(stdout)
	}
	if err != nil || res.Errors > 0 || res.Records == 0 {
		return 1
	}
	return 0
}
