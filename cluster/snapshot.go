package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/klauspost/compress/zstd"
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
	// Brokers is the broker registry (absent from the snapshots of
	// versions before it: then empty, and every node registers again).
	Brokers map[int32]Registration `json:"brokers,omitempty"`
	// Groups are the stored consumer groups (groups.go; absent from the
	// snapshots of versions before it).
	Groups map[string]StoredGroup `json:"groups,omitempty"`
}

// capture returns the state and the offset of the last command in it.
func (m *Meta) capture() (metaState, int64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := metaState{ClusterID: m.clusterID, LastProducerID: m.lastProducerID,
		Topics: map[string]Topic{}, Offsets: map[string]map[string]GroupOffset{}, Brokers: maps.Clone(m.brokers),
		Groups: maps.Clone(m.groups)}
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
func (m *Meta) applySnapshot(c command, offset int64, gap bool) error {
	if c.State == nil || (!gap && c.After != m.lastCmd) {
		return nil
	}
	if err := c.State.check(); err != nil {
		return fmt.Errorf("cluster: metadata snapshot at %d: %w", offset, err)
	}
	m.install(c.State)
	m.snapAt = offset
	return nil
}

// check refuses a state whose map keys are not what their entries name
// (a topic under another name, an offset under another partition's key,
// a registration under another node id): Meta reads entries by key and
// lists them by value, so such a state would not be the state a capture
// of it gives back. capture never writes one.
func (st *metaState) check() error {
	for name, t := range st.Topics {
		if t.Name != name {
			return fmt.Errorf("topic %q holds topic %q", name, t.Name)
		}
	}
	for g, offs := range st.Offsets {
		for k, o := range offs {
			if k != offsetKey(o.Topic, o.Partition) {
				return fmt.Errorf("group %q: offset key %q holds %s/%d", g, k, o.Topic, o.Partition)
			}
		}
	}
	for id, r := range st.Brokers {
		if r.NodeID != id {
			return fmt.Errorf("broker %d holds node %d", id, r.NodeID)
		}
	}
	return nil
}

// install makes st the state (under m.mu; st is the caller's no more).
func (m *Meta) install(st *metaState) {
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
	m.brokers = st.Brokers
	if m.brokers == nil {
		m.brokers = map[int32]Registration{}
	}
	m.groups = st.Groups
	if m.groups == nil {
		m.groups = map[string]StoredGroup{}
	}
}

// Packed snapshots.
//
// A state whose snapshot command would not fit in one batch of the
// controller log (some 10,000 committed offsets make 1 MiB of JSON) is
// packed: its JSON, compressed with zstd, is cut into parts that each
// fit, appended one after another as commands of their own, as the leader
// appends a plain snapshot (nothing between them). Part 0 carries After
// and is where the log start moves. Applied in order, the parts are the
// state once the last one is applied with no command between them; as
// with a plain snapshot, a node that has applied every command before
// them has that state already and only notes where the snapshot is, while
// a node whose log resumes at part 0 (after a gap) collects the parts and
// installs the state from the last. There nothing but the next part may
// follow (apply refuses the log otherwise).

// packedSnapshot is a packed snapshot whose parts are being applied.
type packedSnapshot struct {
	first   int64 // offset of part 0
	last    int64 // offset of the last part applied
	next    int   // the part expected next
	parts   int
	restore bool   // it follows a gap: the state is to be installed from it
	data    []byte // the parts' data so far (restore only)
}

// startsSnapshot reports whether c may start the log after a gap: a plain
// snapshot, or part 0 of a packed one.
func (c command) startsSnapshot() bool {
	return c.Op == "snapshot" && (c.State != nil || (c.Parts > 0 && c.Part == 0 && len(c.Data) > 0))
}

// applyPart applies a part of a packed snapshot (under m.mu; m.lastCmd
// is the command before it). On an error it changes nothing.
func (m *Meta) applyPart(c command, offset int64, gap bool) error {
	p := m.pack
	if p != nil && p.restore && (c.Part != p.next || c.Parts != p.parts) {
		return fmt.Errorf("cluster: metadata log resumes at %d with a snapshot whose part %d of %d is followed by part %d of %d", p.first, p.next, p.parts, c.Part, c.Parts)
	}
	switch {
	case c.Part == 0:
		if !gap && c.After != m.lastCmd {
			m.pack = nil // a command came between its capture and it: ignored
			return nil
		}
		p = &packedSnapshot{first: offset, parts: c.Parts, restore: gap}
	case p == nil || c.Part != p.next || c.Parts != p.parts || p.last != m.lastCmd:
		m.pack = nil // not the part expected next: the snapshot is ignored
		return nil
	}
	// p is changed only once nothing can fail.
	var data []byte
	if p.restore {
		data = append(p.data[:len(p.data):len(p.data)], c.Data...)
	}
	if p.next+1 < p.parts {
		p.next, p.last, p.data = p.next+1, offset, data
		m.pack = p
		return nil
	}
	if p.restore {
		st, err := unpackState(data)
		if err != nil {
			return fmt.Errorf("cluster: metadata snapshot at %d: %w", p.first, err)
		}
		m.install(st)
	}
	m.pack = nil
	m.snapAt = p.first
	return nil
}

// snapshotBatches are the batches of a snapshot of st, as of the command
// at offset after: one plain snapshot command when it fits in maxBatch
// bytes, else the parts of a packed one.
func snapshotBatches(st metaState, after int64, maxBatch int) ([][]byte, error) {
	plain, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	if len(plain) < maxBatch { // else it cannot fit: not marshalled twice
		if b := encodeCommand(command{Op: "snapshot", State: &st, After: after}); len(b) <= maxBatch {
			return [][]byte{b}, nil
		}
	}
	if len(plain) > maxSnapshotBytes {
		// No node could restore from it (unpackState's bound).
		return nil, fmt.Errorf("the metadata takes %d bytes of JSON, over the %d a snapshot may hold", len(plain), maxSnapshotBytes)
	}
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		return nil, err
	}
	packed := enc.EncodeAll(plain, nil)
	enc.Close()
	// A part's data is base64 in the command's JSON (4 bytes for 3); the
	// rest of the command and the batch around it take under 1 KiB.
	per := (maxBatch - 1024) / 4 * 3
	if per <= 0 {
		return nil, fmt.Errorf("a batch limit of %d bytes leaves no room for a snapshot part", maxBatch)
	}
	n := (len(packed) + per - 1) / per
	out := make([][]byte, 0, n)
	for i := range n {
		b := encodeCommand(command{Op: "snapshot", After: after, Part: i, Parts: n, Data: packed[i*per : min((i+1)*per, len(packed))]})
		if len(b) > maxBatch {
			return nil, fmt.Errorf("snapshot part %d takes %d bytes, over the batch limit of %d", i, len(b), maxBatch)
		}
		out = append(out, b)
	}
	return out, nil
}

