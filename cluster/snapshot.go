package cluster

import (
	"context"
	"encoding/hex"
	"fmt"
	"sort"
	"time"

	"github.com/raftlog/raftlog/replication"
)

// Snapshots of the metadata.
//
// Every committed consumer-group offset is a controller command, so the
// controller log grows with every commit. Once DefaultControllerSnapshot
// commands (Config.ControllerSnapshotCommands) have been applied since the
// last snapshot, the controller's leader appends a `snapshot` command
// holding the whole state, and once every node can have applied it moves
// the log start up to it (Kafka's DeleteRecords, through Raft, so every
// replica's log follows). A node then replays from the snapshot on start,
// and a replica restored from its leader's log (a Raft snapshot install)
// resumes there too: Meta.apply replaces its state with the snapshot when
// the log resumes past what it had applied.
//
// The snapshot holds the state as of the last command applied before it
// (After). The leader appends it while no other command can be appended
// (appendMu), so in its log nothing comes between; should a command come
// between anyway (a leader change in the middle), every node sees it the
// same way, ignores the snapshot (applySnapshot), and the log start stays.

// DefaultControllerSnapshotCommands is the default of
// Config.ControllerSnapshotCommands.
const DefaultControllerSnapshotCommands = 10000

// metaState is the whole metadata, as a snapshot command carries it.
type metaState struct {
	ClusterID      string                   `json:"cluster_id"`
	Topics         []stateTopic             `json:"topics,omitempty"`
	Offsets        map[string][]GroupOffset `json:"offsets,omitempty"`
	LastProducerID int64                    `json:"last_producer_id"`
}

type stateTopic struct {
	Name        string                 `json:"name"`
	ID          string                 `json:"id"`
	Partitions  [][]int32              `json:"partitions"`
	Configs     map[string]string      `json:"configs,omitempty"`
	Reassigning map[int32]Reassignment `json:"reassigning,omitempty"`
}

// capture returns the state and the offset of the last command in it.
func (m *Meta) capture() (metaState, int64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := metaState{ClusterID: m.clusterID, LastProducerID: m.lastProducerID}
	names := make([]string, 0, len(m.topics))
	for name := range m.topics {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := copyTopic(m.topics[name])
		s.Topics = append(s.Topics, stateTopic{Name: c.Name, ID: hex.EncodeToString(c.ID[:]), Partitions: c.Partitions, Configs: c.Configs, Reassigning: c.Reassigning})
	}
	for g, offs := range m.offsets {
		if s.Offsets == nil {
			s.Offsets = map[string][]GroupOffset{}
		}
		s.Offsets[g] = make([]GroupOffset, 0, len(offs)) // a group with none stays listed
		for _, o := range offs {
			s.Offsets[g] = append(s.Offsets[g], o)
		}
	}
	return s, m.lastCmd
}

// applySnapshot applies a snapshot command (under m.mu). After a gap it
// is the state; else it is the state here only when no command came
// between its capture and it, and is ignored otherwise.
func (m *Meta) applySnapshot(c command, offset int64, gap bool) {
	if c.State == nil || (!gap && c.After != m.lastCmd) {
		return
	}
	st := c.State
	if st.ClusterID != "" {
		m.clusterID = st.ClusterID
	}
	m.topics = map[string]*Topic{}
	for _, t := range st.Topics {
		nt := &Topic{Name: t.Name, Partitions: t.Partitions, Configs: t.Configs, Reassigning: t.Reassigning}
		if nt.Configs == nil {
			nt.Configs = map[string]string{}
		}
		if id, err := hex.DecodeString(t.ID); err == nil && len(id) == 16 {
			copy(nt.ID[:], id)
		}
		m.topics[t.Name] = nt
	}
	m.offsets = map[string]map[string]GroupOffset{}
	for g, offs := range st.Offsets {
		m.offsets[g] = map[string]GroupOffset{}
		for _, o := range offs {
			m.offsets[g][offsetKey(o.Topic, o.Partition)] = o
		}
	}
	m.lastProducerID = st.LastProducerID
	m.since = 0
	m.snapAt = offset
}

// sinceSnapshot is how many commands were applied after the last
// snapshot (or since the log start, before the first).
func (m *Meta) sinceSnapshot() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.since
}

// snapshotAt reports whether the snapshot at offset was applied as the state.
func (m *Meta) snapshotAt(offset int64) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.snapAt == offset
}

// appendCommand appends a command on the controller's leader; snapshots
// exclude every other append (see above).
func (n *Node) appendCommand(ctx context.Context, c command) (int64, error) {
	n.appendMu.RLock()
	defer n.appendMu.RUnlock()
	return n.ctrl.Append(ctx, encodeCommand(c), replication.AcksAll)
}

// maybeSnapshotController starts a snapshot of the metadata when this node
// leads the controller and enough commands were applied since the last.
func (n *Node) maybeSnapshotController() {
	every := n.cfg.ControllerSnapshotCommands
	if every == 0 {
		every = DefaultControllerSnapshotCommands
	}
	since := n.meta.sinceSnapshot()
	if every < 0 || since < every || int64(since) < n.snapshotRetry.Load() || !n.ctrl.IsLeader() {
		return
	}
	// Not while this node is still applying (a new leader replaying its
	// log): the snapshot would hold every append for that long.
	if n.meta.Applied() < n.ctrl.HighWatermark() || !n.snapshotting.CompareAndSwap(false, true) {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.snapshotting.Store(false)
		ctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
		defer cancel()
		if err := n.snapshotController(ctx); err != nil {
			// Not again before as many commands more.
			n.snapshotRetry.Store(int64(n.meta.sinceSnapshot() + every))
			n.logger.Warn("controller snapshot", "error", err)
			return
		}
		n.snapshotRetry.Store(0)
	}()
}

// snapshotController appends a snapshot of the metadata and moves the
// controller log's start up to it.
func (n *Node) snapshotController(ctx context.Context) error {
	var size int
	off, err := func() (int64, error) {
		n.appendMu.Lock()
		defer n.appendMu.Unlock()
		// Every command appended so far is applied here (the appends
		// under way have returned), so the state is the log's. This node
		// was caught up a moment ago: a wait longer than a few seconds
		// means it no longer leads, and appends wait meanwhile.
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := n.waitApplied(wctx, n.ctrl.HighWatermark())
		cancel()
		if err != nil {
			return -1, err
		}
		st, after := n.meta.capture()
		b := encodeCommand(command{Op: "snapshot", State: &st, After: after})
		size = len(b)
		if max := n.ctrl.Log().Config().MaxBatchBytes; size > max {
			return -1, fmt.Errorf("the metadata takes %d bytes, over the controller log's batch limit of %d", size, max)
		}
		return n.ctrl.Append(ctx, b, replication.AcksAll)
	}()
	if err != nil {
		return err
	}
	if err := n.waitApplied(ctx, off+1); err != nil {
		return err
	}
	if !n.meta.snapshotAt(off) {
		return fmt.Errorf("the snapshot at %d was not applied as the state (a command came between)", off)
	}
	start, err := n.ctrl.DeleteRecords(ctx, off)
	if err != nil {
		return fmt.Errorf("move the controller log start to the snapshot at %d: %w", off, err)
	}
	n.logger.Info("controller snapshot", "offset", off, "bytes", size, "log_start", start)
	return nil
}

// waitApplied waits until this node has applied the metadata below offset.
func (n *Node) waitApplied(ctx context.Context, offset int64) error {
	for {
		ch := n.meta.changes()
		if n.meta.Applied() >= offset {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
