// Package cluster runs a raftlog node: membership with hashicorp/memberlist
// (node identity, addresses, failure detection, and the gossip of who leads
// each partition), the controller (a Raft group over the first nodes whose
// committed commands are the cluster metadata: topics, partition → replica
// assignment, configs, producer ids), and the reconciler that starts and
// stops the partition replicas the metadata assigns to this node.
package cluster

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/log/vfs"
	"github.com/raftlog/raftlog/replication"
)

// Config configures a Node.
type Config struct {
	NodeID              int32
	DataDir             string
	AdvertisedKafkaAddr string // host:port clients reach this node's Kafka listener at
	RaftAddr            string // listen address of the node-wide Raft transport
	AdvertisedRaftAddr  string // "" = the listener's address
	GossipAddr          string // memberlist bind address host:port
	AdvertisedGossip    string // "" = GossipAddr
	HTTPAddr            string // advertised in the gossip for tools
	Join                []string
	Rack                string
	// BootID is the kernel boot id the vote guard compares (see
	// replication.Config.BootID).
	BootID string
	// ControllerVoters is how many nodes (the lowest ids) form the
	// controller group (default 3, or fewer when the cluster is smaller at
	// its first start: see ExpectNodes).
	ControllerVoters int
	// ControllerSnapshotCommands is how many offsets of the controller log
	// (one per metadata command: committed offsets, mostly, and Raft's few
	// control batches) are applied between two snapshots of the metadata,
	// after each of which the controller log's start moves up to the
	// snapshot (default DefaultControllerSnapshotCommands; negative: never,
	// the log is kept whole).
	ControllerSnapshotCommands int
	// RaftDirectConnections bounds the direct connections this node dials
	// to each peer for the partitions' append streams (see
	// replication.Mux; default replication.DefaultDirectLimit; negative:
	// none, every stream on the one connection per peer).
	RaftDirectConnections int
	// ExpectNodes is how many nodes must be members before the controller
	// is bootstrapped the first time (default ControllerVoters).
	ExpectNodes int
	// Topic defaults.
	DefaultPartitions  int32 // default 1
	DefaultReplication int16 // default min(3, live brokers)
	// MaxPartitionsPerNode bounds the partition replicas one node may be
	// assigned, MaxPartitions the partitions of the cluster: a topic
	// created or grown past either is refused (POLICY_VIOLATION, naming
	// the limit). Zero takes the defaults (DefaultMaxPartitionsPerNode,
	// DefaultMaxPartitions); negative: no limit.
	MaxPartitionsPerNode int
	MaxPartitions        int
	LogConfig            log.Config
	Raft                 replication.RaftConfig
	Logger               hclog.Logger
	// FS is the file system of the replicas' logs (default the operating
	// system's; tests inject write failures). With one, the mmapped
	// indexes go to <replica dir>/index on the operating system's.
	FS vfs.FS
	// Dial opens the connections to peers' Raft addresses (default
	// net.DialTimeout; tests cut links with replication/faultnet here).
	Dial replication.DialFunc
	// NoQuiescence keeps every partition's Raft heartbeats going while
	// it is idle (see replication.Quiescer; by default idle groups
	// quiesce).
	NoQuiescence bool
	// LocalGossip selects memberlist's fast local-network timings.
	LocalGossip bool
	// AcceptDataLoss releases the vote guard of every replica this node
	// opens (an operator's decision when every voter of a group lost power
	// and some will not come back: the most complete survivors must lead;
	// writes acknowledged past their logs may be lost, and the log says so).
	AcceptDataLoss bool
	// ProducerIDExpiration and MaxProducerIDs bound each partition's
	// idempotent-producer state (see replication.Config).
	ProducerIDExpiration time.Duration
	MaxProducerIDs       int
	// LeaderBalanceInterval is how often the controller's leader spreads
	// partition leaders evenly over the live nodes (0: never; see
	// balance.go). LeaderBalanceMoves bounds the leadership transfers of
	// one round (default 8), and a node up for less than
	// LeaderBalanceGrace is given no leadership.
	LeaderBalanceInterval time.Duration
	LeaderBalanceMoves    int
	LeaderBalanceGrace    time.Duration
	// DeadNodeTimeout is how long a node may be absent from the live
	// members before the controller's leader moves its replicas to live
	// nodes (0: never; see reassign.go).
	DeadNodeTimeout time.Duration
}

