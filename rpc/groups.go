package rpc

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The group coordinator: the classic consumer-group protocol (JoinGroup,
// SyncGroup, Heartbeat, LeaveGroup) as Kafka's GroupCoordinator runs it,
// one state machine per group, in the memory of the node that coordinates
// groups (GroupBroker.Coordinator). Committed offsets are not here: they
// are the broker's (GroupBroker.CommitOffsets...), replicated, so they
// survive a coordinator change; so does the membership each completed
// rebalance stores (group_store.go).
//
// A group's states are Kafka's:
//
//	Empty               no members (pending ones, see below, may exist)
//	PreparingRebalance  waiting for every member to (re)join, at most the
//	                    largest rebalance timeout of the members
//	CompletingRebalance joined; waiting for the leader's SyncGroup
//	Stable              the leader's assignment was handed out
//	Dead                dropped from memory (deleted, emptied, or the
//	                    coordinator moved)
//
// Every group has its own mutex; no I/O happens under it. JoinGroup and
// SyncGroup answers that must wait are delivered on a channel the handler
// waits on. Timers (one per member for its session, one per group for the
// rebalance and one for the pending syncs) are time.AfterFunc timers,
// stopped when no longer needed, each checked against a token so that a
// timer that fired while being replaced does nothing.
//
// A group with neither members nor pending members is dropped from memory
// at once: an Empty group is only its committed offsets (which the broker
// keeps), so a group that only commits (generation -1) never takes a slot.
// Its generation then starts again at 1; member ids are random, so a
// member of the earlier incarnation is still told UNKNOWN_MEMBER_ID.
//
// Not done: Kafka's initial rebalance delay (group.initial.rebalance.delay.ms:
// a new group completes its first join as soon as its first member joined,
// the others then trigger a rebalance each), the 5-minute join timeout of
// new members (the rebalance timeout bounds their wait instead), shrinking
// a group over its maximum size, and the KIP-848 consumer protocol.

// GroupConfig configures the group coordinator. Zero fields take the
// defaults.
type GroupConfig struct {
	// MinSessionTimeout and MaxSessionTimeout bound the session timeout a
	// member may ask for, as Kafka's group.min.session.timeout.ms and
	// group.max.session.timeout.ms (defaults 6s and 30m); JoinGroup
	// answers INVALID_SESSION_TIMEOUT outside.
	MinSessionTimeout, MaxSessionTimeout time.Duration
	// MaxGroups bounds the groups held in memory, those with members
	// (default 10000). A JoinGroup creating one more is answered
	// COORDINATOR_NOT_AVAILABLE.
	MaxGroups int
	// MaxMembers bounds the members of one group, pending ones included,
	// as Kafka's group.max.size (default 1000): GROUP_MAX_SIZE_REACHED.
	MaxMembers int
	// OffsetsRetention: a group's committed offset is deleted once the
	// group has had no members, and the offset has not been committed,
	// for this long (Kafka's offsets.retention.minutes; default 7 days;
	// negative: kept for ever). See offset_retention.go.
	OffsetsRetention time.Duration
	// OffsetsRetentionCheckInterval is how often the coordinator looks for
	// expired offsets (offsets.retention.check.interval.ms; default 10
	// minutes).
	OffsetsRetentionCheckInterval time.Duration
}

// Defaults of GroupConfig.
const (
	DefaultGroupMinSessionTimeout = 6 * time.Second
	DefaultGroupMaxSessionTimeout = 30 * time.Minute
	DefaultMaxGroups              = 10000
	DefaultMaxGroupMembers        = 1000
	DefaultOffsetsRetention       = 7 * 24 * time.Hour
	DefaultOffsetsRetentionCheck  = 10 * time.Minute
)

// Bounds of what one member may make the coordinator hold.
const (
	// maxMemberProtocols bounds the protocols of one JoinGroup.
	maxMemberProtocols = 64
	// maxMemberMetadata bounds the summed protocol metadata of one
	// JoinGroup.
	maxMemberMetadata = 1 << 20
)

func (cfg GroupConfig) withDefaults() GroupConfig {
	if cfg.MinSessionTimeout <= 0 {
		cfg.MinSessionTimeout = DefaultGroupMinSessionTimeout
	}
	if cfg.MaxSessionTimeout <= 0 {
		cfg.MaxSessionTimeout = DefaultGroupMaxSessionTimeout
	}
	if cfg.MaxSessionTimeout < cfg.MinSessionTimeout {
		cfg.MaxSessionTimeout = cfg.MinSessionTimeout
	}
	if cfg.MaxGroups <= 0 {
		cfg.MaxGroups = DefaultMaxGroups
	}
	if cfg.MaxMembers <= 0 {
		cfg.MaxMembers = DefaultMaxGroupMembers
	}
	if cfg.OffsetsRetention == 0 {
		cfg.OffsetsRetention = DefaultOffsetsRetention
	}
	if cfg.OffsetsRetentionCheckInterval <= 0 {
		cfg.OffsetsRetentionCheckInterval = DefaultOffsetsRetentionCheck
	}
	return cfg
}

// WithGroupConfig configures the group coordinator (served when the
// Broker implements GroupBroker).
func WithGroupConfig(cfg GroupConfig) Option {
	return func(s *Server) { s.groupCfg = cfg }
}

type groupState int8

const (
	groupEmpty groupState = iota
	groupPreparingRebalance
	groupCompletingRebalance
	groupStable
	groupDead
)

var groupStateNames = [...]string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"}

func (s groupState) String() string { return groupStateNames[s] }

// clock tells the time and makes timers; tests replace it.
type clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) timer
}

