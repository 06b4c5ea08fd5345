package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlog/raftlog/cluster/node"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runDev is `raftlog dev`: a local cluster of --nodes nodes in this
// process on 127.0.0.1, a demo topic written and read back through the
// Kafka protocol, and what to try next.
//
// The nodes log to raftlog.log in the data directory. While they start
// and stop, Raft's elections and its connection errors to peers not yet
// (or no longer) listening are expected, so nothing of the log is shown
// then: a failure to start says what failed, with the errors logged.
// While the cluster runs, warnings and errors are shown too.
func runDev(args []string, stdout, stderr io.Writer) int {
	c := newCommand("dev", "", `Start a local cluster of --nodes nodes in this process on 127.0.0.1, write ten
records to the topic demo and read them back, print what to try, and run until
interrupted (--exit: stop after the demo). The nodes' log is raftlog.log in
the data directory; a temporary directory (no --dir) is removed at the end.`)
	nodes := c.Int("nodes", 3, "number of nodes, 1 to 9 (the first 3 are the controller's voters)")
	dir := c.String("dir", "", "data directory, kept at the end; a later run in it needs the same --nodes and --kafka-port (default: a new temporary directory, removed at the end)")
	kport := c.Int("kafka-port", 9092, "Kafka port of the first node; node i listens on kafka-port+i (Raft +100, gossip +200, HTTP +300)")
	exit := c.Bool("exit", false, "exit after the demo instead of running until interrupted")
	level := c.String("log-level", "info", "level of the nodes' log (raftlog.log in the data directory): trace, debug, info, warn, error or off")
	pos, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if code, ok := c.noArgs(pos, stderr); !ok {
		return code
	}
	switch {
	case *nodes < 1 || *nodes > 9:
		return c.fail(stderr, "--nodes %d: want 1 to 9", *nodes)
	case *kport < 1 || *kport+300+*nodes-1 > 65535:
		return c.fail(stderr, "--kafka-port %d: want 1 to %d (the HTTP ports are 300 above)", *kport, 65535-300-*nodes+1)
	case !validLogLevel(*level):
		return c.fail(stderr, "--log-level %q: want trace, debug, info, warn, error or off", *level)
	}
	temp := *dir == ""
	if temp {
		d, err := os.MkdirTemp("", "raftlog-dev-")
		if err != nil {
			fmt.Fprintf(stderr, "raftlog dev: %v\n", err)
			return 1
		}
		*dir = d
	} else if err := os.MkdirAll(*dir, 0o755); err != nil {
		fmt.Fprintf(stderr, "raftlog dev: %v\n", err)
		return 1
	}
	if err := devLayout(*dir, *nodes, *kport); err != nil {
		return c.fail(stderr, "%v", err)
	}
	logPath := filepath.Join(*dir, "raftlog.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(stderr, "raftlog dev: %v\n", err)
		if temp {
			os.RemoveAll(*dir)
		}
		return 1
	}
	out := &devLog{file: logFile, console: stderr}
	logger := hclog.New(&hclog.LoggerOptions{Name: "raftlog", Level: hclog.LevelFromString(*level), Output: out})
	gc := node.ResolveGC(node.DefaultGCPercent, false, 0, false)
	node.SetGC(gc)
	node.LogGC(logger, gc)

	var running []*node.Node
	// stop closes the nodes, quietly, and removes a temporary directory
	// unless keep (after a failure, for its log).
	stop := func(keep bool) (failed bool) {
		out.show(false)
		for i, r := range running {
			if err := r.Close(); err != nil {
				fmt.Fprintf(stderr, "raftlog dev: stopping node %d: %v\n", i+1, err)
				failed = true
			}
		}
		logFile.Close()
		switch {
		case temp && !keep && !failed:
			if err := os.RemoveAll(*dir); err != nil {
				fmt.Fprintf(stderr, "raftlog dev: %v\n", err)
				return true
			}
			fmt.Fprintf(stdout, "stopped; removed %s\n", *dir)
		default:
			fmt.Fprintf(stdout, "stopped; data and the nodes' log (raftlog.log) kept in %s\n", *dir)
		}
		return failed
	}
	// startFailed says what failed, with the errors the nodes logged.
	startFailed := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "raftlog dev: %s\n", fmt.Sprintf(format, a...))
		if errs := out.errors(); len(errs) > 0 {
			fmt.Fprintf(stderr, "the last errors the nodes logged (all of it is in %s):\n", logPath)
			for _, e := range errs {
				fmt.Fprint(stderr, "  ", e)
			}
		}
		stop(true)
		return 1
	}

	voters := min(3, *nodes)
	var bootstrap []string
	running, bootstrap, err = startDevNodes(*dir, *nodes, *kport, logger)
	if err != nil {
		return startFailed("%v", err)
	}
	fmt.Fprintf(stdout, "raftlog dev: %d nodes, data and the nodes' log (raftlog.log) in %s\n", *nodes, *dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := demo(ctx, bootstrap, voters, stdout); err != nil {
		return startFailed("demo: %v", err)
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", *kport+300)
	fmt.Fprintf(stdout, "\nThe cluster is up. Bootstrap servers: %s\n", strings.Join(bootstrap, ","))
	if *exit {
		if stop(false) {
			return 1
		}
		return 0
	}
	self := selfCommand(os.Args[0])
	fmt.Fprintf(stdout, `
Try:
  kcat -b %s -L                                  # metadata
  kcat -b %s -t demo -C -e                       # read the demo topic
  echo hello | kcat -b %s -t demo -P             # write to it
  %s log dump %s              # look at a partition on disk
  %s cluster status --http %s   # nodes, leaders, lag (metrics: http://%s/metrics)

Warnings and errors of the nodes show here from now on. Ctrl-C stops the cluster.
`, bootstrap[0], bootstrap[0], bootstrap[0], self, filepath.Join(*dir, "node-1", "demo-0", "log"), self, httpAddr, httpAddr)
	out.show(true)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	signal.Stop(sig)
	if stop(false) {
		return 1
	}
	return 0
}

// startDevNodes starts the nodes of a dev cluster in dir, node i+1 in
// dir/node-<i+1> on the ports kport+i (Kafka), +100 (Raft), +200
// (gossip) and +300 (HTTP). On an error it closes those it started. It
// returns the nodes and their Kafka addresses.
func startDevNodes(dir string, nodes, kport int, logger hclog.Logger) ([]*node.Node, []string, error) {
	var seeds, bootstrap []string
	for i := 0; i < nodes; i++ {
		seeds = append(seeds, fmt.Sprintf("127.0.0.1:%d", kport+200+i))
		bootstrap = append(bootstrap, fmt.Sprintf("127.0.0.1:%d", kport+i))
	}
	var running []*node.Node
	for i := 0; i < nodes; i++ {
		f := serveFlags{
			nodeID: i + 1, dataDir: filepath.Join(dir, fmt.Sprintf("node-%d", i+1)),
			kafkaAddr: bootstrap[i], raftAddr: fmt.Sprintf("127.0.0.1:%d", kport+100+i),
			gossipAddr: seeds[i], httpAddr: fmt.Sprintf("127.0.0.1:%d", kport+300+i),
			join: strings.Join(seeds, ","), controllerVoters: min(3, nodes), expectNodes: nodes,
			partitions: 3, replication: -1,
			// A dev cluster in one process shares one boot: no fake reboots.
			bootIDFile: "/proc/sys/kernel/random/boot_id",
		}
		r, err := node.Start(nodeConfig(f, logger, true))
		if err != nil {
			for _, r := range running {
				r.Close()
			}
			return nil, nil, fmt.Errorf("node %d: %w", i+1, err)
		}
		running = append(running, r)
	}
	return running, bootstrap, nil
}

// devLayout checks that dir, when an earlier run left it, was made with
// the same nodes and ports (their addresses are in the nodes' metadata: on
// others they would not find each other), and records them for the next.
func devLayout(dir string, nodes, kport int) error {
	path := filepath.Join(dir, "dev.json")
	type layout struct {
		Nodes     int `json:"nodes"`
		KafkaPort int `json:"kafka_port"`
	}
	want := layout{Nodes: nodes, KafkaPort: kport}
	if b, err := os.ReadFile(path); err == nil {
		var had layout
		if err := json.Unmarshal(b, &had); err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		if had != want {
			return fmt.Errorf("--dir %s holds a cluster of --nodes %d --kafka-port %d: give the same (its nodes know each other at those ports), or another --dir", dir, had.Nodes, had.KafkaPort)
		}
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "node-1")); err == nil {
		return nil // an earlier run's directory, before dev.json: as it was
	}
	b, _ := json.Marshal(want)
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// devLog is where the nodes of `raftlog dev` log: the file, every line;
// the console, warnings and errors while shown; and, while not shown,
// the last errors, for a failed start.
type devLog struct {
	file    io.Writer
	console io.Writer

	mu     sync.Mutex
	shown  bool
	recent []string
}

const devRecentErrors = 10

func (l *devLog) Write(p []byte) (int, error) { return l.LevelWrite(hclog.Info, p) }

// LevelWrite is hclog's LevelWriter.
func (l *devLog) LevelWrite(level hclog.Level, p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.file.Write(p)
	switch {
	case l.shown && level >= hclog.Warn:
		l.console.Write(p)
	case !l.shown && level >= hclog.Error:
		if len(l.recent) == devRecentErrors {
			l.recent = append(l.recent[:0], l.recent[1:]...)
		}
		l.recent = append(l.recent, string(p))
	}
	return len(p), nil
}

func (l *devLog) show(on bool) {
	l.mu.Lock()
	l.shown = on
	l.recent = nil
	l.mu.Unlock()
}

func (l *devLog) errors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.recent...)
}

