package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlog/raftlog/cluster"
	"github.com/raftlog/raftlog/cluster/node"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/replication"
	"github.com/raftlog/raftlog/rpc"
)

// serveFlags are the flags of `raftlog serve`; each has a RAFTLOG_*
// environment variable (the flag name upper-cased, dashes as underscores),
// which the flag overrides.
type serveFlags struct {
	nodeID           int
	dataDir          string
	kafkaAddr        string
	advertisedKafka  string
	raftAddr         string
	advertisedRaft   string
	gossipAddr       string
	advertisedGossip string
	advertisedHTTP   string
	httpAddr         string
	join             string
	rack             string
	bootIDFile       string
	controllerVoters int
	ctrlSnapshot     int
	raftDirect       int
	expectNodes      int
	logJSON          bool
	logLevel         string
	partitions       int
	replication      int
	maxPartsPerNode  int
	maxPartitions    int
	acceptDataLoss   bool
	producerIDExpiry time.Duration
	maxProducerIDs   int
	balanceInterval  time.Duration
	balanceMoves     int
	balanceGrace     time.Duration
	deadNodeTimeout  time.Duration
	pprof            bool
	noQuiesce        bool
	writeBehind      int64
	offsetsRetention time.Duration
	offsetsCheck     time.Duration
	// The collector's settings are the process's: runServe applies them
	// (a serveFlags built in code leaves them to its caller).
	gcPercent   int
	memoryLimit int64
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.nodeID, "node-id", 1, "this node's Kafka node id (unique, ≥ 0)")
	fs.StringVar(&f.dataDir, "data-dir", "./data", "directory of this node's partitions and metadata")
	fs.StringVar(&f.kafkaAddr, "kafka-addr", "127.0.0.1:9092", "Kafka protocol listen address")
	fs.StringVar(&f.advertisedKafka, "advertised-kafka-addr", "", "address clients reach the Kafka listener at (default: --kafka-addr)")
	fs.StringVar(&f.raftAddr, "raft-addr", "127.0.0.1:9192", "Raft transport listen address (all partitions share it)")
	fs.StringVar(&f.advertisedRaft, "advertised-raft-addr", "", "address peers reach the Raft transport at (default: --raft-addr)")
	fs.StringVar(&f.gossipAddr, "gossip-addr", "127.0.0.1:9292", "memberlist gossip bind address")
	fs.StringVar(&f.advertisedGossip, "advertised-gossip-addr", "", "address peers reach gossip at (default: --gossip-addr)")
	fs.StringVar(&f.httpAddr, "http-addr", "127.0.0.1:9392", "HTTP address of /healthz, /readyz, /metrics and /v1/status")
	fs.StringVar(&f.advertisedHTTP, "advertised-http-addr", "", "address tools reach the HTTP listener at, gossiped to the other nodes for raftlog cluster status (default: --http-addr)")
	fs.StringVar(&f.join, "join", "", "comma-separated gossip addresses of nodes to join")
	fs.StringVar(&f.rack, "rack", "", "rack (replicas are spread over racks)")
	fs.StringVar(&f.bootIDFile, "boot-id-file", "/proc/sys/kernel/random/boot_id", "file holding the kernel boot id (the vote guard reads it)")
	fs.IntVar(&f.controllerVoters, "controller-voters", 3, "how many nodes (lowest ids) form the controller group")
	fs.IntVar(&f.ctrlSnapshot, "controller-snapshot-commands", cluster.DefaultControllerSnapshotCommands, "controller log offsets (one per metadata command: committed offsets, mostly) between two snapshots of the metadata, after each of which the controller log starts at the snapshot (negative: never, the log is kept whole)")
	fs.IntVar(&f.raftDirect, "raft-direct-connections", replication.DefaultDirectLimit, "direct connections this node dials to each peer for the partitions' append streams (every batch to every follower), past which they share the one multiplexed connection per peer (0: none, all on that one)")
	fs.IntVar(&f.expectNodes, "expect-nodes", 0, "members needed before the cluster first forms (default: --controller-voters)")
	fs.BoolVar(&f.logJSON, "log-json", false, "log JSON lines")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error or off")
	fs.IntVar(&f.partitions, "default-partitions", 1, "partitions of a topic created without a count")
	fs.IntVar(&f.replication, "default-replication-factor", -1, "replicas of a topic created without a factor (-1: min(3, brokers))")
	fs.IntVar(&f.maxPartsPerNode, "max-partitions-per-node", cluster.DefaultMaxPartitionsPerNode, "partition replicas a node may be assigned; creating or growing a topic past it is refused with POLICY_VIOLATION (negative: no limit)")
	fs.IntVar(&f.maxPartitions, "max-partitions", cluster.DefaultMaxPartitions, "partitions the cluster may hold; creating or growing a topic past it is refused with POLICY_VIOLATION (negative: no limit)")
	fs.DurationVar(&f.producerIDExpiry, "producer-id-expiration", replication.DefaultProducerIDExpiration, "forget an idempotent producer's sequence state after it has written nothing for this long (Kafka's producer.id.expiration.ms)")
	fs.IntVar(&f.maxProducerIDs, "max-producer-ids", replication.DefaultMaxProducerIDs, "idempotent producers remembered per partition; past it the least recently written is forgotten")
	fs.DurationVar(&f.balanceInterval, "leader-balance-interval", 30*time.Second, "how often the controller's leader spreads partition leaders evenly over the live nodes (0: never)")
	fs.IntVar(&f.balanceMoves, "leader-balance-moves", 8, "leadership transfers per balancing round at most")
	fs.DurationVar(&f.balanceGrace, "leader-balance-grace", time.Minute, "a node up for less than this is given no leadership by the balancer")
	fs.DurationVar(&f.offsetsRetention, "offsets-retention", rpc.DefaultOffsetsRetention, "delete a consumer group's committed offset once the group has had no members, and the offset has not been committed, for this long (Kafka's offsets.retention.minutes; negative: never; 0: the default)")
	fs.DurationVar(&f.offsetsCheck, "offsets-retention-check-interval", rpc.DefaultOffsetsRetentionCheck, "how often the group coordinator looks for expired committed offsets (offsets.retention.check.interval.ms)")
	fs.DurationVar(&f.deadNodeTimeout, "dead-node-timeout", 10*time.Minute, "move the replicas of a node that has not been a live member for this long to live nodes (0: never)")
	fs.Int64Var(&f.writeBehind, "write-behind-bytes", log.DefaultWriteBehindBytes, "start the writeback of a partition log's new bytes to the device every this many bytes (sync_file_range), so the kernel writes the logs back in small steps instead of bursts that stall appends; makes nothing durable (negative: leave it to the kernel)")
	fs.IntVar(&f.gcPercent, "gc-percent", node.DefaultGCPercent, "the Go collector's heap growth between collections, in percent of the live heap (GOGC, which applies when this flag is not given); above Go's 100 it trades memory for fewer collections, whose work takes CPU from the appends in flight (negative: none until the memory limit)")
	fs.Int64Var(&f.memoryLimit, "memory-limit-bytes", 0, "soft limit of the Go heap: nearing it the collector runs as often as it must (GOMEMLIMIT, which applies when this flag is not given; 0: half the memory of the machine, or of the cgroup when lower; negative: none)")
	fs.BoolVar(&f.noQuiesce, "no-quiesce", false, "keep every idle partition's Raft heartbeats going instead of quiescing it (one link per pair of nodes stands in for them by default)")
	fs.BoolVar(&f.pprof, "pprof", false, "serve Go's profiles (net/http/pprof) under /debug/pprof/ on the HTTP listener")
	fs.BoolVar(&f.acceptDataLoss, "accept-data-loss", false, "release the vote guard of this node's replicas: only when every replica of a group lost power and some are gone for good (writes acknowledged past the surviving logs may be lost)")
}