type timer interface{ Stop() bool }

type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) timer { return time.AfterFunc(d, f) }

func stopTimer(t timer) {
	if t != nil {
		t.Stop()
	}
}

type groupProtocol struct {
	name     string
	metadata []byte
}

// joinParams is a JoinGroup request.
type joinParams struct {
	group            string
	memberID         string
	instanceID       *string
	clientID         string
	clientHost       string
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	protocolType     string
	protocols        []groupProtocol
	// requireKnownID: v4+ dynamic members get MEMBER_ID_REQUIRED first.
	requireKnownID bool
	// skipAssignment: v9+ (KIP-814).
	skipAssignment bool
}

type joinMember struct {
	memberID   string
	instanceID *string
	metadata   []byte
}

// joinResult is a JoinGroup answer. protocolType and protocol are nil on
// errors.
type joinResult struct {
	err            *kerr.Error
	memberID       string
	generation     int32
	protocolType   *string
	protocol       *string
	leader         string
	skipAssignment bool
	members        []joinMember // the leader's only
}

// syncParams is a SyncGroup request.
type syncParams struct {
	group        string
	memberID     string
	instanceID   *string
	generation   int32
	protocolType *string
	protocol     *string
	assignments  map[string][]byte // the leader's only
}

type syncResult struct {
	err          *kerr.Error
	protocolType *string
	protocol     *string
	assignment   []byte
}

// leaveMember names a member leaving: by member id, or (v3+) by instance
// id.
type leaveMember struct {
	memberID   string
	instanceID *string
}

// coordinator holds the groups this node coordinates.
type coordinator struct {
	cfg    GroupConfig
	clock  clock
	logger hclog.Logger
	// ctx ends when the server closes; store keeps the groups' membership
	// (nil: in memory only; group_store.go).
	ctx   context.Context
	store groupStore
	// newID makes a member id from a prefix (the client or instance id).
	newID func(prefix string) string

	mu     sync.Mutex
	groups map[string]*group
	// emptied is when each group dropped here was left with no members,
	// and resetAt when every group was last dropped (the coordinator
	// moved): offset retention counts from them (offset_retention.go).
	emptied map[string]time.Time
	resetAt time.Time
	// loaded: the stored groups were loaded in the coordinator epoch
	// epoch (group_store.go); loadMu serializes the loads.
	loaded bool
	epoch  uint64
	loadMu sync.Mutex
}

// groupStore is the part of GroupBroker that keeps the groups'
// membership.
type groupStore interface {
	StoreGroup(ctx context.Context, group, token string, value []byte) error
	StoredGroups() map[string]StoredGroup
	GroupsLoaded() (epoch uint64, loaded bool)
}

func newCoordinator(cfg GroupConfig, clk clock, logger hclog.Logger) *coordinator {
	return &coordinator{
		cfg:     cfg.withDefaults(),
		clock:   clk,
		logger:  logger,
		ctx:     context.Background(),
		newID:   randomMemberID,
		groups:  make(map[string]*group),
		emptied: make(map[string]time.Time),
	}
}

