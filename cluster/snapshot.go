package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/raftlog/raftlog/replication"
)

// Snapshots of the metadata.
//
// Every committed consumer-group offset is a controller command, so the
// controller log grows with every commit. Once
// Config.ControllerSnapshotCommands offsets of it (about as many commands)
// have been applied since the last snapshot, the controller's leader
// appends a `snapshot` command holding the whole state, and once every
// node can have applied it moves
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

// metaState is the whole metadata, as a snapshot command carries it (in
// Meta's own shapes: JSON writes maps in key order).
type metaState struct {
	ClusterID      string                            `json:"cluster_id"`
	Topics         map[string]Topic                  `json:"topics,omitempty"`
	Offsets        map[string]map[string]GroupOffset `json:"offsets,omitempty"`
	LastProducerID int64                             `json:"last_producer_id"`
}

// capture returns the state and the offset of the last command in it.
func (m *Meta) capture() (metaState, int64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := metaState{ClusterID: m.clusterID, LastProducerID: m.lastProducerID,
		Topics: map[string]Topic{}, Offsets: map[string]map[string]GroupOffset{}}
	for name, t := range m.topics {
		s.Topics[name] = copyTopic(t)
	}
	for g, offs := range m.offsets {
		s.Offsets[g] = maps.Clone(offs)
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
	for name, t := range st.Topics {
		if t.Configs == nil {
			t.Configs = map[string]string{}
		}
		m.topics[name] = &t
	}
	m.offsets = st.Offsets // decoded for this command alone
	if m.offsets == nil {
		m.offsets = map[string]map[string]GroupOffset{}
	}
	m.lastProducerID = st.LastProducerID
	m.snapAt = offset
}

// sinceSnapshot is how many offsets of the controller log were applied
// after the last snapshot (or from the log start, before the first): its
// commands, and the few control batches of Raft's between them.
func (m *Meta) sinceSnapshot() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.applied - (m.snapAt + 1)
}

// snapshotAt reports whether the snapshot at offset was applied as the state.
func (m *Meta) snapshotAt(offset int64) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.snapAt == offset
}

// appendCommand appends a command on the controller's leader; snapshots
// exclude every other append (see above), and only snapshotController
// appends one.
func (n *Node) appendCommand(ctx context.Context, c command) (int64, error) {
	if c.Op == "snapshot" {
		return -1, errors.New("cluster: a snapshot is appended only by the controller's leader itself")
	}
	n.appendMu.RLock()
	defer n.appendMu.RUnlock()
	return n.ctrl.Append(ctx, encodeCommand(c), replication.AcksAll)
}

// maybeSnapshotController starts a snapshot of the metadata when this node
// leads the controller and enough commands were applied since the last.
func (n *Node) maybeSnapshotController() {
	every := int64(n.cfg.ControllerSnapshotCommands)
	if every == 0 {
		every = DefaultControllerSnapshotCommands
	}
	if every < 0 || n.meta.sinceSnapshot() < every || n.meta.Applied() < n.snapshotRetryAt.Load() || !n.ctrl.IsLeader() {
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
			// Not again before as many offsets more.
			n.snapshotRetryAt.Store(n.meta.Applied() + every)
			n.logger.Warn("controller snapshot", "error", err)
		}
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
