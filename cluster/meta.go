package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"sync"

	"github.com/raftlog/raftlog/log"
)

// The cluster metadata is the state of the controller: a Raft group (the
// replication package's, over its own small log) whose committed records
// are commands, applied in log order on every node that hosts a controller
// replica. Each command is one record of one batch; its value is JSON.
// The state is rebuilt on start by replaying the log from its start. So
// that the log does not grow with every committed offset for ever, the
// controller's leader now and then appends a `snapshot` command holding
// the whole state, and once it is applied moves the log start up to it
// (snapshot.go).
type command struct {
	Op string `json:"op"`
	// init
	ClusterID string `json:"cluster_id,omitempty"`
	// create_topic, delete_topic, create_partitions, alter_configs
	Topic      string            `json:"topic,omitempty"`
	TopicID    string            `json:"topic_id,omitempty"`
	Assignment [][]int32         `json:"assignment,omitempty"` // replicas per partition (new ones for create_partitions)
	Configs    map[string]string `json:"configs,omitempty"`
	// DenseOffsets: create_topic's partitions are in the dense offset
	// layout (Topic.DenseOffsets).
	DenseOffsets bool `json:"dense_offsets,omitempty"`
	// Creator and Time: create_topic's request, fingerprinted
	// (Controller.CreateTopicFor), and when it was proposed (Unix ms).
	Creator string   `json:"creator,omitempty"`
	Time    int64    `json:"time,omitempty"`
	Deletes []string `json:"deletes,omitempty"`
	// Expect makes create_partitions apply only to a topic that has this
	// many partitions (a retried command is a no-op).
	Expect int `json:"expect,omitempty"`
	// commit_offsets, delete_offsets
	Group   string        `json:"group,omitempty"`
	Offsets []GroupOffset `json:"offsets,omitempty"`
	// delete_offsets with no Offsets deletes all of the group's; with
	// Expire, each of Offsets only while its CommitTime is still the
	// offset's (not committed again since).
	Expire bool `json:"expire,omitempty"`
	// alloc_producer_id: the id is the offset of the command.
	// reassign, reassign_done (reassign.go): Topic, TopicID, Partition
	// and the target Replicas; Cancel moves back to where the
	// reassignment began.
	Partition int32   `json:"partition,omitempty"`
	Replicas  []int32 `json:"replicas,omitempty"`
	Cancel    bool    `json:"cancel,omitempty"`
	// snapshot: the whole state, as of the command at offset After (the
	// last one applied before it; see Meta.applySnapshot).
	State *metaState `json:"state,omitempty"`
	After int64      `json:"after,omitempty"`
	// snapshot, packed (a state too large for one command; snapshot.go):
	// part Part of Parts of the zstd-compressed JSON of the state, in
	// Data. After is part 0's.
	Part  int    `json:"part,omitempty"`
	Parts int    `json:"parts,omitempty"`
	Data  []byte `json:"data,omitempty"`
	// register_broker: a node's addresses as it last registered them
	// (registry.go).
	Broker *Registration `json:"broker,omitempty"`
	// store_group (groups.go): Group's membership stored under Token, or
	// nil to remove it (only the one Token stored, when set).
	GroupValue []byte `json:"group_value,omitempty"`
	Token      string `json:"token,omitempty"`
}

// Topic is a topic in the metadata.
type Topic struct {
	Name       string
	ID         [16]byte
	Partitions [][]int32 // replica node ids per partition; the first is the preferred leader
	Configs    map[string]string
	// DenseOffsets: the topic's partitions are in the dense offset
	// layout, where only records take offsets (replication.Config's
	// DenseOffsets); false for a topic created before every node had
	// it, whose partitions keep Raft's entries at offsets of their own.
	DenseOffsets bool `json:",omitempty"`
	// Reassigning holds the partitions whose replicas are moving, by
	// partition; their Partitions entry is then every replica old and
	// new (see reassign.go).
	Reassigning map[int32]Reassignment
	// Creator fingerprints the request that created the topic and
	// Created is when (Unix ms), so that the same request retried is
	// answered as the first was (Controller.CreateTopicFor).
	Creator string `json:",omitempty"`
	Created int64  `json:",omitempty"`
}