// BrokerInfo is a live member.
type BrokerInfo struct {
	NodeID      int32
	Incarnation string
	KafkaAddr   string
	RaftAddr    string
	HTTPAddr    string
	Rack        string
	// Features are the node's (Registration.Features); empty from a
	// node of an earlier version.
	Features string `json:",omitempty"`
	// GossipAddr is the member's gossip address (memberlist's, not part
	// of the gossiped metadata).
	GossipAddr string `json:"-"`
}

// Node is one raftlog node.
type Node struct {
	cfg         Config
	logger      hclog.Logger
	incarnation string
	ln          net.Listener
	mux         *replication.Mux
	quiescer    *replication.Quiescer // nil with NoQuiescence
	ml          *memberlist.Memberlist
	gossipAddr  string // this node's gossip address as memberlist advertises it
	bq          *memberlist.TransmitLimitedQueue
	meta        *Meta
	ctl         *Controller
	leaders     *leaderTable

	// members are the live members' broker information by member name,
	// copied in memberlist's event callbacks, which run under its lock:
	// the *memberlist.Node values Members returns are memberlist's own and
	// change under it, so reading their fields later races.
	membersMu sync.Mutex
	members   map[string]BrokerInfo
	rpcLayer  raft.StreamLayer

	mu       sync.Mutex
	replicas map[string]*replication.Replica // by group "<topic>-<partition>"
	// dirs maps the directory of each replica in replicas to its group.
	dirs   map[string]string
	closed bool

	started time.Time
	heal    healState // owned by healLoop
	// failed holds the replicas a write error stopped or that failed to
	// open, by group (under mu): reopened with a growing backoff.
	failed map[string]*failedReplica
	// awaitingPeers is the new partitions whose first replica is here
	// and waits for its peers to open theirs (bootstrapNew).
	awaitingPeers atomic.Int64

	kick chan struct{}
	// leadersKick wakes leaderLoop: a replica won or lost leadership.
	leadersKick chan struct{}
	stop        chan struct{}
	wg          sync.WaitGroup
	ctx         context.Context
	cancel      context.CancelFunc
}

const controllerGroup = "__controller"

// controllerSegmentBytes is the controller log's segment size: small, so
// that the segments below a metadata snapshot can go (snapshot.go).
const controllerSegmentBytes = 16 << 20

// Start starts a node: transport, membership, controller, reconciler.
func Start(cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.ControllerVoters <= 0 {
		cfg.ControllerVoters = 3
	}
	if cfg.ExpectNodes <= 0 {
		cfg.ExpectNodes = cfg.ControllerVoters
	}
	if cfg.DefaultPartitions <= 0 {
		cfg.DefaultPartitions = 1
	}
	if cfg.MaxPartitionsPerNode == 0 {
		cfg.MaxPartitionsPerNode = DefaultMaxPartitionsPerNode
	}
	if cfg.MaxPartitions == 0 {
		cfg.MaxPartitions = DefaultMaxPartitions
	}
	if cfg.LeaderBalanceMoves <= 0 {
		cfg.LeaderBalanceMoves = 8
	}
	n := &Node{cfg: cfg, logger: cfg.Logger.With("node", cfg.NodeID), meta: newMeta(), leaders: newLeaderTable(),
		replicas: map[string]*replication.Replica{}, dirs: map[string]string{}, kick: make(chan struct{}, 1), leadersKick: make(chan struct{}, 1), stop: make(chan struct{}), started: time.Now()}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.ctl = &Controller{cfg: cfg, meta: n.meta, node: n, leaders: n.leaders, logger: n.logger, ctx: n.ctx, wg: &n.wg}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, err
	}
	inc, err := loadIncarnation(cfg.DataDir, cfg.NodeID)
	if err != nil {
		return nil, err
	}
	n.incarnation = inc
	if n.ln, err = net.Listen("tcp", cfg.RaftAddr); err != nil {
		return nil, fmt.Errorf("cluster: raft listener: %w", err)
	}
	muxOpts := []replication.MuxOption{replication.WithMuxLogger(n.logger.Named("mux"))}
	if cfg.RaftDirectConnections != 0 { // 0: the mux's default
		muxOpts = append(muxOpts, replication.WithDirectLimit(cfg.RaftDirectConnections))
	}
	if cfg.Dial != nil {
		muxOpts = append(muxOpts, replication.WithDialer(cfg.Dial))
	}
	n.mux = replication.NewMux(n.ln, cfg.AdvertisedRaftAddr, muxOpts...)
	if n.rpcLayer, err = n.mux.Layer(clusterRPCGroup); err != nil {
		n.mux.Close()
		return nil, err
	}
	if !cfg.NoQuiescence {
		if n.quiescer, err = replication.NewQuiescer(n.mux, replication.QuiescerConfig{Logger: n.logger.Named("quiesce")}); err != nil {
			n.rpcLayer.Close()
			n.mux.Close()
			return nil, err
		}
	}
	n.wg.Add(1)
	go n.serveRPC()
	if err := n.startMembership(); err != nil {
		n.rpcLayer.Close()
		if n.quiescer != nil {
			n.quiescer.Close()
		}
		n.mux.Close()
		return nil, err
	}
	// The metadata group stays in the legacy offset layout: no client
	// reads its offsets, and a node joining a cluster cannot learn its
	// layout before it has its replica.
	if n.ctl.r, err = n.openReplica(controllerGroup, controllerGroup, log.Config{RetentionMs: -1, RetentionBytes: -1, SegmentBytes: controllerSegmentBytes}, false, ""); err != nil {
		n.Close()
		return nil, err
	}
	n.wg.Add(5)
	go n.ctl.applyLoop()
	go n.reconcileLoop()
	go n.leaderLoop()
	go n.healLoop()
	go n.rejoinLoop()
	return n, nil
}