// randomMemberID is Kafka's member id: the prefix, a dash, a UUID.
func randomMemberID(prefix string) string {
	var u [16]byte
	rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%s-%x-%x-%x-%x-%x", prefix, u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

type group struct {
	c    *coordinator
	name string
	// token names this incarnation of the group in the store; stored is
	// set once its membership was stored, and storingGen is the
	// generation whose store is under way (0: none; group_store.go).
	token      string
	stored     bool
	storingGen int32

	mu sync.Mutex
	// dead: the group left c.groups (or is about to); whoever finds it
	// looks the name up again.
	dead         bool
	state        groupState
	generation   int32
	protocolType string
	protocol     string // the selected protocol; "" before the first
	leader       string
	members      map[string]*member
	// pending are the ids handed out with MEMBER_ID_REQUIRED, not yet
	// joined; each expires after the session timeout of its request.
	pending map[string]*pendingMember
	static  map[string]string // instance id → member id
	joinSeq uint64            // join order, for the leader and lists
	// pendingSync are the members that got the join answer of this
	// generation and did not sync yet; removed when the sync timer fires.
	pendingSync map[string]struct{}

	tokens         uint64 // timer tokens
	rebalanceTimer timer
	rebalanceToken uint64
	syncTimer      timer
	syncToken      uint64
}

type member struct {
	id               string
	instanceID       *string
	clientID         string
	clientHost       string
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	protocolType     string
	protocols        []groupProtocol
	assignment       []byte
	seq              uint64
	// joinWait and syncWait are set while a JoinGroup or SyncGroup waits
	// for its answer (buffered: sending never blocks; then set to nil).
	joinWait chan joinResult
	syncWait chan syncResult
	timer    timer // session
	token    uint64
}

type pendingMember struct {
	id    string
	timer timer
	token uint64
}

// lockGroup returns the named group locked, creating it when create is
// set (nil, nil when it does not exist and create is not). Release it with
// unlock.
func (c *coordinator) lockGroup(name string, create bool) (*group, *kerr.Error) {
	for {
		c.mu.Lock()
		g := c.groups[name]
		if g == nil {
			if !create {
				c.mu.Unlock()
				return nil, nil
			}
			if len(c.groups) >= c.cfg.MaxGroups {
				c.mu.Unlock()
				c.logger.Warn("too many consumer groups; refusing a new one", "group", name, "max", c.cfg.MaxGroups)
				return nil, kerr.CoordinatorNotAvailable
			}
			g = &group{
				c:       c,
				name:    name,
				token:   randomMemberID("g"),
				members: make(map[string]*member),
				pending: make(map[string]*pendingMember),
				static:  make(map[string]string),
			}
			c.groups[name] = g
		}
		c.mu.Unlock()
		g.mu.Lock()
		if !g.dead {
			return g, nil
		}
		g.mu.Unlock()
	}
}

// unlock releases g, dropping it first when it has no members left.
func (g *group) unlock() {
	drop := false
	if !g.dead && len(g.members) == 0 && len(g.pending) == 0 {
		g.kill(nil)
		drop = true
	}
	g.mu.Unlock()
	if drop {
		g.c.forget(g)
	}
}

func (c *coordinator) forget(g *group) {
	c.mu.Lock()
	if c.groups[g.name] == g {
		delete(c.groups, g.name)
		if c.cfg.OffsetsRetention > 0 {
			c.emptied[g.name] = c.clock.Now()
		}
		c.removeStored(g)
	}
	c.mu.Unlock()
}

// reset drops every group, answering the joins and syncs that wait with
// NOT_COORDINATOR: the coordinator moved (or the server closes).
func (c *coordinator) reset() {
	c.mu.Lock()
	clear(c.emptied)
	c.resetAt = c.clock.Now()
	c.loaded = false
	if len(c.groups) == 0 {
		c.mu.Unlock()
		return
	}
	gs := c.groups
	c.groups = make(map[string]*group)
	c.mu.Unlock()
	c.logger.Info("dropping the consumer groups held in memory (the coordinator moved or the server closes)", "groups", len(gs))
	for _, g := range gs {
		g.mu.Lock()
		g.kill(kerr.NotCoordinator)
		g.mu.Unlock()
	}
}

// kill marks g dead, stops its timers and answers its waiters with e.
func (g *group) kill(e *kerr.Error) {
	g.dead = true
	g.state = groupDead
	stopTimer(g.rebalanceTimer)
	stopTimer(g.syncTimer)
	for _, m := range g.members {
		stopTimer(m.timer)
		g.answerJoin(m, joinResult{err: e, memberID: m.id, generation: -1})
		g.answerSync(m, syncResult{err: e})
	}
	for _, p := range g.pending {
		stopTimer(p.timer)
	}
}

func (g *group) answerJoin(m *member, r joinResult) {
	if m.joinWait != nil {
		m.joinWait <- r
		m.joinWait = nil
	}
}

func (g *group) answerSync(m *member, r syncResult) {
	if m.syncWait != nil {
		m.syncWait <- r
		m.syncWait = nil
	}
}

func joinError(memberID string, e *kerr.Error) (joinResult, <-chan joinResult) {
	return joinResult{err: e, memberID: memberID, generation: -1}, nil
}

// join serves a JoinGroup. A nil channel means the answer is the result;
// otherwise the answer comes on the channel once the join phase completes.
func (c *coordinator) join(p joinParams) (joinResult, <-chan joinResult) {
	switch {
	case p.group == "":
		return joinError(p.memberID, kerr.InvalidGroupID)
	case p.sessionTimeout < c.cfg.MinSessionTimeout || p.sessionTimeout > c.cfg.MaxSessionTimeout:
		return joinError(p.memberID, kerr.InvalidSessionTimeout)
	case len(p.protocols) > maxMemberProtocols:
		return joinError(p.memberID, kerr.InvalidRequest)
	}
	size := 0
	for _, pr := range p.protocols {
		size += len(pr.name) + len(pr.metadata)
	}
	if size > maxMemberMetadata {
		return joinError(p.memberID, kerr.InvalidRequest)
	}
	if p.rebalanceTimeout <= 0 {
		p.rebalanceTimeout = p.sessionTimeout
	}
	g, err := c.lockGroup(p.group, p.memberID == "")
	if err != nil {
		return joinError(p.memberID, err)
	}
	if g == nil {
		return joinError(p.memberID, kerr.UnknownMemberID)
	}
	defer g.unlock()
	if !g.supportsProtocols(p.protocolType, p.protocols) {
		return joinError(p.memberID, kerr.InconsistentGroupProtocol)
	}
	if p.memberID == "" {
		return g.joinNew(p)
	}
	return g.joinKnown(p)
}

// supportsProtocols: a member may join a group with members only with
// its protocol type and one protocol every member supports.
func (g *group) supportsProtocols(protocolType string, protocols []groupProtocol) bool {
	if len(g.members) == 0 {
		return protocolType != "" && len(protocols) > 0
	}
	if protocolType != g.protocolType {
		return false
	}
	for _, p := range protocols {
		if g.allSupport(p.name) {
			return true
		}
	}
	return false
}

func (g *group) allSupport(name string) bool {
	for _, m := range g.members {
		if !m.supports(name) {
			return false
		}
	}
	return true
}

func (m *member) supports(name string) bool {
	for _, p := range m.protocols {
		if p.name == name {
			return true
		}
	}
	return false
}

// matches reports whether a join carries the member's protocols
// unchanged (names, order and metadata).
func (m *member) matches(p joinParams) bool {
	return m.protocolType == p.protocolType && slices.EqualFunc(m.protocols, p.protocols, func(a, b groupProtocol) bool {
		return a.name == b.name && bytes.Equal(a.metadata, b.metadata)
	})
}

// joinNew serves a join without a member id.
func (g *group) joinNew(p joinParams) (joinResult, <-chan joinResult) {
	if p.instanceID != nil {
		if oldID, ok := g.static[*p.instanceID]; ok {
			if old := g.members[oldID]; old != nil {
				return g.replaceStatic(p, old)
			}
			delete(g.static, *p.instanceID)
		}
	}
	if len(g.members)+len(g.pending) >= g.c.cfg.MaxMembers {
		return joinError("", kerr.GroupMaxSizeReached)
	}
	prefix := p.clientID
	if p.instanceID != nil {
		prefix = *p.instanceID
	}
	id := g.c.newID(prefix)
	if p.instanceID == nil && p.requireKnownID {
		g.addPending(id, p.sessionTimeout)
		return joinError(id, kerr.MemberIDRequired)
	}
	return g.addMember(id, p)
}

// joinKnown serves a join with a member id.
func (g *group) joinKnown(p joinParams) (joinResult, <-chan joinResult) {
	if pm := g.pending[p.memberID]; pm != nil {
		if p.instanceID != nil {
			if _, ok := g.static[*p.instanceID]; ok {
				return joinError(p.memberID, kerr.FencedInstanceID)
			}
		}
		g.removePending(pm)
		return g.addMember(p.memberID, p)
	}
	if e := g.validateMember(p.memberID, p.instanceID); e != nil {
		return joinError(p.memberID, e)
	}
	m := g.members[p.memberID]
	switch g.state {
	case groupPreparingRebalance:
		ch := g.updateMember(m, p)
		g.maybeCompleteJoin()
		return joinResult{}, ch
	case groupCompletingRebalance:
		if m.matches(p) {
			// The member missed the answer: the same again.
			g.heartbeatMember(m)
			return g.currentJoin(m.id, m.id == g.leader), nil
		}
		ch := g.updateMember(m, p)
		g.prepareRebalance()
		return joinResult{}, ch
	case groupStable:
		if m.id == g.leader || !m.matches(p) {
			// The leader rejoins to have the group rebalanced (for
			// changes the metadata does not show, topics growing).
			ch := g.updateMember(m, p)
			g.prepareRebalance()
			return joinResult{}, ch
		}
		g.heartbeatMember(m)
		return g.currentJoin(m.id, false), nil
	}
	return joinError(p.memberID, kerr.UnknownMemberID)
}

// validateMember checks a request's member and instance ids.
func (g *group) validateMember(memberID string, instanceID *string) *kerr.Error {
	if instanceID != nil {
		known, ok := g.static[*instanceID]
		if !ok {
			return kerr.UnknownMemberID
		}
		if known != memberID {
			return kerr.FencedInstanceID
		}
	}
	if g.members[memberID] == nil {
		return kerr.UnknownMemberID
	}
	return nil
}

func (g *group) newMember(id string, p joinParams) *member {
	g.joinSeq++
	m := &member{id: id, seq: g.joinSeq, instanceID: p.instanceID}
	g.setMember(m, p)
	return m
}

func (g *group) setMember(m *member, p joinParams) {
	m.clientID, m.clientHost = p.clientID, p.clientHost
	m.sessionTimeout, m.rebalanceTimeout = p.sessionTimeout, p.rebalanceTimeout
	m.protocolType, m.protocols = p.protocolType, p.protocols
}

// addMember adds a member awaiting its join answer and rebalances.
func (g *group) addMember(id string, p joinParams) (joinResult, <-chan joinResult) {
	m := g.newMember(id, p)
	if len(g.members) == 0 {
		g.protocolType = p.protocolType
	}
	g.members[id] = m
	if p.instanceID != nil {
		g.static[*p.instanceID] = id
	}
	if g.leader == "" {
		g.leader = id
	}
	ch := g.awaitJoin(m)
	g.prepareRebalance()
	return joinResult{}, ch
}

// updateMember takes a known member's new join and makes it wait.
func (g *group) updateMember(m *member, p joinParams) <-chan joinResult {
	g.setMember(m, p)
	return g.awaitJoin(m)
}

func (g *group) awaitJoin(m *member) <-chan joinResult {
	// An earlier join of the member still waiting was abandoned by its
	// client (a timeout, a new connection).
	g.answerJoin(m, joinResult{err: kerr.RebalanceInProgress, memberID: m.id, generation: -1})
	ch := make(chan joinResult, 1)
	m.joinWait = ch
	g.heartbeatMember(m)
	return ch
}

// replaceStatic serves the join of a known instance id without a member
// id (a static member restarted, KIP-345): the member gets a new id and
// keeps its assignment; the old id is fenced. In a Stable group whose
// selected protocol the new join does not change there is no rebalance;
// the v9+ leader is told to skip the assignment (KIP-814), an older one is
// told the old leader id, so it does not assign.
func (g *group) replaceStatic(p joinParams, old *member) (joinResult, <-chan joinResult) {
	newID := g.c.newID(*p.instanceID)
	m := &member{id: newID, seq: old.seq, instanceID: p.instanceID, assignment: old.assignment}
	g.setMember(m, p)
	g.answerJoin(old, joinResult{err: kerr.FencedInstanceID, memberID: old.id, generation: -1})
	g.answerSync(old, syncResult{err: kerr.FencedInstanceID})
	stopTimer(old.timer)
	delete(g.members, old.id)
	g.members[newID] = m
	g.static[*p.instanceID] = newID
	oldLeader := g.leader
	if g.leader == old.id {
		g.leader = newID
	}
	if _, ok := g.pendingSync[old.id]; ok {
		delete(g.pendingSync, old.id)
		g.pendingSync[newID] = struct{}{}
	}
	g.heartbeatMember(m)
	g.c.logger.Debug("static member rejoined", "group", g.name, "instance_id", *p.instanceID, "old_member_id", old.id, "member_id", newID, "state", g.state)
	switch g.state {
	case groupStable:
		if g.selectProtocol() == g.protocol {
			isLeader := g.leader == newID
			if p.skipAssignment {
				r := g.currentJoin(newID, isLeader)
				r.skipAssignment = isLeader
				return r, nil
			}
			r := g.currentJoin(newID, false)
			r.leader = oldLeader
			return r, nil
		}
		ch := g.awaitJoin(m)
		g.prepareRebalance()
		return joinResult{}, ch
	case groupCompletingRebalance:
		// The leader may be assigning the old id: rebalance.
		ch := g.awaitJoin(m)
		g.prepareRebalance()
		return joinResult{}, ch
	default: // PreparingRebalance
		ch := g.awaitJoin(m)
		g.maybeCompleteJoin()
		return joinResult{}, ch
	}
}

func (g *group) addPending(id string, session time.Duration) {
	pm := &pendingMember{id: id}
	g.pending[id] = pm
	g.tokens++
	tok := g.tokens
	pm.token = tok
	pm.timer = g.c.clock.AfterFunc(session, func() {
		g.mu.Lock()
		defer g.unlock()
		if g.dead || g.pending[id] != pm || pm.token != tok {
			return
		}
		delete(g.pending, id)
		g.maybeCompleteJoin()
	})
}

func (g *group) removePending(pm *pendingMember) {
	stopTimer(pm.timer)
	delete(g.pending, pm.id)
}

// heartbeatMember (re)starts a member's session timer.
func (g *group) heartbeatMember(m *member) {
	stopTimer(m.timer)
	g.tokens++
	tok := g.tokens
	m.token = tok
	m.timer = g.c.clock.AfterFunc(m.sessionTimeout, func() {
		g.mu.Lock()
		defer g.unlock()
		if g.dead || g.members[m.id] != m || m.token != tok {
			return
		}
		if m.joinWait != nil || m.syncWait != nil {
			// Waiting for us: alive (the rebalance and sync
			// timeouts bound the wait).
			g.heartbeatMember(m)
			return
		}
		g.c.logger.Info("consumer group member session expired; removing it", "group", g.name, "member_id", m.id, "session_timeout", m.sessionTimeout)
		g.removeMember(m)
		g.memberGone()
	})
}

// removeMember drops a member (no rebalance: see memberGone).
func (g *group) removeMember(m *member) {
	stopTimer(m.timer)
	delete(g.members, m.id)
	if m.instanceID != nil && g.static[*m.instanceID] == m.id {
		delete(g.static, *m.instanceID)
	}
	delete(g.pendingSync, m.id)
	g.answerJoin(m, joinResult{err: kerr.UnknownMemberID, memberID: m.id, generation: -1})
	g.answerSync(m, syncResult{err: kerr.UnknownMemberID})
	if g.leader == m.id {
		g.leader = ""
	}
}

// memberGone moves the group on after members were removed.
func (g *group) memberGone() {
	switch g.state {
	case groupStable, groupCompletingRebalance:
		g.prepareRebalance()
	case groupPreparingRebalance:
		g.maybeCompleteJoin()
	}
}

// prepareRebalance starts a join phase (or continues the one running).
func (g *group) prepareRebalance() {
	if g.state == groupPreparingRebalance {
		g.maybeCompleteJoin()
		return
	}
	if g.state == groupCompletingRebalance {
		for _, m := range g.members {
			m.assignment = nil
			g.answerSync(m, syncResult{err: kerr.RebalanceInProgress})
		}
	}
	g.clearPendingSync()
	g.state = groupPreparingRebalance
	g.armRebalance()
	g.maybeCompleteJoin()
}

func (g *group) maxRebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalanceTimeout)
	}
	return d
}

