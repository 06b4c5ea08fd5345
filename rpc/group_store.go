package rpc

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Stored groups: a coordinator taking over resumes the groups of the one
// before, as Kafka's does from __consumer_offsets. When a rebalance
// completes (the leader's SyncGroup) the group's membership is stored
// through GroupBroker.StoreGroup, as Kafka's GroupMetadataValue, before
// any member gets its assignment: a member never holds a generation that
// a coordinator taking over would not know. When a group empties its
// membership is removed (under the token of the incarnation that stored
// it, so that a removal landing late cannot remove a group formed again).
//
// A node that becomes the coordinator answers COORDINATOR_LOAD_IN_PROGRESS
// until GroupBroker.GroupsLoaded (every store of the coordinators before it
// is visible), then loads each stored group as Stable with its members,
// their assignments and the metadata of the selected protocol, and starts
// their session timers: members that heartbeat in time go on at their
// generation, the others expire and the group rebalances. As in Kafka, a
// member that rejoins with protocols other than the stored one (Kafka
// stores only the selected protocol's metadata) makes the group rebalance.
//
// Not stored: a static member replaced without a rebalance (its new id is
// unknown to a coordinator taking over, which fences it; it rejoins with
// its instance id), and the state of a rebalance under way (the members
// rejoin the loaded generation).

// storeTimeout bounds one store of a group.
const storeTimeout = 15 * time.Second

// load loads the stored groups when this node takes the coordinator's
// role: first in each coordinator epoch (the groups of an earlier one are
// dropped: another node may have run them meanwhile).
func (c *coordinator) load() *kerr.Error {
	if c.store == nil {
		return nil
	}
	epoch, complete := c.store.GroupsLoaded()
	if c.loadedIn(epoch) {
		return nil
	}
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	if c.loadedIn(epoch) {
		return nil
	}
	c.reset()
	if !complete {
		return kerr.CoordinatorLoadInProgress
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for name, sg := range c.store.StoredGroups() { // c.groups is empty: reset above
		g, err := c.loadGroup(name, sg)
		if err != nil {
			c.logger.Error("a stored consumer group does not decode; its members will rejoin", "group", name, "error", err)
			continue
		}
		if g != nil {
			c.groups[name] = g
			n++
		}
	}
	if n > 0 {
		c.logger.Info("loaded the stored consumer groups", "groups", n, "epoch", epoch)
	}
	c.loaded, c.epoch = true, epoch
	return nil
}

func (c *coordinator) loadedIn(epoch uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loaded && c.epoch == epoch
}

// loadGroup makes a group of its stored membership (nil when it has no
// members), its members' sessions started.
func (c *coordinator) loadGroup(name string, sg StoredGroup) (*group, error) {
	var v kmsg.GroupMetadataValue
	if err := v.ReadFrom(sg.Value); err != nil {
		return nil, err
	}
	if len(v.Members) == 0 || v.Protocol == nil {
		return nil, nil
	}
	g := &group{
		c:            c,
		name:         name,
		token:        sg.Token,
		stored:       true,
		state:        groupStable,
		generation:   v.Generation,
		protocolType: v.ProtocolType,
		protocol:     *v.Protocol,
		members:      make(map[string]*member, len(v.Members)),
		pending:      make(map[string]*pendingMember),
		static:       make(map[string]string),
	}
	if v.Leader != nil {
		g.leader = *v.Leader
	}
	for _, sm := range v.Members {
		g.joinSeq++
		m := &member{
			id:               sm.MemberID,
			instanceID:       sm.InstanceID,
			clientID:         sm.ClientID,
			clientHost:       sm.ClientHost,
			sessionTimeout:   time.Duration(sm.SessionTimeoutMillis) * time.Millisecond,
			rebalanceTimeout: time.Duration(sm.RebalanceTimeoutMillis) * time.Millisecond,
			protocolType:     v.ProtocolType,
			protocols:        []groupProtocol{{name: g.protocol, metadata: sm.Subscription}},
			assignment:       sm.Assignment,
			seq:              g.joinSeq,
		}
		if m.rebalanceTimeout <= 0 {
			m.rebalanceTimeout = m.sessionTimeout
		}
		g.members[m.id] = m
		if m.instanceID != nil {
			g.static[*m.instanceID] = m.id
		}
		g.heartbeatMember(m)
	}
	return g, nil
}

// storedValue is the group's membership with the leader's assignments
// (under g.mu, in CompletingRebalance).
func (g *group) storedValue(assignments map[string][]byte) []byte {
	v := kmsg.NewGroupMetadataValue()
	v.Version = 3
	v.ProtocolType = g.protocolType
	v.Generation = g.generation
	protocol, leader := g.protocol, g.leader
	v.Protocol, v.Leader = &protocol, &leader
	v.CurrentStateTimestamp = g.c.clock.Now().UnixMilli()
	for _, m := range g.sortedMembers(nil) {
		sm := kmsg.NewGroupMetadataValueMember()
		sm.MemberID, sm.InstanceID = m.id, m.instanceID
		sm.ClientID, sm.ClientHost = m.clientID, m.clientHost
		sm.SessionTimeoutMillis = int32(m.sessionTimeout.Milliseconds())
		sm.RebalanceTimeoutMillis = int32(m.rebalanceTimeout.Milliseconds())
		sm.Subscription = m.metadataOf(g.protocol)
		sm.Assignment = g.assignmentOf(m, assignments)
		v.Members = append(v.Members, sm)
	}
	return v.AppendTo(nil)
}

// storeAssignment stores the group with the leader's assignments, then
// hands them out, unless the generation moved on meanwhile (the members
// waiting were answered then). A store that fails answers the members
// with its error and rebalances the group, as Kafka's coordinator does.
func (g *group) storeAssignment(assignments map[string][]byte) {
	gen, token, value := g.generation, g.token, g.storedValue(assignments)
	g.storingGen = gen
	go func() {
		ctx, cancel := context.WithTimeout(g.c.ctx, storeTimeout)
		err := g.c.store.StoreGroup(ctx, g.name, token, value)
		cancel()
		g.mu.Lock()
		defer g.unlock()
		if g.dead || g.generation != gen || g.state != groupCompletingRebalance {
			return
		}
		g.storingGen = 0
		if err != nil {
			e := storeError(err)
			g.c.logger.Warn("could not store a consumer group's assignment; rebalancing", "group", g.name, "generation", gen, "error", err)
			for _, m := range g.members {
				g.answerSync(m, syncResult{err: e})
			}
			g.prepareRebalance()
			return
		}
		g.stored = true
		g.assign(assignments)
	}()
}

// storeError is the code a SyncGroup gets when its group could not be
// stored: NOT_COORDINATOR when the role moved, else
// COORDINATOR_NOT_AVAILABLE (the clients find the coordinator again).
func storeError(err error) *kerr.Error {
	if errors.Is(err, kerr.NotCoordinator) {
		return kerr.NotCoordinator
	}
	return kerr.CoordinatorNotAvailable
}

// removeStored removes the stored membership of a group incarnation
// dropped from memory (it emptied, or was deleted).
func (c *coordinator) removeStored(g *group) {
	if c.store == nil || !g.stored {
		return
	}
	name, token := g.name, g.token
	go func() {
		ctx, cancel := context.WithTimeout(c.ctx, storeTimeout)
		defer cancel()
		if err := c.store.StoreGroup(ctx, name, token, nil); err != nil {
			c.logger.Debug("remove an emptied consumer group's stored membership", "group", name, "error", err)
		}
	}()
}
