package rpc

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlog/raftlog/log"
	"github.com/twmb/franz-go/pkg/kerr"
)

// memBroker is a single-node Broker over real partition logs: the high
// watermark is the log end, every partition is led by this node.
type memBroker struct {
	dir  string
	node int32
	host string
	port atomic.Int32

	mu        sync.Mutex
	topics    map[string]*memTopic
	seq       int // for unique partition directories
	maxTopics int // 0: no limit

	pids atomic.Int64

	// Groups: the coordinator (this node unless moved) and committed
	// offsets.
	coord   atomic.Int32
	offMu   sync.Mutex
	offsets map[string]map[TopicPartition]CommittedOffset
	commits atomic.Int64 // CommitOffsets calls
	// stored are the groups' stored membership (under offMu); storeErr,
	// when set, fails StoreGroup; loading makes GroupsLoaded false.
	stored map[string]StoredGroup
	// coordEpoch counts the coordinator's moves (GroupsLoaded).
	coordEpoch atomic.Uint64
	storeErr   atomic.Pointer[error]
	loading    atomic.Bool
	// clock, when set, tells the commit times (else time.Now).
	clock clock

	// leaders names another node the leader of some partitions (by
	// "topic/partition"), and registered the brokers LookupBroker knows
	// besides the live one (both under mu).
	leaders    map[string]int32
	registered map[int32]BrokerInfo
}

type memTopic struct {
	name    string
	id      [16]byte
	parts   []*memPart
	configs map[string]string // overrides
}

type memPart struct {
	l *log.Log

	mu      sync.Mutex // serialises appends and high watermark changes
	hw      int64
	changed chan struct{} // closed and replaced when hw moves
	epoch   atomic.Int32
}

var (
	_ Broker      = (*memBroker)(nil)
	_ GroupBroker = (*memBroker)(nil)
)

// topicDefaults are the configs every topic has.
var topicDefaults = map[string]string{
	"cleanup.policy":    "delete",
	"retention.ms":      "604800000",
	"retention.bytes":   "-1",
	"segment.bytes":     "262144",
	"max.message.bytes": "1048588",
}

func newMemBroker(t testing.TB) *memBroker {
	b := &memBroker{dir: t.TempDir(), node: 1, host: "127.0.0.1", topics: make(map[string]*memTopic),
		offsets: make(map[string]map[TopicPartition]CommittedOffset), stored: make(map[string]StoredGroup)}
	b.coord.Store(b.node)
	t.Cleanup(b.close)
	return b
}

func (b *memBroker) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range b.topics {
		for _, p := range t.parts {
			p.l.Close()
		}
	}
	b.topics = map[string]*memTopic{}
}

func (b *memBroker) setPort(p int32) { b.port.Store(p) }

func (b *memBroker) NodeID() int32       { return b.node }
func (b *memBroker) ClusterID() string   { return "mem-cluster" }
func (b *memBroker) ControllerID() int32 { return b.node }

func (b *memBroker) Brokers() []BrokerInfo {
	return []BrokerInfo{{NodeID: b.node, Host: b.host, Port: b.port.Load()}}
}

func (b *memBroker) LookupBroker(id int32) (BrokerInfo, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bi, ok := b.registered[id]
	return bi, ok
}