// GroupOffset is a committed consumer-group offset.
type GroupOffset struct {
	Topic       string `json:"t"`
	Partition   int32  `json:"p"`
	Offset      int64  `json:"o"`
	LeaderEpoch int32  `json:"e"`
	Metadata    string `json:"m,omitempty"`
	// CommitTime is when it was committed: the timestamp (ms) of the
	// command's record, set as the command is applied (0: committed by a
	// version from before it).
	CommitTime int64 `json:"c,omitempty"`
}

// Meta is the applied metadata.
type Meta struct {
	mu        sync.RWMutex
	clusterID string
	topics    map[string]*Topic
	// offsets are the consumer groups' committed offsets, by group, then
	// "topic/partition".
	offsets map[string]map[string]GroupOffset
	applied int64           // offset after the last applied batch
	lastCmd int64           // offset of the last applied command (-1: none)
	snapAt  int64           // offset of the last snapshot applied as the state (-1: none)
	pack    *packedSnapshot // a packed snapshot whose parts are being applied (nil: none)
	// lastProducerID is the highest producer id allocated (-1: none).
	lastProducerID int64
	// brokers is the broker registry, by node id (registry.go).
	brokers map[int32]Registration
	// groups are the consumer groups' stored membership (groups.go).
	groups  map[string]StoredGroup
	changed chan struct{}
}

func newMeta() *Meta {
	return &Meta{topics: map[string]*Topic{}, offsets: map[string]map[string]GroupOffset{}, brokers: map[int32]Registration{}, groups: map[string]StoredGroup{}, changed: make(chan struct{}), lastProducerID: -1, lastCmd: -1, snapAt: -1}
}

// LastProducerID is the highest producer id allocated so far (-1: none).
func (m *Meta) LastProducerID() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.lastProducerID
}

// ClusterID is the id chosen when the cluster was first started.
func (m *Meta) ClusterID() string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.clusterID
}

// Topic returns a copy of a topic.
func (m *Meta) Topic(name string) (Topic, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	t, ok := m.topics[name]
	if !ok {
		return Topic{}, false
	}
	return copyTopic(t), true
}

// topicRef is a topic's id and partition count, without the copy Topic
// makes (the lookup of every produced and fetched partition).
func (m *Meta) topicRef(name string) (id [16]byte, partitions int, ok bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	t, ok := m.topics[name]
	if !ok {
		return id, 0, false
	}
	return t.ID, len(t.Partitions), true
}

// Topics returns copies of every topic, by name.
func (m *Meta) Topics() []Topic {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]Topic, 0, len(m.topics))
	for _, t := range m.topics {
		out = append(out, copyTopic(t))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func copyTopic(t *Topic) Topic {
	c := Topic{Name: t.Name, ID: t.ID, Configs: map[string]string{}, DenseOffsets: t.DenseOffsets, Creator: t.Creator, Created: t.Created}
	for _, p := range t.Partitions {
		c.Partitions = append(c.Partitions, append([]int32(nil), p...))
	}
	for k, v := range t.Configs {
		c.Configs[k] = v
	}
	for p, r := range t.Reassigning {
		if c.Reassigning == nil {
			c.Reassigning = map[int32]Reassignment{}
		}
		c.Reassigning[p] = Reassignment{Target: append([]int32(nil), r.Target...), Origin: append([]int32(nil), r.Origin...)}
	}
	return c
}

// Applied is the offset after the last applied command.
func (m *Meta) Applied() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.applied
}

// changes returns a channel closed at the next applied command.
func (m *Meta) changes() <-chan struct{} {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.changed
}