// maxSnapshotBytes bounds the decompressed JSON of a packed snapshot.
const maxSnapshotBytes = 1 << 30

// unpackState decodes the data of a packed snapshot's parts.
func unpackState(data []byte) (*metaState, error) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(maxSnapshotBytes), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	plain, err := dec.DecodeAll(data, nil)
	if err != nil {
		return nil, fmt.Errorf("decompress: %w", err)
	}
	var st metaState
	if err := json.Unmarshal(plain, &st); err != nil {
		return nil, err
	}
	if err := st.check(); err != nil {
		return nil, err
	}
	return &st, nil
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
func (ctl *Controller) appendCommand(ctx context.Context, c command) (int64, error) {
	if c.Op == "snapshot" {
		return -1, errors.New("cluster: a snapshot is appended only by the controller's leader itself")
	}
	ctl.appendMu.RLock()
	defer ctl.appendMu.RUnlock()
	return ctl.r.Append(ctx, encodeCommand(c), replication.AcksAll)
}

// maybeSnapshot starts a snapshot of the metadata when this node
// leads the controller and enough commands were applied since the last.
func (ctl *Controller) maybeSnapshot() {
	every := int64(ctl.cfg.ControllerSnapshotCommands)
	if every == 0 {
		every = DefaultControllerSnapshotCommands
	}
	if every < 0 || ctl.meta.sinceSnapshot() < every || ctl.meta.Applied() < ctl.snapshotRetryAt.Load() || !ctl.r.IsLeader() {
		return
	}
	// Not while this node is still applying (a new leader replaying its
	// log): the snapshot would hold every append for that long.
	if ctl.meta.Applied() < ctl.r.HighWatermark() || !ctl.snapshotting.CompareAndSwap(false, true) {
		return
	}
	ctl.wg.Add(1)
	go func() {
		defer ctl.wg.Done()
		defer ctl.snapshotting.Store(false)
		ctx, cancel := context.WithTimeout(ctl.ctx, 30*time.Second)
		defer cancel()
		if err := ctl.snapshot(ctx); err != nil {
			// Not again before as many offsets more.
			ctl.snapshotRetryAt.Store(ctl.meta.Applied() + every)
			ctl.logger.Warn("controller snapshot", "error", err)
		}
	}()
}

// snapshot appends a snapshot of the metadata and moves the
// controller log's start up to it.
func (ctl *Controller) snapshot(ctx context.Context) error {
	var size, parts int
	var last int64
	off, err := func() (int64, error) {
		ctl.appendMu.Lock()
		defer ctl.appendMu.Unlock()
		// Every command appended so far is applied here (the appends
		// under way have returned), so the state is the log's. This node
		// was caught up a moment ago: a wait longer than a few seconds
		// means it no longer leads, and appends wait meanwhile.
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := ctl.waitApplied(wctx, ctl.r.HighWatermark())
		cancel()
		if err != nil {
			return -1, err
		}
		st, after := ctl.meta.capture()
		batches, err := snapshotBatches(st, after, ctl.r.Log().Config().MaxBatchBytes)
		if err != nil {
			return -1, err
		}
		parts = len(batches)
		first := int64(-1)
		for _, b := range batches {
			size += len(b)
			if last, err = ctl.r.Append(ctx, b, replication.AcksAll); err != nil {
				return -1, err
			}
			if first < 0 {
				first = last
			}
		}
		return first, nil
	}()
	if err != nil {
		return err
	}
	if err := ctl.waitApplied(ctx, last+1); err != nil {
		return err
	}
	if !ctl.meta.snapshotAt(off) {
		return fmt.Errorf("the snapshot at %d was not applied as the state (a command came between)", off)
	}
	start, err := ctl.r.DeleteRecords(ctx, off)
	if err != nil {
		return fmt.Errorf("move the controller log start to the snapshot at %d: %w", off, err)
	}
	ctl.logger.Info("controller snapshot", "offset", off, "bytes", size, "parts", parts, "log_start", start)
	return nil
}

// waitApplied waits until this node has applied the metadata below offset.
func (ctl *Controller) waitApplied(ctx context.Context, offset int64) error {
	for {
		ch := ctl.meta.changes()
		if ctl.meta.Applied() >= offset {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