func (b *memBroker) Topics(names []string) []TopicInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	if names == nil {
		for n := range b.topics {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	out := make([]TopicInfo, 0, len(names))
	for _, n := range names {
		t, ok := b.topics[n]
		if !ok {
			out = append(out, TopicInfo{Name: n, Err: fmt.Errorf("topic %q: %w", n, kerr.UnknownTopicOrPartition)})
			continue
		}
		ti := TopicInfo{Name: n, ID: t.id}
		for i, p := range t.parts {
			pi := PartitionInfo{
				Partition: int32(i), Leader: b.node, LeaderEpoch: p.epoch.Load(),
				Replicas: []int32{b.node}, ISR: []int32{b.node},
			}
			if l, ok := b.leaders[fmt.Sprintf("%s/%d", n, i)]; ok {
				pi.Leader, pi.Replicas, pi.ISR = l, []int32{l, b.node}, []int32{l, b.node}
			}
			ti.Partitions = append(ti.Partitions, pi)
		}
		out = append(out, ti)
	}
	return out
}

func validTopicName(n string) bool {
	if n == "" || len(n) > 249 || n == "." || n == ".." {
		return false
	}
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

const memMaxPartitions = 64

func (b *memBroker) CreateTopic(_ context.Context, _, name string, partitions int32, replication int16, configs map[string]string, validateOnly bool) error {
	if !validTopicName(name) {
		return fmt.Errorf("%w: %q", kerr.InvalidTopicException, name)
	}
	if partitions == -1 {
		partitions = 1
	}
	if partitions <= 0 || partitions > memMaxPartitions {
		return fmt.Errorf("%w: %d partitions", kerr.InvalidPartitions, partitions)
	}
	if replication != -1 && replication != 1 {
		return fmt.Errorf("%w: replication factor %d on one broker", kerr.InvalidReplicationFactor, replication)
	}
	for k := range configs {
		if _, ok := topicDefaults[k]; !ok {
			return fmt.Errorf("%w: unknown config %q", kerr.InvalidConfig, k)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.topics[name]; ok {
		return fmt.Errorf("%w: %q", kerr.TopicAlreadyExists, name)
	}
	if b.maxTopics > 0 && len(b.topics) >= b.maxTopics {
		return fmt.Errorf("%w: at most %d topics", kerr.PolicyViolation, b.maxTopics)
	}
	if validateOnly {
		return nil
	}
	t := &memTopic{name: name, configs: make(map[string]string)}
	rand.Read(t.id[:])
	for k, v := range configs {
		t.configs[k] = v
	}
	for range partitions {
		p, err := b.openPartLocked()
		if err != nil {
			for _, p := range t.parts {
				p.l.Close()
			}
			return err
		}
		t.parts = append(t.parts, p)
	}
	b.topics[name] = t
	return nil
}

func (b *memBroker) openPartLocked() (*memPart, error) {
	b.seq++
	l, err := log.Open(filepath.Join(b.dir, strconv.Itoa(b.seq)), log.WithConfig(log.Config{SegmentBytes: 256 << 10, SegmentIndexBytes: 1 << 16}))
	if err != nil {
		return nil, err
	}
	p := &memPart{l: l, hw: l.EndOffset(), changed: make(chan struct{})}
	p.epoch.Store(1)
	return p, nil
}

func (b *memBroker) DeleteTopic(_ context.Context, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.topics[name]
	if !ok {
		return fmt.Errorf("%w: %q", kerr.UnknownTopicOrPartition, name)
	}
	delete(b.topics, name)
	for _, p := range t.parts {
		p.l.Close()
	}
	return nil
}

func (b *memBroker) CreatePartitions(_ context.Context, name string, count int32, validateOnly bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.topics[name]
	if !ok {
		return fmt.Errorf("%w: %q", kerr.UnknownTopicOrPartition, name)
	}
	if int(count) <= len(t.parts) || count > memMaxPartitions {
		return fmt.Errorf("%w: %d partitions, topic has %d", kerr.InvalidPartitions, count, len(t.parts))
	}
	if validateOnly {
		return nil
	}
	for int(count) > len(t.parts) {
		p, err := b.openPartLocked()
		if err != nil {
			return err
		}
		t.parts = append(t.parts, p)
	}
	return nil
}

func (b *memBroker) TopicConfigs(name string) ([]ConfigEntry, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.topics[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", kerr.UnknownTopicOrPartition, name)
	}
	var out []ConfigEntry
	for k, def := range topicDefaults {
		v, set := t.configs[k]
		if !set {
			v = def
		}
		out = append(out, ConfigEntry{Name: k, Value: &v, IsDefault: !set})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (b *memBroker) AlterTopicConfigs(_ context.Context, name string, changes []ConfigChange, validateOnly bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.topics[name]
	if !ok {
		return fmt.Errorf("%w: %q", kerr.UnknownTopicOrPartition, name)
	}
	for _, c := range changes {
		if _, ok := topicDefaults[c.Name]; !ok {
			return fmt.Errorf("%w: unknown config %q", kerr.InvalidConfig, c.Name)
		}
		if c.Op == 0 && c.Value == nil || c.Op > 1 {
			return fmt.Errorf("%w: op %d on %q", kerr.InvalidConfig, c.Op, c.Name)
		}
	}
	if validateOnly {
		return nil
	}
	for _, c := range changes {
		if c.Op == 0 {
			t.configs[c.Name] = *c.Value
		} else {
			delete(t.configs, c.Name)
		}
	}
	return nil
}

func (b *memBroker) Partition(topic string, partition int32) (Partition, error) {
	p, err := b.part(topic, partition)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (b *memBroker) part(topic string, partition int32) (*memPart, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.topics[topic]
	if !ok || partition < 0 || int(partition) >= len(t.parts) {
		return nil, fmt.Errorf("%s/%d: %w", topic, partition, kerr.UnknownTopicOrPartition)
	}
	return t.parts[partition], nil
}

func (b *memBroker) InitProducerID(_ context.Context, transactionalID *string, pid int64, epoch int16) (int64, int16, error) {
	if transactionalID != nil {
		return -1, -1, fmt.Errorf("%w: no transactions", kerr.TransactionalIDAuthorizationFailed)
	}
	if pid > 1000 && pid <= b.pids.Load()+1000 && epoch >= 0 && epoch < math.MaxInt16-1 {
		return pid, epoch + 1, nil
	}
	return b.pids.Add(1) + 1000, 0, nil
}

// bumpEpoch starts a new leader epoch on a partition (a new term).
func (b *memBroker) bumpEpoch(t testing.TB, topic string, partition int32) int32 {
	p, err := b.part(topic, partition)
	if err != nil {
		t.Fatal(err)
	}
	return p.epoch.Add(1)
}

func (p *memPart) Append(ctx context.Context, batch []byte, acks int) (int64, error) {
	if err := ctx.Err(); err != nil {
		return -1, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	info, err := p.l.AppendValidated([][]byte{batch}, p.epoch.Load())
	if err != nil {
		return -1, logErr(err)
	}
	p.hw = p.l.EndOffset()
	close(p.changed)
	p.changed = make(chan struct{})
	return info.BaseOffset, nil
}

func (p *memPart) HighWatermark() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hw
}

func (p *memPart) Read(offset int64, maxBytes int) ([]byte, error) {
	b, err := p.l.Read(offset, maxBytes, p.HighWatermark())
	return b, logErr(err)
}

// logErr gives the log's errors their Kafka codes, as a Broker must
// before its errors reach the handlers.
func logErr(err error) error {
	for _, m := range []struct {
		sentinel error
		code     *kerr.Error
	}{
		{log.ErrOffsetOutOfRange, kerr.OffsetOutOfRange},
		{log.ErrBatchTooLarge, kerr.MessageTooLarge},
		{log.ErrCorruptBatch, kerr.CorruptMessage},
	} {
		if errors.Is(err, m.sentinel) {
			return fmt.Errorf("%w: %w", m.code, err)
		}
	}
	return err
}

func (p *memPart) WaitHighWatermark(ctx context.Context, past int64) int64 {
	for {
		p.mu.Lock()
		hw, ch := p.hw, p.changed
		p.mu.Unlock()
		if hw > past {
			return hw
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return hw
		}
	}
}

func (p *memPart) LogStartOffset() int64 { return p.l.StartOffset() }
func (p *memPart) LeaderEpoch() int32    { return p.epoch.Load() }

func (p *memPart) OffsetForTimestamp(ts int64) (int64, int64, bool, error) {
	return p.l.OffsetForTimestamp(ts, p.HighWatermark())
}

func (p *memPart) MaxTimestamp() (int64, int64, bool, error) {
	hw := p.HighWatermark()
	maxTs, found := int64(-1), false
	err := p.l.WalkBatches(p.l.StartOffset(), func(hdr log.Batch) bool {
		if hdr.BaseOffset() >= hw {
			return false
		}
		if !hdr.IsControl() && (!found || hdr.MaxTimestamp() > maxTs) {
			maxTs, found = hdr.MaxTimestamp(), true
		}
		return true
	})
	if err != nil || !found {
		return -1, -1, false, err
	}
	return p.l.OffsetForTimestamp(maxTs, hw)
}

func (p *memPart) EndOffsetForEpoch(epoch int32) (int64, int32, error) {
	hw := p.HighWatermark()
	if epoch >= p.epoch.Load() {
		return hw, p.epoch.Load(), nil
	}
	found := int32(-1)
	end := int64(-1)
	err := p.l.WalkBatches(p.l.StartOffset(), func(hdr log.Batch) bool {
		if hdr.BaseOffset() >= hw {
			return false
		}
		e := hdr.LeaderEpoch()
		if e <= epoch {
			found = e
			return true
		}
		// The first batch of a later epoch ends the epoch found.
		if found >= 0 {
			end = hdr.BaseOffset()
		}
		return false
	})
	if err != nil {
		return -1, -1, err
	}
	if found < 0 {
		return -1, -1, nil
	}
	if end < 0 {
		end = hw
	}
	return end, found, nil
}

func (p *memPart) DeleteRecords(_ context.Context, offset int64) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if offset == -1 {
		offset = p.hw
	}
	if offset > p.hw {
		return -1, fmt.Errorf("%w: %d past the high watermark %d", kerr.OffsetOutOfRange, offset, p.hw)
	}
	if offset <= p.l.StartOffset() {
		return p.l.StartOffset(), nil
	}
	if err := p.l.AdvanceStart(offset); err != nil {
		if errors.Is(err, log.ErrClosed) {
			return -1, kerr.NotLeaderForPartition
		}
		return -1, err
	}
	return p.l.StartOffset(), nil
}

// AwaitLeaders: every partition of a memBroker is led by its one node.
func (b *memBroker) AwaitLeaders(context.Context, string) {}

func (b *memBroker) Coordinator() int32 { return b.coord.Load() }

// moveCoordinator makes another node (or none, -1) the group coordinator.
func (b *memBroker) moveCoordinator(node int32) {
	b.coord.Store(node)
	b.coordEpoch.Add(1)
}

func (b *memBroker) CommitOffsets(ctx context.Context, group string, offsets []CommittedOffset) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.commits.Add(1)
	b.offMu.Lock()
	defer b.offMu.Unlock()
	g := b.offsets[group]
	if g == nil {
		g = make(map[TopicPartition]CommittedOffset)
		b.offsets[group] = g
	}
	now := time.Now()
	if b.clock != nil {
		now = b.clock.Now()
	}
	for _, o := range offsets {
		o.CommitTime = now
		g[TopicPartition{o.Topic, o.Partition}] = o
	}
	return nil
}

func (b *memBroker) FetchOffsets(group string, topics []string) ([]CommittedOffset, error) {
	b.offMu.Lock()
	defer b.offMu.Unlock()
	var out []CommittedOffset
	for tp, o := range b.offsets[group] {
		if topics == nil || slices.Contains(topics, tp.Topic) {
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out, nil
}

func (b *memBroker) DeleteOffsets(ctx context.Context, group string, parts []TopicPartition) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.offMu.Lock()
	defer b.offMu.Unlock()
	if parts == nil {
		delete(b.offsets, group)
		return nil
	}
	g := b.offsets[group]
	for _, tp := range parts {
		delete(g, tp)
	}
	if len(g) == 0 {
		delete(b.offsets, group)
	}
	return nil
}

func (b *memBroker) ExpireOffsets(ctx context.Context, group string, offsets []CommittedOffset) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.offMu.Lock()
	defer b.offMu.Unlock()
	g := b.offsets[group]
	for _, o := range offsets {
		tp := TopicPartition{o.Topic, o.Partition}
		if cur, ok := g[tp]; ok && cur.CommitTime.Equal(o.CommitTime) {
			delete(g, tp)
		}
	}
	if len(g) == 0 {
		delete(b.offsets, group)
	}
	return nil
}

func (b *memBroker) StoreGroup(ctx context.Context, group, token string, value []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.coord.Load() != b.node {
		return kerr.NotCoordinator
	}
	if e := b.storeErr.Load(); e != nil {
		return *e
	}
	b.offMu.Lock()
	defer b.offMu.Unlock()
	switch {
	case value != nil:
		b.stored[group] = StoredGroup{Token: token, Value: value}
	case token == "" || b.stored[group].Token == token:
		delete(b.stored, group)
	}
	return nil
}

func (b *memBroker) StoredGroups() map[string]StoredGroup {
	b.offMu.Lock()
	defer b.offMu.Unlock()
	return maps.Clone(b.stored)
}

func (b *memBroker) GroupsLoaded() (uint64, bool) { return b.coordEpoch.Load(), !b.loading.Load() }

func (b *memBroker) OffsetGroups() []string {
	b.offMu.Lock()
	defer b.offMu.Unlock()
	out := make([]string, 0, len(b.offsets))
	for g := range b.offsets {
		out = append(out, g)
	}
	sort.Strings(out)
	return out
}

// committed returns a group's committed offset of topic/partition (-1:
// none).
func (b *memBroker) committed(group, topic string, partition int32) int64 {
	b.offMu.Lock()
	defer b.offMu.Unlock()
	if o, ok := b.offsets[group][TopicPartition{topic, partition}]; ok {
		return o.Offset
	}
	return -1
}