// loadIncarnation reads the node's identity file, creating it in a new
// data directory: a wiped disk gets a new incarnation, and so new Raft
// server ids for all its replicas.
func loadIncarnation(dir string, id int32) (string, error) {
	path := filepath.Join(dir, "node.json")
	var f struct {
		NodeID      int32  `json:"node_id"`
		Incarnation string `json:"incarnation"`
	}
	b, err := os.ReadFile(path)
	if err == nil {
		if err := json.Unmarshal(b, &f); err != nil {
			return "", fmt.Errorf("cluster: %s: %w", path, err)
		}
		if f.NodeID != id {
			return "", fmt.Errorf("cluster: %s belongs to node %d, not %d", dir, f.NodeID, id)
		}
		return f.Incarnation, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	var r [4]byte
	rand.Read(r[:])
	f.NodeID, f.Incarnation = id, hex.EncodeToString(r[:])
	b, _ = json.Marshal(f)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return "", err
	}
	if fh, err := os.Open(tmp); err == nil {
		fh.Sync()
		fh.Close()
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return f.Incarnation, nil
}

func serverID(node int32, inc string) raft.ServerID {
	return raft.ServerID(fmt.Sprintf("%d-%s", node, inc))
}

// nodeOf parses the node id of a server id.
func nodeOf(id raft.ServerID) int32 {
	s := string(id)
	if i := strings.IndexByte(s, '-'); i > 0 {
		s = s[:i]
	}
	v, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return -1
	}
	return int32(v)
}

// ID is the node's Kafka node id.
func (n *Node) ID() int32 { return n.cfg.NodeID }

// Meta is the cluster metadata as applied here.
func (n *Node) Meta() *Meta { return n.meta }

// Controller is the node's part in the metadata group, where the admin
// operations (topics, partitions, configs, producer ids, committed
// offsets) are appended.
func (n *Node) Controller() *Controller { return n.ctl }

// ControllerLog returns the start and end offsets of this node's replica
// of the controller log (the start moves up to each metadata snapshot).
func (n *Node) ControllerLog() (start, end int64) {
	l := n.ctl.r.Log()
	return l.StartOffset(), l.EndOffset()
}

// QuiescedReplicas is the number of local replicas that follow quiesced
// (see replication.Quiescer; 0 with NoQuiescence).
func (n *Node) QuiescedReplicas() int {
	if n.quiescer == nil {
		return 0
	}
	return n.quiescer.Quiesced()
}