// apply applies the committed batches of p (whole batches, in order).
// The first may lie past what was applied (a gap) only when the log's
// start moved past it: then it must be a snapshot, which replaces the
// state; a packed one's parts must then follow it with no other command
// between.
func (m *Meta) apply(p []byte) error {
	var err error
	log.Batches(p, func(b log.Batch) bool {
		applied := m.Applied()
		if b.NextOffset() <= applied {
			return true
		}
		gap := b.BaseOffset() > applied
		if gap && b.IsControl() {
			err = fmt.Errorf("cluster: metadata log resumes at %d after %d with no snapshot", b.BaseOffset(), applied)
			return false
		}
		if !b.IsControl() {
			recs, offs, ok := log.DecodeRecords(b)
			if !ok {
				err = fmt.Errorf("cluster: metadata batch at %d does not decode", b.BaseOffset())
				return false
			}
			for i, r := range recs {
				var c command
				if e := json.Unmarshal(r.Value, &c); e != nil {
					err = fmt.Errorf("cluster: metadata command at %d: %w", offs[i], e)
					return false
				}
				if c.Op == "commit_offsets" {
					for j := range c.Offsets {
						c.Offsets[j].CommitTime = r.Timestamp
					}
				}
				if gap && (i > 0 || !c.startsSnapshot()) {
					err = fmt.Errorf("cluster: metadata log resumes at %d after %d with %q, not a snapshot", offs[i], applied, c.Op)
					return false
				}
				if e := m.applyOne(c, offs[i], gap); e != nil {
					err = e
					return false
				}
			}
		}
		m.mu.Lock()
		m.applied = b.NextOffset()
		close(m.changed)
		m.changed = make(chan struct{})
		m.mu.Unlock()
		return true
	})
	return err
}

