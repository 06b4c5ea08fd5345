package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
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
                        [--compression none] [--json]
  raftlog bench consume [--bootstrap ADDRS] [--topic bench] [--from start|end] [--duration 10s] [--records N] [--json]
  raftlog bench compare [--rounds 3] [--duration 3s] [--out docs] [--cpuprofile FILE]   (see docs/performance.md)
`

func runBench(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, benchUsage)
		return 2
	}
	switch args[0] {
	case "produce", "consume":
		return runBenchLoad(args[0], args[1:], stdout, stderr)
	case "compare":
		return runBenchCompare(args[1:], stdout, stderr)
	}
	fmt.Fprint(stderr, benchUsage)
	return 2
}

func runBenchLoad(kind string, args []string, stdout, stderr io.Writer) int {
	fs, bootstrap := clientFlags("bench "+kind, stderr)
	topic := fs.String("topic", "bench", "topic (created when missing)")
	size := fs.Int("size", 1024, "bytes per record value (produce)")
	duration := fs.Duration("duration", 10*time.Second, "stop after this long")
	warmup := fs.Duration("warmup", 0, "produce this long first on the same client, unmeasured (produce)")
	records := fs.Int64("records", 10_000_000, "... or after this many records (0: no count bound)")
	acks := fs.String("acks", "all", "all, 1 or 0 (produce)")
	partitions := fs.Int("partitions", 6, "partitions of the topic when it is created here")
	rf := fs.Int("replication-factor", -1, "replicas of the topic when it is created here (-1: the cluster default)")
	producers := fs.Int("producers", 1, "producing clients at once, each with its own connections (produce)")
	rate := fs.Float64("rate", 0, "records per second over all producers (0: as fast as acknowledged) (produce)")
	codec := fs.String("compression", "none", "none, gzip, snappy, lz4 or zstd (produce; values are random bytes)")
	linger := fs.Duration("linger", 10*time.Millisecond, "how long a partition's batch waits for more records (0: none) (produce)")
	from := fs.String("from", "start", "start: read up to the end offsets seen at the start; end: wait for new records and measure end-to-end latency (consume)")
	clientLog := fs.String("client-log-level", "none", "franz-go's own log on standard error: none, error, warn, info, debug")
	asJSON := fs.Bool("json", false, "print the result as JSON instead of a summary")
	showProgress := fs.Bool("progress", true, "show a progress bar on standard error")
	timeline := fs.Bool("timeline", false, "print the worst acknowledgement latency of every 100 ms of the run (produce)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ack, err := bench.ParseAcks(*acks)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if *from != "start" && *from != "end" {
		fmt.Fprintf(stderr, "--from %q: want start or end\n", *from)
		return 2
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
		fmt.Fprintf(stderr, "--client-log-level %q: want none, error, warn, info or debug\n", *clientLog)
		return 2
	}
	if *linger == 0 {
		*linger = -1 // bench.Config: no linger
	}
	c := bench.Config{
		Bootstrap: strings.Split(*bootstrap, ","), Topic: *topic, Partitions: int32(*partitions), Replication: int16(*rf),
		Size: *size, Duration: *duration, Warmup: *warmup, Records: *records, Acks: ack, Producers: *producers, Rate: *rate,
		Compression: *codec, Linger: *linger, FromEnd: *from == "end", Timeline: *timeline,
	}
	if logLevel != kgo.LogLevelNone {
		c.ClientOpts = append(c.ClientOpts, kgo.WithLogger(kgo.BasicLogger(stderr, logLevel, func() string { return time.Now().Format("15:04:05.000 ") })))
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	n, created, err := bench.EnsureTopic(ctx, c)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if created {
		fmt.Fprintf(stderr, "created topic %s: %d partitions\n", c.Topic, n)
	} else if n != c.Partitions && kind == "produce" {
		fmt.Fprintf(stderr, "topic %s exists with %d partitions: using them\n", c.Topic, n)
	}
	var bar *benchBar
	if *showProgress {
		bar = newBenchBar(kind, c, stderr)
		c.Progress = bar.update
	}
	var res bench.Result
	if kind == "produce" {
		res, err = bench.Produce(ctx, c)
	} else {
		res, err = bench.Consume(ctx, c)
	}
	if bar != nil {
		bar.finish()
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", kind, err)
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