// armRebalance (re)starts the rebalance timer: the join phase completes
// when it fires, with the members that rejoined.
func (g *group) armRebalance() {
	stopTimer(g.rebalanceTimer)
	g.tokens++
	tok := g.tokens
	g.rebalanceToken = tok
	g.rebalanceTimer = g.c.clock.AfterFunc(g.maxRebalanceTimeout(), func() {
		g.mu.Lock()
		defer g.unlock()
		if g.dead || g.rebalanceToken != tok || g.state != groupPreparingRebalance {
			return
		}
		g.c.logger.Debug("rebalance timeout; completing the join phase without the members that did not rejoin", "group", g.name)
		g.completeJoin()
	})
}

// maybeCompleteJoin completes the join phase once every member rejoined
// and no pending member is left.
func (g *group) maybeCompleteJoin() {
	if g.state != groupPreparingRebalance || len(g.pending) > 0 {
		return
	}
	for _, m := range g.members {
		if m.joinWait == nil {
			return
		}
	}
	g.completeJoin()
}

// completeJoin ends the join phase: the dynamic members that did not
// rejoin are removed (static ones are kept until their session expires),
// the generation moves on, a protocol is selected and every joined member
// is answered, the leader with every member's metadata.
func (g *group) completeJoin() {
	stopTimer(g.rebalanceTimer)
	g.rebalanceTimer, g.rebalanceToken = nil, 0
	for _, m := range g.members {
		if m.joinWait == nil && m.instanceID == nil {
			g.removeMember(m)
		}
	}
	joined := g.sortedMembers(func(m *member) bool { return m.joinWait != nil })
	if len(g.members) > 0 && len(joined) == 0 {
		// Only static members that did not rejoin: wait again (their
		// sessions expire meanwhile if they are gone).
		g.armRebalance()
		return
	}
	if g.generation == math.MaxInt32 {
		g.generation = 0
	}
	g.generation++
	if len(g.members) == 0 {
		g.state = groupEmpty
		g.protocol, g.leader = "", ""
		return
	}
	g.protocol = g.selectProtocol()
	g.state = groupCompletingRebalance
	if l := g.members[g.leader]; l == nil || l.joinWait == nil {
		g.leader = joined[0].id
	}
	g.pendingSync = make(map[string]struct{}, len(g.members))
	for id := range g.members {
		g.pendingSync[id] = struct{}{}
	}
	g.c.logger.Debug("join phase complete", "group", g.name, "generation", g.generation, "protocol", g.protocol, "members", len(g.members), "leader", g.leader)
	for _, m := range joined {
		g.answerJoin(m, g.currentJoin(m.id, m.id == g.leader))
		g.heartbeatMember(m)
	}
	g.armSync()
}