// AwaitingPeers is the number of new partitions whose first replica is
// here and waits, before its group's first election, for a majority of
// the partition's nodes to have opened their replicas.
func (n *Node) AwaitingPeers() int { return int(n.awaitingPeers.Load()) }

// Mux is the node-wide Raft transport.
func (n *Node) Mux() *replication.Mux { return n.mux }

// groupName names a partition's Raft group (and its transport streams and
// leader gossip): the topic id is part of it, so a topic deleted and
// created again is another group whose replicas never talk to the old
// one's.
func groupName(t Topic, p int32) string { return string(appendGroupName(nil, t.Name, p, t.ID)) }

// appendGroupName appends groupName's bytes to dst: a lookup by
// n.replicas[string(appendGroupName(buf[:0], ...))] allocates nothing.
func appendGroupName(dst []byte, topic string, p int32, id [16]byte) []byte {
	dst = append(dst, topic...)
	dst = append(dst, '-')
	dst = strconv.AppendInt(dst, int64(p), 10)
	dst = append(dst, '@')
	return hex.AppendEncode(dst, id[:8])
}

// groupDir is the directory of group's replica (partitionDir): its name
// up to the '@' (topic names hold none).
func groupDir(group string) string {
	if i := strings.LastIndexByte(group, '@'); i >= 0 {
		return group[:i]
	}
	return group
}

// addReplicaLocked records r, the replica of group g. Under n.mu.
func (n *Node) addReplicaLocked(g string, r *replication.Replica) {
	n.replicas[g] = r
	n.dirs[groupDir(g)] = g
}

// removeReplicaLocked forgets the replica of group g. Under n.mu.
func (n *Node) removeReplicaLocked(g string) {
	delete(n.replicas, g)
	if d := groupDir(g); n.dirs[d] == g {
		delete(n.dirs, d)
	}
}

// partitionDir is a partition replica's directory, Kafka's <topic>-<partition>.
func partitionDir(topic string, p int32) string { return fmt.Sprintf("%s-%d", topic, p) }

// PartitionLease is a partition group's Raft heartbeat, election and
// leader lease timeouts when Config.Raft leaves them unset. An idle
// group's leader must hear from a quorum within a lease, so its
// heartbeats (answered by its own transport while the followers' nodes
// live) go out every quarter to half of one: that is what an idle
// partition costs, per follower. Twice Raft's default halves it, and
// rides out twice as long a stall of a node's CPU without every leader
// on it stepping down. It does not slow failover: a node's death elects
// the groups it led within a vote's round trip of its link ending
// (replication's quiescence), not on the followers' timeouts. The
// controller's group keeps Raft's defaults.
const PartitionLease = 2 * time.Second

// partitionRaft is the Raft configuration of a partition group: unset
// timeouts at PartitionLease, and the CommitTimeout, unset, at the
// lease: it is how long an idle leader waits before it sends each
// follower an empty append, which carries only the commit index (the
// heartbeats keep the lease). Under load appends go out at once
// whatever it is; followers learn a commit up to twice this late, and no
// client reads from them.
func partitionRaft(rc replication.RaftConfig) replication.RaftConfig {
	if rc.HeartbeatTimeout == 0 && rc.ElectionTimeout == 0 && rc.LeaderLeaseTimeout == 0 {
		rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = PartitionLease, PartitionLease, PartitionLease
	}
	if rc.CommitTimeout == 0 {
		rc.CommitTimeout = cmp.Or(rc.LeaderLeaseTimeout, rc.HeartbeatTimeout, time.Second)
	}
	return rc
}

// openReplica opens a local replica of group in dirName (under DataDir),
// in the dense offset layout or the legacy one; gate, when not empty,
// opens it gated by the vote guard for that reason (see
// replication.Config.Gate).
func (n *Node) openReplica(group, dirName string, lc log.Config, dense bool, gate string) (*replication.Replica, error) {
	dir := filepath.Join(n.cfg.DataDir, dirName)
	indexDir := ""
	if n.cfg.FS != nil {
		indexDir = filepath.Join(dir, "index") // mmapped: on the OS's file system
	}
	rc := n.cfg.Raft
	if group != controllerGroup {
		rc = partitionRaft(rc)
	}
	r, err := replication.Open(replication.Config{IndexDir: indexDir,
		Group: group, NodeID: strconv.Itoa(int(n.cfg.NodeID)), ServerID: serverID(n.cfg.NodeID, n.incarnation),
		Dir: dir, Log: lc, DenseOffsets: dense, Mux: n.mux, Quiescer: n.quiescer, Logger: n.logger, BootID: n.cfg.BootID, Raft: rc, FS: n.cfg.FS,
		ProducerIDExpiration: n.cfg.ProducerIDExpiration, MaxProducerIDs: n.cfg.MaxProducerIDs, Gate: gate,
		OnLeadership: n.kickLeaders,
	})
	if err == nil && n.cfg.AcceptDataLoss && r.Gated() {
		r.ForceUngate("--accept-data-loss")
	}
	return r, err
}

