package rpc

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kerr"
)

// fakeClock fires its timers when advanced, in deadline order, in the
// goroutine advancing it.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Duration
	timers []*fakeTimer
}

type fakeTimer struct {
	c    *fakeClock
	at   time.Duration
	f    func()
	done bool
}

// fakeEpoch is a fakeClock's time zero.
var fakeEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fakeEpoch.Add(c.now)
}

// set moves the time to d past fakeEpoch without firing any timer.
func (c *fakeClock) set(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = d
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now + d, f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	end := c.now + d
	for {
		var next *fakeTimer
		for _, t := range c.timers {
			if !t.done && t.at <= end && (next == nil || t.at < next.at) {
				next = t
			}
		}
		if next == nil {
			break
		}
		next.done = true
		c.now = next.at
		c.mu.Unlock()
		next.f()
		c.mu.Lock()
	}
	c.now = end
	live := c.timers[:0]
	for _, t := range c.timers {
		if !t.done {
			live = append(live, t)
		}
	}
	c.timers = live
	c.mu.Unlock()
}

// active counts the timers not fired nor stopped.
func (c *fakeClock) active() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.done {
			n++
		}
	}
	return n
}

// gtest drives a coordinator on a fake clock. Member ids are
// prefix-1, prefix-2...
type gtest struct {
	t   *testing.T
	c   *coordinator
	clk *fakeClock
}

const (
	testSession   = time.Second
	testRebalance = 4500 * time.Millisecond // not a multiple of the session
)

func newGTest(t *testing.T, cfg GroupConfig) *gtest {
	if cfg.MinSessionTimeout == 0 {
		cfg.MinSessionTimeout = 10 * time.Millisecond
	}
	clk := &fakeClock{}
	c := newCoordinator(cfg, clk, hclog.NewNullLogger())
	n := 0
	c.newID = func(prefix string) string {
		n++
		return fmt.Sprintf("%s-%d", prefix, n)
	}
	return &gtest{t: t, c: c, clk: clk}
}

// jp is a v9 dynamic join of the range protocol on topic t.
func jp(group, memberID string) joinParams {
	return joinParams{
		group: group, memberID: memberID, clientID: "client", clientHost: "/127.0.0.1",
		sessionTimeout: testSession, rebalanceTimeout: testRebalance,
		protocolType:   "consumer",
		protocols:      []groupProtocol{{name: "range", metadata: consumerMeta("t")}},
		requireKnownID: true, skipAssignment: true,
	}
}

func static(p joinParams, instance string) joinParams {
	p.instanceID = &instance
	return p
}

func withProtocols(p joinParams, names ...string) joinParams {
	p.protocols = nil
	for _, n := range names {
		p.protocols = append(p.protocols, groupProtocol{name: n, metadata: consumerMeta("t")})
	}
	return p
}

// state is the group's state and generation (Dead, 0 when not held).
func (h *gtest) state(group string) (groupState, int32) {
	h.c.mu.Lock()
	g := h.c.groups[group]
	h.c.mu.Unlock()
	if g == nil {
		return groupDead, 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state, g.generation
}

func (h *gtest) expectState(group string, state groupState, gen int32) {
	h.t.Helper()
	if s, g := h.state(group); s != state || g != gen {
		h.t.Fatalf("group %s: %s generation %d, want %s generation %d", group, s, g, state, gen)
	}
}

// join joins and expects an answer now.
func (h *gtest) join(p joinParams) joinResult {
	h.t.Helper()
	r, ch := h.c.join(p)
	if ch != nil {
		select {
		case r = <-ch:
		default:
			h.t.Fatalf("join of %q to %s waits", p.memberID, p.group)
		}
	}
	return r
}

// joinWait joins and expects to wait.
func (h *gtest) joinWait(p joinParams) <-chan joinResult {
	h.t.Helper()
	r, ch := h.c.join(p)
	if ch == nil {
		h.t.Fatalf("join of %q to %s answered at once: %+v", p.memberID, p.group, r)
	}
	select {
	case r := <-ch:
		h.t.Fatalf("join of %q to %s answered at once: %+v", p.memberID, p.group, r)
	default:
	}
	return ch
}

// newMember joins a dynamic member (MEMBER_ID_REQUIRED, then with its id)
// and returns its id and the join channel.
func (h *gtest) newMember(p joinParams) (string, <-chan joinResult) {
	h.t.Helper()
	r := h.join(p)
	if r.err != kerr.MemberIDRequired || r.memberID == "" {
		h.t.Fatalf("first join: %+v", r)
	}
	p.memberID = r.memberID
	_, ch := h.c.join(p)
	if ch == nil {
		h.t.Fatal("join with the id answered at once")
	}
	return r.memberID, ch
}

func ready[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	default:
		t.Fatal("no answer yet")
	}
	panic("unreachable")
}

