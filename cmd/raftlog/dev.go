package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/raftlog/raftlog/cluster/node"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runDev is `raftlog dev`: a local cluster of --nodes nodes in this
// process on 127.0.0.1, a demo topic written and read back through the
// Kafka protocol, and what to try next.
func runDev(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodes := fs.Int("nodes", 3, "number of nodes")
	dir := fs.String("dir", "", "data directory (default: a new temporary directory)")
	kport := fs.Int("kafka-port", 9092, "Kafka port of the first node; node i listens on kafka-port+i (Raft +100, gossip +200, HTTP +300)")
	exit := fs.Bool("exit", false, "exit after the demo instead of running until interrupted")
	level := fs.String("log-level", "warn", "log level")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *nodes < 1 || *nodes > 9 {
		fmt.Fprintln(stderr, "--nodes must be 1..9")
		return 2
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "raftlog-dev-")
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		*dir = d
	}
	logger := newLogger("raftlog", false, *level, stderr)
	gc := node.ResolveGC(node.DefaultGCPercent, false, 0, false)
	node.SetGC(gc)
	node.LogGC(logger, gc)
	voters := min(3, *nodes)
	var running []*node.Node
	var seeds, bootstrap []string
	for i := 0; i < *nodes; i++ {
		seeds = append(seeds, fmt.Sprintf("127.0.0.1:%d", *kport+200+i))
		bootstrap = append(bootstrap, fmt.Sprintf("127.0.0.1:%d", *kport+i))
	}
	stopAll := func() {
		for _, r := range running {
			r.Close()
		}
	}
	for i := 0; i < *nodes; i++ {
		f := serveFlags{
			nodeID: i + 1, dataDir: filepath.Join(*dir, fmt.Sprintf("node-%d", i+1)),
			kafkaAddr: bootstrap[i], raftAddr: fmt.Sprintf("127.0.0.1:%d", *kport+100+i),
			gossipAddr: seeds[i], httpAddr: fmt.Sprintf("127.0.0.1:%d", *kport+300+i),
			join: strings.Join(seeds, ","), controllerVoters: voters, expectNodes: *nodes,
			partitions: 3, replication: -1,
			// A dev cluster in one process shares one boot: no fake reboots.
			bootIDFile: "/proc/sys/kernel/random/boot_id",
		}
		r, err := node.Start(nodeConfig(f, logger, true))
		if err != nil {
			fmt.Fprintf(stderr, "node %d: %v\n", i+1, err)
			stopAll()
			return 1
		}
		running = append(running, r)
	}
	fmt.Fprintf(stdout, "raftlog dev: %d nodes, data in %s\n", *nodes, *dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := demo(ctx, bootstrap, min(3, *nodes), stdout); err != nil {
		fmt.Fprintf(stderr, "demo failed: %v\n", err)
		stopAll()
		return 1
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", *kport+300)
	fmt.Fprintf(stdout, `
The cluster is up. Bootstrap servers: %s

Try:
  kcat -b %s -L                                  # metadata
  kcat -b %s -t demo -C -e                       # read the demo topic
  echo hello | kcat -b %s -t demo -P             # write to it
  go run ./cmd/raftlog log dump %s              # look at a partition on disk
  go run ./cmd/raftlog cluster status --http %s   # nodes, leaders, lag (metrics: http://%s/metrics)

Ctrl-C stops the cluster.
`, strings.Join(bootstrap, ","), bootstrap[0], bootstrap[0], bootstrap[0], filepath.Join(*dir, "node-1", "demo-0", "log"), httpAddr, httpAddr)
	if !*exit {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
	}
	stopAll()
	return 0
}

// demo creates the demo topic, writes ten records and reads them back.
func demo(ctx context.Context, bootstrap []string, rf int, stdout io.Writer) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap...), kgo.ConsumeTopics("demo"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		_, err := adm.CreateTopic(ctx, 3, int16(rf), nil, "demo")
		if err == nil || errors.Is(err, kerr.TopicAlreadyExists) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create topic: %w", err)
		case <-time.After(200 * time.Millisecond): // the cluster is still forming
		}
	}
	for i := 0; i < 10; i++ {
		r := &kgo.Record{Topic: "demo", Key: []byte(fmt.Sprintf("key-%d", i)), Value: []byte(fmt.Sprintf("hello from raftlog #%d", i))}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	fmt.Fprintln(stdout, "wrote 10 records to topic demo (3 partitions, replicated), reading them back:")
	seen := 0
	for seen < 10 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("consume: read %d of 10: %w", seen, err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			seen++
			fmt.Fprintf(stdout, "  partition %d offset %d: %s = %s\n", r.Partition, r.Offset, r.Key, r.Value)
		})
	}
	return nil
}
