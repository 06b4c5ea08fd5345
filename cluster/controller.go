package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/replication"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Controller is this node's part in the metadata Raft group: its replica
// of the controller log (every node holds one, the first nodes as
// voters), the appends of commands through the group's leader, the loop
// that applies what is committed to the metadata, the metadata snapshots
// (snapshot.go), and the admin operations (CreateTopic and the others),
// each checked against this node's copy of the metadata and appended as
// a command.
type Controller struct {
	cfg     Config
	r       *replication.Replica // nil until Start opens it
	meta    *Meta
	node    controllerNode
	leaders *leaderTable
	logger  hclog.Logger
	ctx     context.Context // done when the node closes
	wg      *sync.WaitGroup // the node's goroutines
	// appendMu is held shared by every append of a metadata command and
	// alone by a snapshot's (snapshot.go).
	appendMu     sync.RWMutex
	snapshotting atomic.Bool
	// snapshotRetryAt is the applied offset below which a failed
	// snapshot is not tried again.
	snapshotRetryAt atomic.Int64
}

// controllerNode is what the controller asks of the node it runs on.
type controllerNode interface {
	// Brokers are the live brokers, by node id.
	Brokers() []BrokerInfo
	// clusterHas reports whether every broker advertises a feature.
	clusterHas(feature string) bool
	// call asks the node at addr over the cluster channel.
	call(ctx context.Context, addr raft.ServerAddress, req rpcRequest) (rpcResponse, error)
	// kickReconcile tells the node that applied metadata changed.
	kickReconcile()
}

// append commits a command through the controller leader and
// waits until this node has applied it. It returns the command's offset.
func (ctl *Controller) append(ctx context.Context, c command) (int64, error) {
	var off int64
	for attempt := 0; ; attempt++ {
		var err error
		if ctl.r.IsLeader() {
			off, err = ctl.appendCommand(ctx, c)
		} else if id, addr := ctl.r.Leader(); id == "" {
			err = kerr.NotController
		} else {
			off, err = ctl.forward(ctx, addr, c)
		}
		if err == nil {
			break
		}
		var nl *replication.NotLeaderError
		if !errors.As(err, &nl) && !errors.Is(err, kerr.NotController) || attempt >= 50 {
			return -1, err
		}
		select {
		case <-ctx.Done():
			return -1, kerr.RequestTimedOut
		case <-time.After(100 * time.Millisecond): // the controller is electing: retry
		}
	}
	if err := ctl.waitApplied(ctx, off+1); err != nil {
		return -1, kerr.RequestTimedOut
	}
	return off, nil
}

func (ctl *Controller) forward(ctx context.Context, addr raft.ServerAddress, c command) (int64, error) {
	resp, err := ctl.node.call(ctx, addr, rpcRequest{Op: "append", Cmd: c})
	if err != nil {
		return -1, kerr.NotController
	}
	if resp.Err != "" {
		if resp.Code == kerr.NotController.Code {
			return -1, kerr.NotController
		}
		return -1, errors.New(resp.Err)
	}
	return resp.Offset, nil
}