func waiting[T any](t *testing.T, ch <-chan T) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("answered: %+v", v)
	default:
	}
}

func (h *gtest) syncMember(group, id string, gen int32, assign map[string][]byte) (syncResult, <-chan syncResult) {
	return h.c.sync(syncParams{group: group, memberID: id, generation: gen, assignments: assign})
}

// stable makes a group of dynamic members (in order: the first leads)
// and brings it to Stable; it returns the ids and generation.
func (h *gtest) stable(group string, n int) ([]string, int32) {
	h.t.Helper()
	var ids []string
	var chans []<-chan joinResult
	for range n {
		id, ch := h.newMember(jp(group, ""))
		// The others rejoin for the new one (their earlier answer,
		// if any, is of an earlier generation).
		for j, other := range ids {
			select {
			case <-chans[j]:
			default:
			}
			_, chans[j] = h.c.join(jp(group, other))
		}
		ids = append(ids, id)
		chans = append(chans, ch)
	}
	var gen int32
	for _, ch := range chans {
		r := ready(h.t, ch)
		if r.err != nil {
			h.t.Fatalf("join: %+v", r)
		}
		gen = r.generation
	}
	assign := make(map[string][]byte)
	for i, id := range ids {
		assign[id] = consumerAssignment("t", int32(i))
	}
	var syncs []<-chan syncResult
	for i := len(ids) - 1; i >= 0; i-- { // the leader last
		r, ch := h.syncMember(group, ids[i], gen, assign)
		if ch == nil {
			h.t.Fatalf("sync of %s: %+v", ids[i], r)
		}
		syncs = append(syncs, ch)
	}
	for _, ch := range syncs {
		if r := ready(h.t, ch); r.err != nil {
			h.t.Fatalf("sync: %+v", r)
		}
	}
	h.expectState(group, groupStable, gen)
	return ids, gen
}

func (h *gtest) heartbeat(group, id string, gen int32) *kerr.Error {
	return h.c.heartbeat(group, id, nil, gen)
}

func expectErr(t *testing.T, what string, got, want *kerr.Error) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
}