// envDefaults sets each flag not given on the command line from its
// RAFTLOG_* variable, and returns the flags given either way.
func envDefaults(fs *flag.FlagSet) (given map[string]bool, err error) {
	given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		key := flagEnv(f.Name)
		if v, ok := os.LookupEnv(key); ok {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %w", key, v, e)
			}
			given[f.Name] = true
		}
	})
	return given, err
}

// flagEnv is the environment variable of a flag of `raftlog serve`.
func flagEnv(name string) string {
	return "RAFTLOG_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

func validLogLevel(s string) bool { return hclog.LevelFromString(s) != hclog.NoLevel }

func newLogger(name string, json bool, level string, out io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, JSONFormat: json, Level: hclog.LevelFromString(level), Output: out})
}

func runServe(args []string, stdout, stderr io.Writer) int {
	c := newCommand("serve", "", `Run one node. Every flag has an environment variable: RAFTLOG_ and the flag
name in capitals, dashes as underscores (--node-id: RAFTLOG_NODE_ID); a flag
on the command line wins over its variable. See docs/operations.md.`)
	var f serveFlags
	f.register(c.FlagSet)
	pos, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if code, ok := c.noArgs(pos, stderr); !ok {
		return code
	}
	given, err := envDefaults(c.FlagSet)
	if err != nil {
		return c.fail(stderr, "%v", err)
	}
	if !validLogLevel(f.logLevel) {
		return c.fail(stderr, "--log-level %q: want trace, debug, info, warn, error or off", f.logLevel)
	}
	if f.nodeID < 0 {
		return c.fail(stderr, "--node-id %d: want 0 or more", f.nodeID)
	}
	if f.raftDirect == 0 {
		// 0 given: none. (serveFlags built in code leave 0 for the
		// default, which cluster.Config reads so.)
		f.raftDirect = -1
	}
	logger := newLogger("raftlog", f.logJSON, f.logLevel, stderr)
	gc := node.ResolveGC(f.gcPercent, given["gc-percent"], f.memoryLimit, given["memory-limit-bytes"])
	node.SetGC(gc)
	node.LogGC(logger, gc)
	warnFileLimit(logger, f.maxPartsPerNode)
	nd, err := node.Start(nodeConfig(f, logger, false))
	if err != nil {
		logger.Error("start", "error", err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	s := <-sig
	logger.Info("shutting down", "signal", s.String())
	if err := nd.Close(); err != nil {
		logger.Error("shutdown", "error", err)
		return 1
	}
	return 0
}

// nodeConfig is the node configuration of f; local gives the fast gossip
// timings of a cluster on one machine (`raftlog dev`). Raft's timings are
// the defaults either way.
func nodeConfig(f serveFlags, logger hclog.Logger, local bool) node.Config {
	var join []string
	for _, s := range strings.Split(f.join, ",") {
		if s = strings.TrimSpace(s); s != "" {
			join = append(join, s)
		}
	}
	cfg := node.Config{
		KafkaAddr: f.kafkaAddr, HTTPAddr: f.httpAddr, Pprof: f.pprof,
		Groups: rpc.GroupConfig{OffsetsRetention: f.offsetsRetention, OffsetsRetentionCheckInterval: f.offsetsCheck},
		Cluster: cluster.Config{
			NodeID: int32(f.nodeID), DataDir: f.dataDir, AdvertisedKafkaAddr: f.advertisedKafka,
			RaftAddr: f.raftAddr, AdvertisedRaftAddr: f.advertisedRaft,
			GossipAddr: f.gossipAddr, AdvertisedGossip: f.advertisedGossip, HTTPAddr: f.advertisedHTTP,
			Join: join, Rack: f.rack, BootID: node.BootID(f.bootIDFile),
			ControllerVoters: f.controllerVoters, ExpectNodes: f.expectNodes, ControllerSnapshotCommands: f.ctrlSnapshot, RaftDirectConnections: f.raftDirect,
			DefaultPartitions: int32(f.partitions), DefaultReplication: int16(f.replication),
			MaxPartitionsPerNode: f.maxPartsPerNode, MaxPartitions: f.maxPartitions,
			Logger: logger.With("node", strconv.Itoa(f.nodeID)), LocalGossip: local, AcceptDataLoss: f.acceptDataLoss,
			ProducerIDExpiration: f.producerIDExpiry, MaxProducerIDs: f.maxProducerIDs,
			LeaderBalanceInterval: f.balanceInterval, LeaderBalanceMoves: f.balanceMoves, LeaderBalanceGrace: f.balanceGrace,
			DeadNodeTimeout: f.deadNodeTimeout, NoQuiescence: f.noQuiesce,
			LogConfig: log.Config{WriteBehindBytes: f.writeBehind}, // 0 (flags built in code): the default
		},
	}
	return cfg
}
