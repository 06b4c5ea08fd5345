package cluster

import (
	"context"
	"errors"
	"maps"

	"github.com/raftlog/raftlog/replication"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Consumer-group membership in the metadata. The group coordinator (the
// controller's leader) keeps its groups in memory; each time a group's
// rebalance completes (the leader's SyncGroup, before the members get
// their assignments) it stores the group's membership here, as Kafka
// stores a group's metadata in __consumer_offsets, and it removes it when
// the group empties. A node that takes the coordinator's role loads the
// stored groups, so their members go on with their generation and
// assignments instead of finding themselves unknown.

// StoredGroup is a group's membership as the coordinator stored it.
type StoredGroup struct {
	// Token names the coordinator's in-memory incarnation of the group
	// that stored it (a group emptied and formed again has a new one), so
	// that removing an emptied group cannot remove a later one.
	Token string `json:"token"`
	// Value is the membership in the coordinator's encoding (Kafka's
	// GroupMetadataValue; the metadata does not read it).
	Value []byte `json:"value"`
}

// StoreGroup stores a group's membership under its token (value nil:
// removes it, only the one that token stored when token is set). Only
// the controller's leader stores groups, and only itself, never
// forwarding: a node that lost the
// role cannot overwrite what its successor loaded, since an entry of an
// earlier term is either applied before the successor loads the groups
// (after its barrier) or never committed.
func (ctl *Controller) StoreGroup(ctx context.Context, group, token string, value []byte) error {
	if !ctl.r.IsLeader() {
		return kerr.NotCoordinator
	}
	c := command{Op: "store_group", Group: group, Token: token, GroupValue: value}
	off, err := ctl.appendCommand(ctx, c)
	var nl *replication.NotLeaderError
	if errors.As(err, &nl) {
		return kerr.NotCoordinator
	}
	if err != nil {
		return err
	}
	if err := ctl.waitApplied(ctx, off+1); err != nil {
		return kerr.RequestTimedOut
	}
	return nil
}

// GroupsLoaded tells the controller's term, the epoch of a coordinator
// (each term has a leader of its own), and whether this node leads the
// controller and has applied every command of the terms before, so that
// the stored groups hold what the earlier coordinators stored.
func (ctl *Controller) GroupsLoaded() (uint64, bool) {
	return ctl.r.Raft().CurrentTerm(), ctl.r.LeaderReady() && ctl.meta.Applied() >= ctl.r.HighWatermark()
}

// applyStoreGroup applies a store_group command (under m.mu).
func (m *Meta) applyStoreGroup(c command) {
	if c.GroupValue != nil {
		m.groups[c.Group] = StoredGroup{Token: c.Token, Value: c.GroupValue}
		return
	}
	if old, ok := m.groups[c.Group]; ok && (c.Token == "" || old.Token == c.Token) {
		delete(m.groups, c.Group)
	}
}

// StoredGroups returns the stored groups, by name.
func (m *Meta) StoredGroups() map[string]StoredGroup {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return maps.Clone(m.groups)
}