// TestGroupStateMachine walks the classic protocol's transitions.
func TestGroupStateMachine(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, h *gtest)
	}{
		{"first member", func(t *testing.T, h *gtest) {
			r := h.join(jp("g", ""))
			expectErr(t, "first join", r.err, kerr.MemberIDRequired)
			h.expectState("g", groupEmpty, 0)
			// v3: no id required.
			p := jp("g", r.memberID)
			r = h.join(p)
			if r.err != nil || r.generation != 1 || r.leader != p.memberID || len(r.members) != 1 || r.members[0].memberID != p.memberID || *r.protocol != "range" {
				t.Fatalf("join: %+v", r)
			}
			h.expectState("g", groupCompletingRebalance, 1)
			expectErr(t, "heartbeat while completing", h.heartbeat("g", p.memberID, 1), nil)
			expectErr(t, "heartbeat of another generation", h.heartbeat("g", p.memberID, 0), kerr.IllegalGeneration)
			expectErr(t, "heartbeat of an unknown member", h.heartbeat("g", "nobody", 1), kerr.UnknownMemberID)
			expectErr(t, "heartbeat of an unknown group", h.heartbeat("other", p.memberID, 1), kerr.UnknownMemberID)
			sr, ch := h.syncMember("g", p.memberID, 1, map[string][]byte{p.memberID: consumerAssignment("t", 0)})
			sr = ready(t, ch)
			if sr.err != nil || string(sr.assignment) != string(consumerAssignment("t", 0)) || *sr.protocol != "range" {
				t.Fatalf("sync: %+v", sr)
			}
			h.expectState("g", groupStable, 1)
			// A sync in Stable answers the assignment again.
			if sr, ch := h.syncMember("g", p.memberID, 1, nil); ch != nil || sr.err != nil || len(sr.assignment) == 0 {
				t.Fatalf("sync when stable: %+v", sr)
			}
		}},
		{"v3 join without member id", func(t *testing.T, h *gtest) {
			p := jp("g", "")
			p.requireKnownID = false
			r := h.join(p)
			if r.err != nil || r.memberID != "client-1" || r.generation != 1 {
				t.Fatalf("join: %+v", r)
			}
		}},
		{"new member rebalances", func(t *testing.T, h *gtest) {
			ids, gen := h.stable("g", 1)
			b, bch := h.newMember(jp("g", ""))
			h.expectState("g", groupPreparingRebalance, gen)
			expectErr(t, "heartbeat during the rebalance", h.heartbeat("g", ids[0], gen), kerr.RebalanceInProgress)
			waiting(t, bch)
			_, ach := h.c.join(jp("g", ids[0]))
			ra, rb := ready(t, ach), ready(t, bch)
			if ra.err != nil || rb.err != nil || ra.generation != gen+1 || rb.generation != gen+1 || ra.leader != ids[0] || rb.leader != ids[0] {
				t.Fatalf("joins: %+v %+v", ra, rb)
			}
			if len(ra.members) != 2 || len(rb.members) != 0 || ra.members[0].memberID != ids[0] || ra.members[1].memberID != b {
				t.Fatalf("members: leader %+v follower %+v", ra.members, rb.members)
			}
			h.expectState("g", groupCompletingRebalance, gen+1)
			// The follower's sync waits for the leader's.
			_, fch := h.syncMember("g", b, gen+1, nil)
			waiting(t, fch)
			expectErr(t, "old generation sync", func() *kerr.Error { r, _ := h.syncMember("g", ids[0], gen, nil); return r.err }(), kerr.IllegalGeneration)
			_, lch := h.syncMember("g", ids[0], gen+1, map[string][]byte{ids[0]: consumerAssignment("t", 0), b: consumerAssignment("t", 1)})
			if r := ready(t, fch); r.err != nil || string(r.assignment) != string(consumerAssignment("t", 1)) {
				t.Fatalf("follower sync: %+v", r)
			}
			if r := ready(t, lch); r.err != nil || string(r.assignment) != string(consumerAssignment("t", 0)) {
				t.Fatalf("leader sync: %+v", r)
			}
			h.expectState("g", groupStable, gen+1)
		}},
		{"follower rejoin when stable", func(t *testing.T, h *gtest) {
			ids, gen := h.stable("g", 2)
			r := h.join(jp("g", ids[1]))
			if r.err != nil || r.generation != gen || len(r.members) != 0 || r.leader != ids[0] {
				t.Fatalf("follower rejoin: %+v", r)
			}
			h.expectState("g", groupStable, gen)
			// The leader's rejoin rebalances.
			ch := h.joinWait(jp("g", ids[0]))
			h.expectState("g", groupPreparingRebalance, gen)
			_, fch := h.c.join(jp("g", ids[1]))
			if r := ready(t, ch); r.generation != gen+1 || len(r.members) != 2 {
				t.Fatalf("leader: %+v", r)
			}
			ready(t, fch)
			// Changed metadata rebalances too.
			p := jp("g", ids[1])
			p.protocols[0].metadata = consumerMeta("t", "u")
			h.joinWait(p)
			h.expectState("g", groupPreparingRebalance, gen+1)
		}},
		{"rejoin while completing answers the same", func(t *testing.T, h *gtest) {
			ids, gen := h.stable("g", 2)
			_, ch0 := h.c.join(jp("g", ids[0]))
			_, ch1 := h.c.join(jp("g", ids[1]))
			ready(t, ch0)
			ready(t, ch1)
			h.expectState("g", groupCompletingRebalance, gen+1)
			r := h.join(jp("g", ids[0]))
			if r.err != nil || r.generation != gen+1 || len(r.members) != 2 {
				t.Fatalf("leader again: %+v", r)
			}
			expectErr(t, "sync while preparing", func() *kerr.Error {
				p := jp("g", ids[1])
				p.protocols[0].metadata = consumerMeta("other")
				h.joinWait(p) // changed: rebalance
				r, _ := h.syncMember("g", ids[0], gen+1, nil)
				return r.err
			}(), kerr.RebalanceInProgress)
		}},
		{"rebalance timeout removes who did not rejoin", func(t *testing.T, h *gtest) {
			ids, gen := h.stable("g", 2)
			c, cch := h.newMember(jp("g", ""))
			_, ach := h.c.join(jp("g", ids[0]))
			// The second heartbeats but does not rejoin.
			for range int(testRebalance/(testSession/2)) - 1 {
				h.clk.advance(testSession / 2)
				expectErr(t, "heartbeat", h.heartbeat("g", ids[1], gen), kerr.RebalanceInProgress)
			}
			waiting(t, cch)
			h.clk.advance(testSession / 2)
			ra, rc := ready(t, ach), ready(t, cch)
			if ra.generation != gen+1 || rc.generation != gen+1 || len(ra.members) != 2 || ra.members[1].memberID != c {
				t.Fatalf("after the timeout: %+v %+v", ra, rc)
			}
			expectErr(t, "removed member", h.heartbeat("g", ids[1], gen+1), kerr.UnknownMemberID)
		}},
		{"session timeout evicts", func(t *testing.T, h *gtest) {
			ids, gen := h.stable("g", 2)
			for range 3 {
				h.clk.advance(testSession / 2)
				expectErr(t, "heartbeat", h.heartbeat("g", ids[0], gen), nil)
				expectErr(t, "heartbeat", h.heartbeat("g", ids[1], gen), nil)
			}
			h.expectState("g", groupStable, gen)
			// The second stops heartbeating.
			h.clk.advance(testSession / 2)
			expectErr(t, "heartbeat", h.heartbeat("g", ids[0], gen), nil)
			h.clk.advance(testSession / 2)
			h.expectState("g", groupPreparingRebalance, gen)
			expectErr(t, "evicted heartbeat", h.heartbeat("g", ids[1], gen), kerr.UnknownMemberID)
			expectErr(t, "survivor heartbeat", h.heartbeat("g", ids[0], gen), kerr.RebalanceInProgress)
			r := h.join(jp("g", ids[0]))
			if r.err != nil || r.generation != gen+1 || len(r.members) != 1 {
				t.Fatalf("rejoin: %+v", r)
			}
			// A member waiting in its join is not evicted; one
			// that got its answer must heartbeat or sync.
			h.clk.advance(testSession)
			h.expectState("g", groupDead, 0)
			if h.clk.active() != 0 {
				t.Fatalf("%d timers left after the group went", h.clk.active())
			}
		}},
		{"join waits are kept alive", func(t *testing.T, h *gtest) {
			ids, gen := h.stable("g", 2)
			ch := h.joinWait(jp("g", ids[0]))
			for range 4 {
				h.clk.advance(testSession / 2)
				expectErr(t, "heartbeat", h.heartbeat("g", ids[1], gen), kerr.RebalanceInProgress)
			}
			waiting(t, ch)
			_, ch1 := h.c.join(jp("g", ids[1]))
			if r := ready(t, ch); r.err != nil || r.generation != gen+1 {
				t.Fatalf("join: %+v", r)
			}
			ready(t, ch1)
		}},
		{"leave", func(t *testing.T, h *gtest) {
			ids, gen := h.stable("g", 3)
			gerr, errs := h.c.leave("g", []leaveMember{{memberID: ids[2]}, {memberID: "nobody"}})
			if gerr != nil || errs[0] != nil || errs[1] != kerr.UnknownMemberID {
				t.Fatalf("leave: %v %v", gerr, errs)
			}
			h.expectState("g", groupPreparingRebalance, gen)
			// The leader leaves during the join: the next joined
			// member leads.
			_, ch1 := h.c.join(jp("g", ids[1]))
			waiting(t, ch1)
			h.c.leave("g", []leaveMember{{memberID: ids[0]}})
			r := ready(t, ch1)
			if r.err != nil || r.leader != ids[1] || r.generation != gen+1 || len(r.members) != 1 {
				t.Fatalf("after the leader left: %+v", r)
			}
			h.c.leave("g", []leaveMember{{memberID: ids[1]}})
			h.expectState("g", groupDead, 0)
			if gerr, errs := h.c.leave("g", []leaveMember{{memberID: ids[1]}}); gerr != nil || errs[0] != kerr.UnknownMemberID {
				t.Fatalf("leave of a gone group: %v %v", gerr, errs)
			}
		}},
		{"leave while completing answers the syncs", func(t *testing.T, h *gtest) {
			ids, gen := h.stable("g", 2)
			_, ch0 := h.c.join(jp("g", ids[0]))
			_, ch1 := h.c.join(jp("g", ids[1]))
			ready(t, ch0)
			ready(t, ch1)
			_, sch := h.syncMember("g", ids[1], gen+1, nil)
			h.c.leave("g", []leaveMember{{memberID: ids[0]}})
			expectErr(t, "waiting sync", ready(t, sch).err, kerr.RebalanceInProgress)
			h.expectState("g", groupPreparingRebalance, gen+1)
		}},
		{"pending sync timeout", func(t *testing.T, h *gtest) {
			ids, gen := h.stable("g", 2)
			_, ch0 := h.c.join(jp("g", ids[0]))
			_, ch1 := h.c.join(jp("g", ids[1]))
			ready(t, ch0)
			ready(t, ch1)
			// The follower syncs; the leader never does (it
			// heartbeats): the follower's sync ends with the
			// rebalance, the leader is removed.
			_, sch := h.syncMember("g", ids[1], gen+1, nil)
			for range int(testRebalance / (testSession / 2)) {
				h.clk.advance(testSession / 2)
				h.heartbeat("g", ids[0], gen+1)
			}
			expectErr(t, "follower sync", ready(t, sch).err, kerr.RebalanceInProgress)
			expectErr(t, "removed leader", h.heartbeat("g", ids[0], gen+1), kerr.UnknownMemberID)
			h.expectState("g", groupPreparingRebalance, gen+1)
			r := h.join(jp("g", ids[1]))
			if r.err != nil || r.leader != ids[1] || len(r.members) != 1 {
				t.Fatalf("rejoin: %+v", r)
			}
		}},
		{"pending member expires", func(t *testing.T, h *gtest) {
			r := h.join(jp("g", ""))
			h.clk.advance(testSession)
			h.expectState("g", groupDead, 0)
			expectErr(t, "late join", h.join(jp("g", r.memberID)).err, kerr.UnknownMemberID)
			// A pending member holds the join phase back until it
			// joins.
			ids, gen := h.stable("h", 1)
			pr := h.join(jp("h", ""))
			ch := h.joinWait(jp("h", ids[0]))
			h.expectState("h", groupPreparingRebalance, gen)
			_, pch := h.c.join(jp("h", pr.memberID))
			if r := ready(t, ch); len(r.members) != 2 {
				t.Fatalf("join: %+v", r)
			}
			ready(t, pch)
		}},
		{"protocol selection", func(t *testing.T, h *gtest) {
			a := h.join(withProtocols(jp("g", ""), "sticky", "range"))
			_, ach := h.c.join(withProtocols(jp("g", a.memberID), "sticky", "range"))
			if r := ready(t, ach); *r.protocol != "sticky" {
				t.Fatalf("one member: %+v", r)
			}
			b := h.join(withProtocols(jp("g", ""), "range", "sticky"))
			_, bch := h.c.join(withProtocols(jp("g", b.memberID), "range", "sticky"))
			_, ach = h.c.join(withProtocols(jp("g", a.memberID), "sticky", "range"))
			if r := ready(t, ach); *r.protocol != "sticky" { // a tie: the leader's preference
				t.Fatalf("tie: %+v", r)
			}
			ready(t, bch)
			c := h.join(withProtocols(jp("g", ""), "range"))
			_, cch := h.c.join(withProtocols(jp("g", c.memberID), "range"))
			_, ach = h.c.join(withProtocols(jp("g", a.memberID), "sticky", "range"))
			_, bch = h.c.join(withProtocols(jp("g", b.memberID), "range", "sticky"))
			for _, ch := range []<-chan joinResult{ach, bch, cch} {
				if r := ready(t, ch); r.err != nil || *r.protocol != "range" {
					t.Fatalf("only range is common: %+v", r)
				}
			}
			expectErr(t, "no common protocol", h.join(withProtocols(jp("g", ""), "roundrobin")).err, kerr.InconsistentGroupProtocol)
			other := jp("g", "")
			other.protocolType = "connect"
			expectErr(t, "another protocol type", h.join(other).err, kerr.InconsistentGroupProtocol)
			empty := jp("h", "")
			empty.protocolType = ""
			expectErr(t, "no protocol type", h.join(empty).err, kerr.InconsistentGroupProtocol)
			expectErr(t, "no protocols", h.join(withProtocols(jp("h", ""))).err, kerr.InconsistentGroupProtocol)
			h.expectState("h", groupDead, 0)
		}},
		{"static member rejoins without a rebalance", func(t *testing.T, h *gtest) {
			p1, p2 := static(jp("g", ""), "i1"), static(jp("g", ""), "i2")
			r1 := h.join(p1) // static members are not asked for an id
			if r1.err != nil || r1.memberID != "i1-1" || r1.generation != 1 {
				t.Fatalf("static join: %+v", r1)
			}
			r, ch2 := h.c.join(p2)
			if ch2 == nil {
				t.Fatalf("second static join: %v", r.err)
			}
			_, ch1 := h.c.join(static(jp("g", r1.memberID), "i1"))
			r1, r2 := ready(t, ch1), ready(t, ch2)
			gen := r1.generation
			_, s2 := h.syncMember("g", r2.memberID, gen, nil)
			h.syncMember("g", r1.memberID, gen, map[string][]byte{r1.memberID: consumerAssignment("t", 0), r2.memberID: consumerAssignment("t", 1)})
			ready(t, s2)
			h.expectState("g", groupStable, gen)

			// i2 restarts: a new id, no rebalance, its assignment.
			r = h.join(p2)
			if r.err != nil || r.memberID == r2.memberID || r.generation != gen || r.leader != r1.memberID || len(r.members) != 0 || r.skipAssignment {
				t.Fatalf("static rejoin: %+v", r)
			}
			h.expectState("g", groupStable, gen)
			if sr, _ := h.syncMember("g", r.memberID, gen, nil); sr.err != nil || string(sr.assignment) != string(consumerAssignment("t", 1)) {
				t.Fatalf("sync after the rejoin: %+v", sr)
			}
			expectErr(t, "old id", h.c.heartbeat("g", r2.memberID, static(jp("", ""), "i2").instanceID, gen), kerr.FencedInstanceID)
			expectErr(t, "unknown instance", h.c.heartbeat("g", r.memberID, static(jp("", ""), "i9").instanceID, gen), kerr.UnknownMemberID)

			// The leader restarts: v9 skips the assignment, older
			// versions are told the old leader id.
			lr := h.join(p1)
			if lr.err != nil || lr.leader != lr.memberID || !lr.skipAssignment || len(lr.members) != 2 || lr.generation != gen {
				t.Fatalf("static leader rejoin v9: %+v", lr)
			}
			old := p1
			old.skipAssignment = false
			lr2 := h.join(old)
			if lr2.err != nil || lr2.leader != lr.memberID || lr2.skipAssignment || len(lr2.members) != 0 {
				t.Fatalf("static leader rejoin v8: %+v", lr2)
			}
			h.expectState("g", groupStable, gen)

			// New metadata keeping the selected protocol: no
			// rebalance either (cooperative members restart with
			// other owned partitions).
			p2.protocols[0].metadata = consumerMeta("t", "u")
			if r := h.join(p2); r.err != nil || r.generation != gen {
				t.Fatalf("static rejoin with new metadata: %+v", r)
			}
			h.expectState("g", groupStable, gen)
		}},
		{"static rejoin changing the protocol rebalances", func(t *testing.T, h *gtest) {
			p := withProtocols(static(jp("g", ""), "i1"), "range", "sticky")
			r := h.join(p)
			h.syncMember("g", r.memberID, r.generation, nil)
			h.expectState("g", groupStable, 1)
			if r := h.join(withProtocols(p, "range", "sticky")); r.err != nil || r.generation != 1 {
				t.Fatalf("same protocols: %+v", r)
			}
			// Alone, it completes the join phase at once.
			if r := h.join(withProtocols(p, "sticky", "range")); r.err != nil || r.generation != 2 || *r.protocol != "sticky" {
				t.Fatalf("new protocol: %+v", r)
			}
		}},
		{"static members leave by instance id", func(t *testing.T, h *gtest) {
			r := h.join(static(jp("g", ""), "i1"))
			in := "i1"
			if gerr, errs := h.c.leave("g", []leaveMember{{memberID: "wrong", instanceID: &in}}); gerr != nil || errs[0] != kerr.FencedInstanceID {
				t.Fatalf("fenced leave: %v", errs)
			}
			if _, errs := h.c.leave("g", []leaveMember{{instanceID: &in}}); errs[0] != nil {
				t.Fatalf("leave by instance: %v", errs)
			}
			_ = r
			h.expectState("g", groupDead, 0)
		}},
		{"static members are kept through a rebalance", func(t *testing.T, h *gtest) {
			r1 := h.join(static(jp("g", ""), "i1"))
			d, dch := h.newMember(jp("g", ""))
			_, ch1 := h.c.join(static(jp("g", r1.memberID), "i1"))
			ready(t, ch1)
			ready(t, dch)
			// d rejoins with new metadata; i1 does not: at the
			// rebalance timeout the group goes on with both (i1's
			// session is refreshed by heartbeats).
			p := jp("g", d)
			p.protocols[0].metadata = consumerMeta("u")
			ch := h.joinWait(p)
			for range int(testRebalance / (testSession / 2)) {
				h.clk.advance(testSession / 2)
				h.c.heartbeat("g", r1.memberID, static(jp("", ""), "i1").instanceID, 2)
			}
			if r := ready(t, ch); r.err != nil || len(r.members) != 2 || r.leader != d {
				t.Fatalf("join: %+v", r)
			}
		}},
		{"commit validation", func(t *testing.T, h *gtest) {
			expectErr(t, "simple commit", h.c.validateCommit("g", "", nil, -1), nil)
			expectErr(t, "generation commit to no group", h.c.validateCommit("g", "m", nil, 1), kerr.IllegalGeneration)
			ids, gen := h.stable("g", 2)
			expectErr(t, "member commit", h.c.validateCommit("g", ids[1], nil, gen), nil)
			expectErr(t, "old generation", h.c.validateCommit("g", ids[1], nil, gen-1), kerr.IllegalGeneration)
			expectErr(t, "unknown member", h.c.validateCommit("g", "x", nil, gen), kerr.UnknownMemberID)
			expectErr(t, "simple commit to a group with members", h.c.validateCommit("g", "", nil, -1), kerr.UnknownMemberID)
			_, ch := h.c.join(jp("g", ids[0]))
			expectErr(t, "commit while preparing", h.c.validateCommit("g", ids[1], nil, gen), nil)
			_, ch1 := h.c.join(jp("g", ids[1]))
			ready(t, ch)
			ready(t, ch1)
			expectErr(t, "commit while completing", h.c.validateCommit("g", ids[1], nil, gen+1), kerr.RebalanceInProgress)
			// A group with pending members only is Empty.
			h.join(jp("p", ""))
			expectErr(t, "simple commit, pending members", h.c.validateCommit("p", "", nil, -1), nil)
		}},
		{"limits", func(t *testing.T, h *gtest) {
			h.c.cfg.MaxMembers, h.c.cfg.MaxGroups = 2, 2
			h.stable("g", 2)
			expectErr(t, "third member", h.join(jp("g", "")).err, kerr.GroupMaxSizeReached)
			h.join(jp("h", ""))
			expectErr(t, "third group", h.join(jp("i", "")).err, kerr.CoordinatorNotAvailable)
			p := jp("g", "")
			p.sessionTimeout = time.Millisecond
			expectErr(t, "short session", h.join(p).err, kerr.InvalidSessionTimeout)
			p.sessionTimeout = time.Hour
			expectErr(t, "long session", h.join(p).err, kerr.InvalidSessionTimeout)
			expectErr(t, "no group id", h.join(jp("", "")).err, kerr.InvalidGroupID)
			p = jp("g", "")
			p.protocols[0].metadata = make([]byte, maxMemberMetadata+1)
			expectErr(t, "huge metadata", h.join(p).err, kerr.InvalidRequest)
		}},
		{"reset answers the waiters", func(t *testing.T, h *gtest) {
			ids, _ := h.stable("g", 2)
			ch := h.joinWait(jp("g", ids[0]))
			h.c.reset()
			expectErr(t, "waiting join", ready(t, ch).err, kerr.NotCoordinator)
			h.expectState("g", groupDead, 0)
			if h.clk.active() != 0 {
				t.Fatalf("%d timers left", h.clk.active())
			}
			expectErr(t, "heartbeat after the reset", h.heartbeat("g", ids[1], 1), kerr.UnknownMemberID)
		}},
		{"delete", func(t *testing.T, h *gtest) {
			h.stable("g", 1)
			if found, err := h.c.deleteGroup("g"); !found || err != kerr.NonEmptyGroup {
				t.Fatalf("delete with members: %v %v", found, err)
			}
			h.join(jp("p", "")) // pending only
			if found, err := h.c.deleteGroup("p"); !found || err != nil {
				t.Fatalf("delete with a pending member: %v %v", found, err)
			}
			if found, _ := h.c.deleteGroup("none"); found {
				t.Fatal("found a group never made")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newGTest(t, GroupConfig{})) })
	}
}