// sortedMembers lists the members passing keep in join order.
func (g *group) sortedMembers(keep func(*member) bool) []*member {
	ms := make([]*member, 0, len(g.members))
	for _, m := range g.members {
		if keep == nil || keep(m) {
			ms = append(ms, m)
		}
	}
	slices.SortFunc(ms, func(a, b *member) int { return cmp.Compare(a.seq, b.seq) })
	return ms
}

// selectProtocol picks, among the protocols every member supports, the
// one most members prefer (each votes for its first such protocol); ties
// go to the earliest member's preference.
func (g *group) selectProtocol() string {
	ms := g.sortedMembers(nil)
	if len(ms) == 0 {
		return ""
	}
	votes := make(map[string]int)
	for _, m := range ms {
		for _, p := range m.protocols {
			if g.allSupport(p.name) {
				votes[p.name]++
				break
			}
		}
	}
	best, bestVotes := "", 0
	for _, p := range ms[0].protocols {
		if v := votes[p.name]; v > bestVotes {
			best, bestVotes = p.name, v
		}
	}
	return best
}

// currentJoin is the join answer of the current generation.
func (g *group) currentJoin(memberID string, withMembers bool) joinResult {
	pt, pr := g.protocolType, g.protocol
	r := joinResult{
		memberID:     memberID,
		generation:   g.generation,
		protocolType: &pt,
		protocol:     &pr,
		leader:       g.leader,
	}
	if withMembers {
		for _, m := range g.sortedMembers(nil) {
			r.members = append(r.members, joinMember{memberID: m.id, instanceID: m.instanceID, metadata: m.metadataOf(g.protocol)})
		}
	}
	return r
}