// demo creates the demo topic (or finds it, in the directory of an
// earlier run), writes ten records and reads back those ten: from the end
// offsets the partitions had before.
func demo(ctx context.Context, bootstrap []string, rf int, stdout io.Writer) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
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
	// The end offsets, once every partition has a leader to answer.
	var ends kadm.ListedOffsets
	for {
		ends, err = adm.ListEndOffsets(ctx, "demo")
		if err == nil {
			err = ends.Error()
		}
		if err == nil && len(ends["demo"]) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("end offsets: %v", err)
		case <-time.After(200 * time.Millisecond): // leaders are still being elected
		}
	}
	from := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) { from[o.Partition] = kgo.NewOffset().At(o.Offset) })
	for i := 0; i < 10; i++ {
		r := &kgo.Record{Topic: "demo", Key: []byte(fmt.Sprintf("key-%d", i)), Value: []byte(fmt.Sprintf("hello from raftlog #%d", i))}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	fmt.Fprintf(stdout, "wrote 10 records to topic demo (%d partitions, replicated), reading them back:\n", len(from))
	rd, err := kgo.NewClient(kgo.SeedBrokers(bootstrap...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"demo": from}))
	if err != nil {
		return err
	}
	defer rd.Close()
	seen := 0
	for seen < 10 {
		fetches := rd.PollFetches(ctx)
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

// selfCommand is how the user ran this program, for the commands dev
// suggests: "go run ./cmd/raftlog" when arg0 is a binary go run built
// (in its go-build folder), arg0 otherwise.
func selfCommand(arg0 string) string {
	if strings.Contains(filepath.ToSlash(arg0), "/go-build") {
		return "go run ./cmd/raftlog"
	}
	return arg0
}