// Brokers lists the live members (suspects included, as memberlist's
// own Members), by node id.
func (n *Node) Brokers() []BrokerInfo {
	n.membersMu.Lock()
	out := make([]BrokerInfo, 0, len(n.members))
	for _, bi := range n.members {
		out = append(out, bi)
	}
	n.membersMu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

// ControllerID is the node id leading the controller, -1 when none: also
// while this node has not heard from the leader it knows for longer than
// a few heartbeats (it is likely gone; clients asking meanwhile get "not
// available" and ask again rather than cache a dead coordinator).
func (n *Node) ControllerID() int32 {
	id, _ := n.ctl.r.Leader()
	if id == "" {
		return -1
	}
	if !n.ctl.r.IsLeader() {
		hb := n.cfg.Raft.HeartbeatTimeout
		if hb == 0 {
			hb = time.Second
		}
		if last := n.ctl.r.LastContact(); !last.IsZero() && time.Since(last) > hb/2 {
			return -1
		}
	}
	return nodeOf(id)
}

// Replica returns the local replica of a partition.
func (n *Node) Replica(topic string, p int32) (*replication.Replica, bool) {
	id, _, ok := n.meta.topicRef(topic)
	if !ok {
		return nil, false
	}
	return n.replicaOf(topic, p, id)
}

// replicaOf is the local replica of partition p of the topic with id.
func (n *Node) replicaOf(topic string, p int32, id [16]byte) (*replication.Replica, bool) {
	var buf [128]byte
	g := appendGroupName(buf[:0], topic, p, id)
	n.mu.Lock()
	defer n.mu.Unlock()
	r, ok := n.replicas[string(g)]
	return r, ok
}

// Leader returns who leads a partition as far as this node knows: its own
// replica's view when it has one (-1 while it knows none, or while the
// leader is neither a live member nor registered), else the gossip's
// (a live member only). -1 when unknown.
func (n *Node) Leader(topic string, p int32) (node int32, epoch int32) {
	id, _, ok := n.meta.topicRef(topic)
	if !ok {
		return -1, -1
	}
	if r, ok := n.replicaOf(topic, p, id); ok {
		// Raft's leader, when its broker can be named: a live member or
		// registered (a node this one's gossip has not seen again yet).
		if id, _ := r.Leader(); id != "" && n.known(nodeOf(id)) {
			return nodeOf(id), int32(r.Term())
		}
		return -1, -1
	}
	var buf [128]byte
	if e, ok := n.leaders.get(string(appendGroupName(buf[:0], topic, p, id))); ok {
		// Gossip is hearsay: only a live member's claim.
		if _, alive := n.liveBroker(e.Node); alive {
			return e.Node, e.Term
		}
	}
	return -1, -1
}

// WaitReady blocks until the controller has a leader and has applied the
// cluster's first command, or ctx ends.
func (n *Node) WaitReady(ctx context.Context) error {
	for {
		ch := n.meta.changes()
		if n.meta.ClusterID() != "" && n.ControllerID() >= 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond): // leadership has no change channel: re-check
		}
	}
}