// applyLoop applies the controller's committed commands to the metadata.
func (ctl *Controller) applyLoop() {
	defer ctl.wg.Done()
	for {
		// From the log start when it moved past what was applied (a
		// snapshot is there), and only once something lies past it.
		applied := max(ctl.meta.Applied(), ctl.r.Log().StartOffset())
		hw := ctl.r.WaitHighWatermark(ctl.ctx, applied)
		if ctl.ctx.Err() != nil {
			return
		}
		if hw <= applied {
			continue
		}
		p, err := ctl.r.Read(applied, 1<<20)
		if err != nil {
			ctl.logger.Error("read metadata", "offset", applied, "error", err)
			select {
			case <-ctl.ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		if len(p) == 0 {
			continue
		}
		if err := ctl.meta.apply(p); err != nil {
			ctl.logger.Error("apply metadata", "error", err)
			select { // it will not apply better at once
			case <-ctl.ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		ctl.node.kickReconcile()
		ctl.maybeSnapshot()
	}
}

var topicName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// CreateTopic creates a topic, spreading its replicas over the live
// brokers (rack-aware when racks are set) and its preferred leaders too.
func (ctl *Controller) CreateTopic(ctx context.Context, name string, partitions int32, replicas int16, configs map[string]string, validateOnly bool) error {
	return ctl.CreateTopicFor(ctx, "", name, partitions, replicas, configs, validateOnly)
}

// RetryWindow is how long after a topic's creation the same request,
// retried, is answered as the first was rather than
// TOPIC_ALREADY_EXISTS: the Java admin client's whole call times out
// after a minute (default.api.timeout.ms), franz-go's retries come
// within its request timeout and overhead.
const RetryWindow = time.Minute

// CreateTopicFor is CreateTopic for a requester (a Kafka client's id and
// host; "" for none). A client whose request created the topic but did
// not hear so (its connection or the node it asked went away, or the
// request timed out on its side) sends it again: if the topic was created
// within RetryWindow by the same requester with the same partitions,
// replication factor and configs, the retry succeeds as the first
// request did. Anyone else gets TOPIC_ALREADY_EXISTS, also when two
// requests race and the other's creation commits first.
func (ctl *Controller) CreateTopicFor(ctx context.Context, requester, name string, partitions int32, replicas int16, configs map[string]string, validateOnly bool) error {
	if !topicName.MatchString(name) || name == "." || name == ".." || name == controllerGroup || name == clusterRPCGroup {
		return kerr.InvalidTopicException
	}
	creator := ""
	if requester != "" {
		creator = createFingerprint(requester, partitions, replicas, configs)
	}
	if t, ok := ctl.meta.Topic(name); ok {
		return retriedCreate(t, creator)
	}
	if partitions == -1 {
		partitions = ctl.cfg.DefaultPartitions
	}
	brokers := ctl.node.Brokers()
	if replicas == -1 {
		replicas = ctl.cfg.DefaultReplication
		if replicas <= 0 {
			replicas = int16(min(3, len(brokers)))
		}
	}
	if partitions <= 0 || partitions > 100000 {
		return kerr.InvalidPartitions
	}
	if replicas <= 0 || int(replicas) > len(brokers) {
		return kerr.InvalidReplicationFactor
	}
	if err := validateConfigs(configs); err != nil {
		return err
	}
	assign := assignReplicas(brokers, 0, int(partitions), int(replicas))
	if err := ctl.checkPartitionLimits(assign); err != nil {
		return err
	}
	if validateOnly {
		return nil
	}
	id := newTopicID()
	if _, err := ctl.append(ctx, command{Op: "create_topic", Topic: name, TopicID: id, Assignment: assign, Configs: configs,
		DenseOffsets: ctl.node.clusterHas(featureDenseOffsets), Creator: creator, Time: time.Now().UnixMilli()}); err != nil {
		return err
	}
	// Another request's creation may have committed first, making this
	// command a no-op.
	if t, ok := ctl.meta.Topic(name); ok && hex.EncodeToString(t.ID[:]) != id {
		return retriedCreate(t, creator)
	}
	return nil
}

// retriedCreate answers a creation of t, which exists, by creator: nil
// when it is the request that created t, retried within RetryWindow.
func retriedCreate(t Topic, creator string) error {
	if creator != "" && t.Creator == creator && time.Since(time.UnixMilli(t.Created)).Abs() < RetryWindow {
		return nil
	}
	return kerr.TopicAlreadyExists
}

// createFingerprint is what identifies a creation request: who sent it
// and what it asked for (before defaults apply).
func createFingerprint(requester string, partitions int32, replicas int16, configs map[string]string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%q %d %d", requester, partitions, replicas)
	for _, k := range slices.Sorted(maps.Keys(configs)) {
		fmt.Fprintf(h, " %q=%q", k, configs[k])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// assignReplicas places count partitions of rf replicas starting at
// partition index from: round robin over brokers ordered by rack then id,
// each partition starting one broker further, so replicas and preferred
// leaders are spread (and racks alternate when there are several).
func assignReplicas(brokers []BrokerInfo, from, count, rf int) [][]int32 {
	bs := append([]BrokerInfo(nil), brokers...)
	sort.Slice(bs, func(i, j int) bool { return bs[i].NodeID < bs[j].NodeID })
	// Interleave racks: r0n0, r1n0, r0n1, r1n1...
	byRack := map[string][]BrokerInfo{}
	var racks []string
	for _, b := range bs {
		if _, ok := byRack[b.Rack]; !ok {
			racks = append(racks, b.Rack)
		}
		byRack[b.Rack] = append(byRack[b.Rack], b)
	}
	sort.Strings(racks)
	var order []int32
	for i := 0; len(order) < len(bs); i++ {
		for _, r := range racks {
			if i < len(byRack[r]) {
				order = append(order, byRack[r][i].NodeID)
			}
		}
	}
	out := make([][]int32, count)
	for p := 0; p < count; p++ {
		start := (from + p) % len(order)
		for k := 0; k < rf; k++ {
			out[p] = append(out[p], order[(start+k)%len(order)])
		}
	}
	return out
}

// Defaults of Config's partition limits.
const (
	DefaultMaxPartitionsPerNode = 1000
	DefaultMaxPartitions        = 100000
)

// checkPartitionLimits refuses new partitions, of replicas placed as
// assign, that would take a node past MaxPartitionsPerNode replicas or
// the cluster past MaxPartitions partitions.
func (ctl *Controller) checkPartitionLimits(assign [][]int32) error {
	perNode, total := ctl.meta.partitionCounts()
	if limit := ctl.cfg.MaxPartitions; limit > 0 && total+len(assign) > limit {
		return fmt.Errorf("%w: the cluster would hold %d partitions, over its limit of %d (--max-partitions)", kerr.PolicyViolation, total+len(assign), limit)
	}
	limit := ctl.cfg.MaxPartitionsPerNode
	if limit <= 0 {
		return nil
	}
	for _, replicas := range assign {
		for _, id := range replicas {
			perNode[id]++
		}
	}
	worst := int32(-1)
	for id, n := range perNode {
		if n > limit && (worst < 0 || n > perNode[worst] || n == perNode[worst] && id < worst) {
			worst = id
		}
	}
	if worst >= 0 {
		return fmt.Errorf("%w: node %d would hold %d partition replicas, over its limit of %d (--max-partitions-per-node)", kerr.PolicyViolation, worst, perNode[worst], limit)
	}
	return nil
}

// DeleteTopic deletes a topic; every node then drops its replicas.
func (ctl *Controller) DeleteTopic(ctx context.Context, name string) error {
	t, ok := ctl.meta.Topic(name)
	if !ok {
		return kerr.UnknownTopicOrPartition
	}
	_, err := ctl.append(ctx, command{Op: "delete_topic", Topic: name, TopicID: hex.EncodeToString(t.ID[:])})
	return err
}

// CreatePartitions raises a topic's partition count.
func (ctl *Controller) CreatePartitions(ctx context.Context, name string, count int32, validateOnly bool) error {
	t, ok := ctl.meta.Topic(name)
	if !ok {
		return kerr.UnknownTopicOrPartition
	}
	have := int32(len(t.Partitions))
	if count <= have || count > 100000 {
		return kerr.InvalidPartitions
	}
	rf := len(t.Partitions[0])
	brokers := ctl.node.Brokers()
	if rf > len(brokers) {
		return kerr.InvalidReplicationFactor
	}
	assign := assignReplicas(brokers, int(have), int(count-have), rf)
	if err := ctl.checkPartitionLimits(assign); err != nil {
		return err
	}
	if validateOnly {
		return nil
	}
	_, err := ctl.append(ctx, command{Op: "create_partitions", Topic: name, Assignment: assign, Expect: int(have)})
	return err
}

// AlterTopicConfigs sets and deletes topic configs.
func (ctl *Controller) AlterTopicConfigs(ctx context.Context, name string, set map[string]string, deletes []string, validateOnly bool) error {
	if _, ok := ctl.meta.Topic(name); !ok {
		return kerr.UnknownTopicOrPartition
	}
	if err := validateConfigs(set); err != nil {
		return err
	}
	for _, k := range deletes {
		if _, ok := topicConfigDefs[k]; !ok {
			return kerr.InvalidConfig
		}
	}
	if validateOnly {
		return nil
	}
	_, err := ctl.append(ctx, command{Op: "alter_configs", Topic: name, Configs: set, Deletes: deletes})
	return err
}

// InitProducerID allocates a producer id unique in the cluster: the
// offset of the allocation in the controller log. Given the id and epoch
// a producer already has (KIP-360 epoch bump), it answers the same id
// with the next epoch, once the id is known to have been allocated; the
// partitions then fence the old epoch. An unknown id, or an exhausted
// epoch, gets a fresh id at epoch 0, as Kafka gives an idempotent
// producer.
func (ctl *Controller) InitProducerID(ctx context.Context, producerID int64, epoch int16) (int64, int16, error) {
	if producerID >= 0 && epoch >= 0 && epoch < math.MaxInt16-1 && producerID <= ctl.meta.LastProducerID() {
		return producerID, epoch + 1, nil
	}
	off, err := ctl.append(ctx, command{Op: "alloc_producer_id"})
	if err != nil {
		return -1, -1, err
	}
	return off, 0, nil
}

// bootstrap forms the controller group on its first start: once
// ExpectNodes members are known, the ControllerVoters lowest node ids are
// its voters, and the lowest of them bootstraps it.
func (ctl *Controller) bootstrap() {
	if cfg, err := ctl.r.Configuration(); err != nil || len(cfg.Servers) > 0 {
		return
	}
	if ctl.r.Term() > 0 {
		return
	}
	// A controller already leads somewhere (this node is new, or was
	// wiped): it is added by that leader, never a second bootstrap.
	if _, ok := ctl.leaders.get(controllerGroup); ok {
		return
	}
	brokers := ctl.node.Brokers()
	if len(brokers) < ctl.cfg.ExpectNodes {
		return
	}
	voters := brokers
	if len(voters) > ctl.cfg.ControllerVoters {
		voters = voters[:ctl.cfg.ControllerVoters]
	}
	if voters[0].NodeID != ctl.cfg.NodeID {
		return
	}
	var servers []raft.Server
	for _, b := range voters {
		servers = append(servers, raft.Server{ID: serverID(b.NodeID, b.Incarnation), Address: raft.ServerAddress(b.RaftAddr), Suffrage: raft.Voter})
	}
	if err := ctl.r.Bootstrap(servers); err != nil {
		ctl.logger.Warn("controller bootstrap", "error", err)
		return
	}
	ctl.logger.Info("controller bootstrapped", "voters", len(servers))
}

// lead is what the controller leader does on every reconcile:
// write the cluster id once, and make every other live node a non-voting
// member so that every node holds the metadata.
func (ctl *Controller) lead() {
	if ctl.meta.ClusterID() == "" {
		ctx, cancel := context.WithTimeout(ctl.ctx, 10*time.Second)
		_, err := ctl.append(ctx, command{Op: "init", ClusterID: newTopicID()[:22]})
		cancel()
		if err != nil {
			ctl.logger.Warn("write cluster id", "error", err)
		}
	}
	// The lowest node ids are the voters (a wiped one comes back as a
	// non-voter and is promoted once caught up); the others follow as
	// non-voters so that every node holds the metadata.
	cfg, err := ctl.r.Configuration()
	if err != nil {
		return
	}
	voterNode := map[int32]bool{}
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter {
			voterNode[nodeOf(s.ID)] = true
		}
	}
	var voters, rest []BrokerInfo
	for _, b := range ctl.node.Brokers() {
		if voterNode[b.NodeID] {
			voters = append(voters, b)
		} else {
			rest = append(rest, b)
		}
	}
	for len(voters) < ctl.cfg.ControllerVoters && len(rest) > 0 && len(voterNode) < ctl.cfg.ControllerVoters {
		voters, rest = append(voters, rest[0]), rest[1:]
		voterNode[voters[len(voters)-1].NodeID] = true
	}
	syncMembers(ctl.logger, ctl.r, voters, true)
	syncMembers(ctl.logger, ctl.r, rest, false)
}

// syncMembers makes the Raft configuration of a group this node leads hold
// the current server id of every wanted node, and removes servers of
// wanted nodes whose incarnation changed (a wiped disk). A new replica
// joins as a non-voter; with asVoters it is promoted once its log has
// caught up with the leader's high watermark.
func syncMembers(logger hclog.Logger, r *replication.Replica, wanted []BrokerInfo, asVoters bool) {
	cfg, err := r.Configuration()
	if err != nil {
		return
	}
	have := map[raft.ServerID]raft.Server{}
	byNode := map[int32]raft.Server{}
	for _, s := range cfg.Servers {
		have[s.ID] = s
		byNode[nodeOf(s.ID)] = s
	}
	for _, b := range wanted {
		id := serverID(b.NodeID, b.Incarnation)
		addr := raft.ServerAddress(b.RaftAddr)
		if s, ok := have[id]; ok {
			if asVoters && s.Suffrage == raft.Nonvoter {
				if end, err := r.PeerLogEnd(addr); err == nil && end >= r.HighWatermark() {
					if err := r.AddVoter(id, addr); err == nil {
						logger.Info("replica caught up, now a voter", "id", id)
					}
				}
			}
			continue
		}
		if old, ok := byNode[b.NodeID]; ok && old.ID != id {
			logger.Info("replacing a replica whose disk was wiped", "old", old.ID, "new", id)
			if err := r.RemoveServer(old.ID); err != nil {
				return
			}
		}
		if err := r.AddNonvoter(id, addr); err != nil {
			logger.Debug("add member", "id", id, "error", err)
		}
	}
}

// topicConfigDefs are the topic configs raftlog knows, with their defaults.
var topicConfigDefs = map[string]string{
	"cleanup.policy":         "delete",
	"retention.ms":           strconv.FormatInt((7 * 24 * time.Hour).Milliseconds(), 10),
	"retention.bytes":        "-1",
	"segment.bytes":          strconv.Itoa(1 << 30),
	"segment.ms":             strconv.FormatInt((7 * 24 * time.Hour).Milliseconds(), 10),
	"segment.index.bytes":    strconv.Itoa(10 << 20),
	"index.interval.bytes":   "4096",
	"flush.messages":         "9223372036854775807",
	"flush.ms":               "9223372036854775807",
	"max.message.bytes":      "1048588",
	"message.timestamp.type": "CreateTime",
	"min.insync.replicas":    "2",
	"compression.type":       "producer",
}

// TopicConfigNames lists the known topic configs, sorted.
func TopicConfigNames() []string {
	var out []string
	for k := range topicConfigDefs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TopicConfigDefault is the default of a known config.
func TopicConfigDefault(name string) (string, bool) {
	v, ok := topicConfigDefs[name]
	return v, ok
}

func validateConfigs(c map[string]string) error {
	for k, v := range c {
		if _, ok := topicConfigDefs[k]; !ok {
			return fmt.Errorf("%w: unknown config %q", kerr.InvalidConfig, k)
		}
		switch k {
		case "cleanup.policy":
			if v != "delete" {
				return fmt.Errorf("%w: cleanup.policy %q (only delete is supported)", kerr.InvalidConfig, v)
			}
		case "message.timestamp.type":
			if v != "CreateTime" && v != "LogAppendTime" {
				return fmt.Errorf("%w: %s %q", kerr.InvalidConfig, k, v)
			}
		case "compression.type":
		default:
			if _, err := strconv.ParseInt(v, 10, 64); err != nil {
				return fmt.Errorf("%w: %s=%q is not a number", kerr.InvalidConfig, k, v)
			}
		}
	}
	return nil
}

// CommitOffsets stores a consumer group's committed offsets through the
// controller (replicated, so a coordinator change loses none).
func (ctl *Controller) CommitOffsets(ctx context.Context, group string, offs []GroupOffset) error {
	_, err := ctl.append(ctx, command{Op: "commit_offsets", Group: group, Offsets: offs})
	return err
}

// DeleteOffsets deletes committed offsets (all of the group's when offs is
// empty).
func (ctl *Controller) DeleteOffsets(ctx context.Context, group string, offs []GroupOffset) error {
	_, err := ctl.append(ctx, command{Op: "delete_offsets", Group: group, Offsets: offs})
	return err
}

// ExpireOffsets deletes each of offs that was not committed again since
// its CommitTime: decided as the command is applied, in the log's order,
// so a commit that lands before it is kept.
func (ctl *Controller) ExpireOffsets(ctx context.Context, group string, offs []GroupOffset) error {
	if len(offs) == 0 {
		return nil
	}
	_, err := ctl.append(ctx, command{Op: "delete_offsets", Group: group, Offsets: offs, Expire: true})
	return err
}