// applyOne applies the command at offset; gap says that commands before
// it were never applied here (only a snapshot may follow one). Its error
// is a log that cannot be applied: a snapshot the state is to be restored
// from that is cut short, does not decode or is not a state capture
// writes; then nothing changed.
func (m *Meta) applyOne(c command, offset int64, gap bool) (err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if gap {
		// The log start moved past a snapshot being restored from: the
		// one it resumes at replaces it.
		m.pack = nil
	}
	if c.Op == "snapshot" && c.Parts > 0 {
		if err := m.applyPart(c, offset, gap); err != nil {
			return err // nothing but a restore dropped for the gap: applied again, it fails again
		}
		m.lastCmd = offset
		return nil
	}
	if p := m.pack; p != nil {
		if p.restore {
			return fmt.Errorf("cluster: metadata log resumes at %d with a snapshot whose part %d of %d is followed by %q", p.first, p.next, p.parts, c.Op)
		}
		m.pack = nil // a command between its parts: the snapshot is ignored
	}
	defer func() {
		if err == nil {
			m.lastCmd = offset
		}
	}()
	switch c.Op {
	case "init":
		if m.clusterID == "" {
			m.clusterID = c.ClusterID
		}
	case "create_topic":
		if _, ok := m.topics[c.Topic]; ok {
			return nil
		}
		t := &Topic{Name: c.Topic, Partitions: c.Assignment, Configs: map[string]string{}, DenseOffsets: c.DenseOffsets,
			Creator: c.Creator, Created: c.Time}
		if id, err := hex.DecodeString(c.TopicID); err == nil && len(id) == 16 {
			copy(t.ID[:], id)
		}
		for k, v := range c.Configs {
			t.Configs[k] = v
		}
		m.topics[c.Topic] = t
	case "delete_topic":
		// By id when given: a retried delete must not hit a topic created
		// again since.
		if t, ok := m.topics[c.Topic]; ok && (c.TopicID == "" || c.TopicID == hex.EncodeToString(t.ID[:])) {
			delete(m.topics, c.Topic)
			// Its committed offsets go with it, as in Kafka: a topic
			// created again under the name starts without them.
			for _, offs := range m.offsets {
				maps.DeleteFunc(offs, func(_ string, o GroupOffset) bool { return o.Topic == c.Topic })
			}
			maps.DeleteFunc(m.offsets, func(_ string, offs map[string]GroupOffset) bool { return len(offs) == 0 })
		}
	case "create_partitions":
		if t, ok := m.topics[c.Topic]; ok && (c.Expect == 0 || len(t.Partitions) == c.Expect) {
			t.Partitions = append(t.Partitions, c.Assignment...)
		}
	case "alter_configs":
		if t, ok := m.topics[c.Topic]; ok {
			for k, v := range c.Configs {
				t.Configs[k] = v
			}
			for _, k := range c.Deletes {
				delete(t.Configs, k)
			}
		}
	case "commit_offsets":
		g := m.offsets[c.Group]
		if g == nil {
			g = map[string]GroupOffset{}
			m.offsets[c.Group] = g
		}
		for _, o := range c.Offsets {
			// A topic deleted since the commit was checked: its offsets
			// went with it, and do not come back.
			if _, ok := m.topics[o.Topic]; ok {
				g[offsetKey(o.Topic, o.Partition)] = o
			}
		}
		if len(g) == 0 {
			delete(m.offsets, c.Group)
		}
	case "delete_offsets":
		if len(c.Offsets) == 0 {
			delete(m.offsets, c.Group)
			return nil
		}
		for _, o := range c.Offsets {
			k := offsetKey(o.Topic, o.Partition)
			if cur, ok := m.offsets[c.Group][k]; ok && (!c.Expire || cur.CommitTime == o.CommitTime) {
				delete(m.offsets[c.Group], k)
			}
		}
		if len(m.offsets[c.Group]) == 0 {
			delete(m.offsets, c.Group)
		}
	case "reassign":
		m.applyReassign(c)
	case "reassign_done":
		m.applyReassignDone(c)
	case "register_broker":
		if c.Broker != nil && c.Broker.NodeID >= 0 {
			m.brokers[c.Broker.NodeID] = *c.Broker
		}
	case "alloc_producer_id":
		// The id is the command's offset.
		m.lastProducerID = max(m.lastProducerID, offset)
	case "store_group":
		m.applyStoreGroup(c)
	case "snapshot":
		return m.applySnapshot(c, offset, gap)
	}
	return nil
}

// offsetKey is a committed offset's key within its group.
func offsetKey(topic string, partition int32) string { return fmt.Sprintf("%s/%d", topic, partition) }

func newTopicID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// encodeCommand builds the batch of one command.
func encodeCommand(c command) []byte {
	v, _ := json.Marshal(c)
	return log.BuildBatch(nil, log.BatchOptions{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]log.Record{{Value: v, Timestamp: nowMillis()}})
}

// partitionCounts counts the partition replicas assigned to each node
// (a partition being reassigned counts on its old and new nodes) and the
// partitions of the cluster.
func (m *Meta) partitionCounts() (perNode map[int32]int, total int) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	perNode = map[int32]int{}
	for _, t := range m.topics {
		total += len(t.Partitions)
		for _, replicas := range t.Partitions {
			for _, id := range replicas {
				perNode[id]++
			}
		}
	}
	return perNode, total
}

// GroupOffsets returns a group's committed offsets, of the given topics
// (all when topics is nil), sorted.
func (m *Meta) GroupOffsets(group string, topics []string) []GroupOffset {
	m.mu.RLock()
	defer m.mu.RUnlock()
	want := map[string]bool{}
	for _, t := range topics {
		want[t] = true
	}
	var out []GroupOffset
	for _, o := range m.offsets[group] {
		if topics == nil || want[o.Topic] {
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// OffsetGroups lists the groups with committed offsets.
func (m *Meta) OffsetGroups() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []string
	for g := range m.offsets {
		out = append(out, g)
	}
	sort.Strings(out)
	return out
}