// armSync starts the timer bounding the syncs of this generation: the
// members that did not sync by then are removed and the group rebalances.
func (g *group) armSync() {
	stopTimer(g.syncTimer)
	g.tokens++
	tok := g.tokens
	g.syncToken = tok
	gen := g.generation
	g.syncTimer = g.c.clock.AfterFunc(g.maxRebalanceTimeout(), func() {
		g.mu.Lock()
		defer g.unlock()
		if g.dead || g.syncToken != tok || g.generation != gen || len(g.pendingSync) == 0 {
			return
		}
		if g.state != groupCompletingRebalance && g.state != groupStable {
			return
		}
		g.c.logger.Info("consumer group members did not sync in time; removing them", "group", g.name, "members", len(g.pendingSync), "generation", gen)
		for id := range g.pendingSync {
			if m := g.members[id]; m != nil {
				g.removeMember(m)
			}
		}
		g.pendingSync = nil
		g.prepareRebalance()
	})
}

func (g *group) clearPendingSync() {
	g.pendingSync = nil
	stopTimer(g.syncTimer)
	g.syncTimer, g.syncToken = nil, 0
}

func (g *group) synced(id string) {
	delete(g.pendingSync, id)
	if len(g.pendingSync) == 0 {
		g.clearPendingSync()
	}
}