// Ready reports whether the node serves: controller reachable, this node
// registered as it is now, every local replica caught up (none gated),
// and every leader it would name (the controller's, its replicas') a
// broker it can list: a live member or registered.
func (n *Node) Ready() (bool, string) {
	ctrl := n.ControllerID()
	if ctrl < 0 {
		return false, "no controller leader"
	}
	if n.meta.ClusterID() == "" {
		return false, "metadata not applied yet"
	}
	if !n.registered() {
		return false, "this node's registration is not applied yet"
	}
	if !n.known(ctrl) {
		return false, fmt.Sprintf("the controller's leader, node %d, is neither a live member nor registered", ctrl)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for g, r := range n.replicas {
		if r.Gated() {
			return false, "replica " + g + " is gated: " + r.GateReason()
		}
		if err := r.WriteError(); err != nil {
			return false, "replica " + g + " stopped by a write error: " + err.Error()
		}
		if id, _ := r.Leader(); id != "" && !n.known(nodeOf(id)) {
			return false, fmt.Sprintf("replica %s names node %d its leader, which is neither a live member nor registered", g, nodeOf(id))
		}
	}
	for g, f := range n.failed {
		if _, open := n.replicas[g]; !open {
			return false, "replica " + g + " is not open: " + f.err.Error()
		}
	}
	if err := n.ctl.r.WriteError(); err != nil {
		return false, "the controller replica stopped by a write error: " + err.Error()
	}
	return true, ""
}

func (n *Node) kickLeaders() {
	select {
	case n.leadersKick <- struct{}{}:
	default:
	}
}

func (n *Node) kickReconcile() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// Close leaves the cluster and shuts every replica down cleanly, handing
// leadership off first.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	reps := make([]*replication.Replica, 0, len(n.replicas))
	for _, r := range n.replicas {
		reps = append(reps, r)
	}
	n.mu.Unlock()
	// Hand leadership off so clients fail over without waiting for an
	// election timeout; not when no other node is a member, where every
	// hand-off would wait out its timeout (the last node of a cluster
	// stopping, 32 at a time, took over 30 s at 1000 leaders).
	if n.otherMembers() {
		eachReplica(reps, func(r *replication.Replica) error {
			if r.IsLeader() {
				_ = r.TransferLeadership("", "")
			}
			return nil
		})
		if n.ctl.r != nil && n.ctl.r.IsLeader() {
			_ = n.ctl.r.TransferLeadership("", "")
		}
	}
	close(n.stop)
	n.cancel()
	n.rpcLayer.Close()
	n.wg.Wait()
	errs := eachReplica(reps, (*replication.Replica).Close)
	if n.ctl.r != nil {
		errs = append(errs, n.ctl.r.Close())
	}
	if n.ml != nil {
		_ = n.ml.Leave(2 * time.Second)
		errs = append(errs, n.ml.Shutdown())
	}
	n.rpcLayer.Close()
	if n.quiescer != nil {
		n.quiescer.Close()
	}
	errs = append(errs, n.mux.Close())
	return errors.Join(errs...)
}

// otherMembers reports whether a node other than this one is a member
// (alive or suspected).
func (n *Node) otherMembers() bool {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	for _, b := range n.members {
		if b.NodeID != n.cfg.NodeID {
			return true
		}
	}
	return false
}

// closeParallelism bounds the replicas a closing node hands off or
// closes at once: one after another, a node of thousands took minutes.
const closeParallelism = 32

// eachReplica runs f on every replica, closeParallelism at a time, and
// returns f's errors.
func eachReplica(reps []*replication.Replica, f func(*replication.Replica) error) []error {
	errs := make([]error, len(reps))
	inParallel(len(reps), closeParallelism, func(i int) { errs[i] = f(reps[i]) })
	return errs
}

// inParallel runs f(0) … f(n-1), at most limit at a time, and returns
// when all have.
func inParallel(n, limit int, f func(i int)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}

// Kill stops the node as a crash would (tests): no handoff, no fsync.
func (n *Node) Kill() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	reps := make([]*replication.Replica, 0, len(n.replicas))
	for _, r := range n.replicas {
		reps = append(reps, r)
	}
	n.mu.Unlock()
	close(n.stop)
	n.cancel()
	n.rpcLayer.Close()
	if n.quiescer != nil {
		n.quiescer.Close() // first: a crash tells its peers nothing
	}
	n.wg.Wait()
	eachReplica(reps, func(r *replication.Replica) error {
		r.Kill()
		return nil
	})
	if n.ctl.r != nil {
		n.ctl.r.Kill()
	}
	if n.ml != nil {
		n.ml.Shutdown()
	}
	n.rpcLayer.Close()
	n.mux.Close()
}

func nowMillis() int64 { return time.Now().UnixMilli() }