// emptyConsumerAssignment is what a "consumer" member the leader assigned
// nothing (or left out) gets: a valid empty ConsumerMemberAssignment, as
// some clients cannot decode zero bytes.
var emptyConsumerAssignment = new(kmsg.ConsumerMemberAssignment).AppendTo(nil)

func syncError(e *kerr.Error) (syncResult, <-chan syncResult) {
	return syncResult{err: e}, nil
}

// sync serves a SyncGroup. A nil channel means the answer is the result;
// otherwise it comes on the channel once the leader synced.
func (c *coordinator) sync(p syncParams) (syncResult, <-chan syncResult) {
	if p.group == "" {
		return syncError(kerr.InvalidGroupID)
	}
	g, _ := c.lockGroup(p.group, false)
	if g == nil {
		return syncError(kerr.UnknownMemberID)
	}
	defer g.unlock()
	if e := g.validateMember(p.memberID, p.instanceID); e != nil {
		return syncError(e)
	}
	if p.generation != g.generation {
		return syncError(kerr.IllegalGeneration)
	}
	if p.protocolType != nil && *p.protocolType != g.protocolType || p.protocol != nil && *p.protocol != g.protocol {
		return syncError(kerr.InconsistentGroupProtocol)
	}
	m := g.members[p.memberID]
	switch g.state {
	case groupPreparingRebalance:
		return syncError(kerr.RebalanceInProgress)
	case groupCompletingRebalance:
		g.synced(m.id)
		g.answerSync(m, syncResult{err: kerr.RebalanceInProgress}) // an abandoned earlier sync
		ch := make(chan syncResult, 1)
		m.syncWait = ch
		g.heartbeatMember(m)
		switch {
		case m.id != g.leader || g.storingGen == g.generation:
		case g.c.store != nil:
			g.storeAssignment(p.assignments)
		default:
			g.assign(p.assignments)
		}
		return syncResult{}, ch
	case groupStable:
		g.synced(m.id)
		g.heartbeatMember(m)
		return g.syncOK(m), nil
	}
	return syncError(kerr.UnknownMemberID)
}

// assign takes the leader's assignment, answers the members waiting in
// SyncGroup and makes the group Stable.
func (g *group) assign(assignments map[string][]byte) {
	for _, m := range g.members {
		m.assignment = g.assignmentOf(m, assignments)
	}
	g.state = groupStable
	for _, m := range g.members {
		g.answerSync(m, g.syncOK(m))
	}
	g.c.logger.Debug("group stable", "group", g.name, "generation", g.generation, "members", len(g.members))
}

// assignmentOf is a member's part of the leader's assignments: a
// "consumer" member the leader left out gets an empty assignment.
func (g *group) assignmentOf(m *member, assignments map[string][]byte) []byte {
	a := assignments[m.id]
	if len(a) == 0 && g.protocolType == "consumer" {
		a = emptyConsumerAssignment
	}
	return a
}

// metadataOf is a member's metadata of a protocol (nil: not supported).
func (m *member) metadataOf(protocol string) []byte {
	for _, p := range m.protocols {
		if p.name == protocol {
			return p.metadata
		}
	}
	return nil
}

func (g *group) syncOK(m *member) syncResult {
	pt, pr := g.protocolType, g.protocol
	return syncResult{protocolType: &pt, protocol: &pr, assignment: m.assignment}
}

// heartbeat serves a Heartbeat.
func (c *coordinator) heartbeat(groupID, memberID string, instanceID *string, generation int32) *kerr.Error {
	if groupID == "" {
		return kerr.InvalidGroupID
	}
	g, _ := c.lockGroup(groupID, false)
	if g == nil {
		return kerr.UnknownMemberID
	}
	defer g.unlock()
	if e := g.validateMember(memberID, instanceID); e != nil {
		return e
	}
	if generation != g.generation {
		return kerr.IllegalGeneration
	}
	m := g.members[memberID]
	switch g.state {
	case groupCompletingRebalance, groupStable:
		g.heartbeatMember(m)
		return nil
	case groupPreparingRebalance:
		g.heartbeatMember(m)
		return kerr.RebalanceInProgress
	}
	return kerr.UnknownMemberID
}

// leave serves a LeaveGroup: the group error and one error per member.
func (c *coordinator) leave(groupID string, ms []leaveMember) (*kerr.Error, []*kerr.Error) {
	if groupID == "" {
		return kerr.InvalidGroupID, nil
	}
	errs := make([]*kerr.Error, len(ms))
	g, _ := c.lockGroup(groupID, false)
	if g == nil {
		for i := range errs {
			errs[i] = kerr.UnknownMemberID
		}
		return nil, errs
	}
	defer g.unlock()
	for i, lm := range ms {
		var staticID string
		hasStatic := false
		if lm.instanceID != nil {
			staticID, hasStatic = g.static[*lm.instanceID]
		}
		if lm.memberID != "" && hasStatic && staticID != lm.memberID {
			errs[i] = kerr.FencedInstanceID
			continue
		}
		if pm := g.pending[lm.memberID]; pm != nil {
			g.removePending(pm)
			g.maybeCompleteJoin()
			continue
		}
		m := g.members[lm.memberID]
		if hasStatic {
			m = g.members[staticID]
		}
		if m == nil {
			errs[i] = kerr.UnknownMemberID
			continue
		}
		g.c.logger.Debug("member left the group", "group", g.name, "member_id", m.id)
		g.removeMember(m)
		g.memberGone()
	}
	return nil, errs
}

// validateCommit checks an OffsetCommit's member and generation against
// the group, as Kafka: a group without members takes commits of
// generation -1 only (admin tools, consumers without group management);
// a group with members takes commits of its members at its generation,
// except while CompletingRebalance.
func (c *coordinator) validateCommit(groupID, memberID string, instanceID *string, generation int32) *kerr.Error {
	g, _ := c.lockGroup(groupID, false)
	if g == nil {
		if generation < 0 {
			return nil
		}
		return kerr.IllegalGeneration
	}
	defer g.unlock()
	if generation < 0 && g.state == groupEmpty {
		return nil
	}
	if generation >= 0 || memberID != "" || instanceID != nil {
		if e := g.validateMember(memberID, instanceID); e != nil {
			return e
		}
		if generation != g.generation {
			return kerr.IllegalGeneration
		}
	} else if g.state != groupEmpty {
		return kerr.UnknownMemberID
	}
	if g.state == groupCompletingRebalance {
		return kerr.RebalanceInProgress
	}
	if m := g.members[memberID]; m != nil {
		g.heartbeatMember(m)
	}
	return nil
}

type groupDescription struct {
	state        groupState
	protocolType string
	protocol     string // Stable only
	members      []describedMember
}

type describedMember struct {
	memberID   string
	instanceID *string
	clientID   string
	clientHost string
	metadata   []byte // Stable only
	assignment []byte // Stable only
}

// describe describes a group held in memory (false: none).
func (c *coordinator) describe(groupID string) (groupDescription, bool) {
	g, _ := c.lockGroup(groupID, false)
	if g == nil {
		return groupDescription{}, false
	}
	defer g.unlock()
	d := groupDescription{state: g.state, protocolType: g.protocolType}
	stable := g.state == groupStable
	if stable {
		d.protocol = g.protocol
	}
	for _, m := range g.sortedMembers(nil) {
		dm := describedMember{memberID: m.id, instanceID: m.instanceID, clientID: m.clientID, clientHost: m.clientHost}
		if stable {
			dm.assignment, dm.metadata = m.assignment, m.metadataOf(g.protocol)
		}
		d.members = append(d.members, dm)
	}
	return d, true
}

type listedGroup struct {
	name         string
	protocolType string
	state        groupState
}

// list lists the groups held in memory.
func (c *coordinator) list() []listedGroup {
	c.mu.Lock()
	gs := make([]*group, 0, len(c.groups))
	for _, g := range c.groups {
		gs = append(gs, g)
	}
	c.mu.Unlock()
	out := make([]listedGroup, 0, len(gs))
	for _, g := range gs {
		g.mu.Lock()
		if !g.dead {
			out = append(out, listedGroup{name: g.name, protocolType: g.protocolType, state: g.state})
		}
		g.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b listedGroup) int { return cmp.Compare(a.name, b.name) })
	return out
}

// deleteGroup drops a group held in memory when it has no members
// (NON_EMPTY_GROUP otherwise); found is false when none is held.
func (c *coordinator) deleteGroup(groupID string) (found bool, err *kerr.Error) {
	g, _ := c.lockGroup(groupID, false)
	if g == nil {
		return false, nil
	}
	if len(g.members) > 0 {
		g.unlock()
		return true, kerr.NonEmptyGroup
	}
	g.kill(nil)
	g.mu.Unlock()
	c.forget(g)
	return true, nil
}

// subscriptions reports, for OffsetDelete, whether the group has members
// (found false: none held in memory) and which topics they consume.
// Members of a non-"consumer" protocol type make every topic subscribed,
// as do metadata that do not parse.
func (c *coordinator) subscriptions(groupID string) (found bool, consumer bool, topics map[string]bool, all bool) {
	g, _ := c.lockGroup(groupID, false)
	if g == nil {
		return false, false, nil, false
	}
	defer g.unlock()
	if len(g.members) == 0 {
		return false, false, nil, false
	}
	if g.protocolType != "consumer" {
		return true, false, nil, true
	}
	topics, ok := g.consumerTopics()
	return true, true, topics, !ok
}

// consumerTopics are the topics the members of a "consumer" group
// subscribe to, by their metadata of the selected protocol (of every
// protocol before one is selected); false when a member's does not parse.
func (g *group) consumerTopics() (map[string]bool, bool) {
	topics := make(map[string]bool)
	for _, m := range g.members {
		for _, p := range m.protocols {
			if g.protocol != "" && p.name != g.protocol {
				continue
			}
			var meta kmsg.ConsumerMemberMetadata
			if err := meta.ReadFrom(p.metadata); err != nil {
				return nil, false
			}
			for _, t := range meta.Topics {
				topics[t] = true
			}
		}
	}
	return topics, true
}
