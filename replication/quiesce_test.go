package replication

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func quiesceTimings(g *tgroup) {
	g.quiesce = &QuiescerConfig{Tick: 50 * time.Millisecond, Dead: 600 * time.Millisecond}
}

// quiesced waits until every running follower of ld follows quiesced.
func (g *tgroup) quiesced(ld *tnode) {
	g.t.Helper()
	for _, nd := range g.others(ld) {
		if !nd.up {
			continue
		}
		waitFor(g.t, nd.name+" to quiesce", 20*time.Second, func() bool { return nd.q.Quiesced() == 1 })
	}
	// The leader answers for them once it has heard.
	n := ld.rep.quiesce.answered.Load()
	waitFor(g.t, ld.name+" to answer for its followers", 20*time.Second, func() bool {
		return ld.rep.quiesce.answered.Load() > n+10
	})
}

// quiescedGroup starts a group of 3 with quiescence, writes 5 batches
// and waits until its followers quiesce.
func quiescedGroup(t *testing.T) (*tgroup, acked, *tnode) {
	g := newTestGroup(t, 3, quiesceTimings)
	a := acked{}
	ld := g.leader()
	g.produce(ld, a, 0, 5)
	g.quiesced(ld)
	return g, a, ld
}

func TestQuiescedGroupSendsNothingAndWakesOnWrite(t *testing.T) {
	g, a, ld := quiescedGroup(t)

	// While quiesced, the followers are sent nothing: the leader answers
	// every heartbeat and empty append for them.
	fs := g.others(ld)
	before := []uint64{fs[0].rep.quiesce.servedN.Load(), fs[1].rep.quiesce.servedN.Load()}
	n := ld.rep.quiesce.answered.Load()
	waitFor(t, "100 answers on the followers' behalf", 20*time.Second, func() bool {
		return ld.rep.quiesce.answered.Load() > n+100
	})
	for i, f := range fs {
		if got := f.rep.quiesce.servedN.Load(); got != before[i] {
			t.Fatalf("%s served %d requests while quiesced", f.name, got-before[i])
		}
	}
	if ld.q.Quiesced() != 0 {
		t.Fatalf("the leader counts itself quiesced")
	}

	// A write wakes the group, reaches everyone, and the group quiesces
	// again.
	g.produce(ld, a, 5, 5)
	g.checkConverged(a)
	g.quiesced(g.leader())
}

func TestQuiescedGroupElectsWhenTheLeaderCrashes(t *testing.T) {
	g, a, ld := quiescedGroup(t)

	start := time.Now()
	g.kill(ld)
	// The quiesced followers' timeouts are an hour: only the end of the
	// leader node's link can elect a new leader.
	nl := g.leader(g.others(ld)...)
	t.Logf("%s leads %v after the crash", nl.name, time.Since(start))
	g.produce(nl, a, 5, 5)
	g.start(ld)
	g.checkConverged(a)
	g.quiesced(g.leader())
}

func TestQuiescedGroupElectsWhenTheLeaderFallsSilent(t *testing.T) {
	g, a, ld := quiescedGroup(t)

	// Writes from the leader's node take seconds: its links fall silent
	// without ending, as a paused process's would.
	for _, f := range g.others(ld) {
		g.net.SetDelay(ld.addr, f.addr, 3*time.Second)
	}
	nl := g.leader(g.others(ld)...)
	g.produce(nl, a, 5, 5)
	g.net.Heal()
	g.checkConverged(a)
}

func TestQuiescedLeaderCutOffAcknowledgesNothing(t *testing.T) {
	g, a, ld := quiescedGroup(t)

	g.net.Isolate(ld.addr, g.addrs())
	// The old leader may still think it leads: it must not acknowledge.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	off, err := ld.rep.Append(ctx, testBatch(1000, 100), AcksAll)
	cancel()
	if err == nil {
		t.Fatalf("a leader cut off from both followers acknowledged a write at offset %d", off)
	}
	nl := g.leader(g.others(ld)...)
	g.produce(nl, a, 5, 5)
	g.net.Heal()
	g.checkConverged(a)
	g.quiesced(g.leader())
}

func TestQuiescedFollowerRestarts(t *testing.T) {
	g, a, ld := quiescedGroup(t)

	f := g.others(ld)[0]
	g.stop(f)
	g.start(f)
	// The restarted follower is not quiesced: the leader must send to it
	// again, heartbeats included, before any write (answered for, it
	// would hear of no leader until one).
	waitFor(t, f.name+" to hear from its leader again", 20*time.Second, func() bool {
		id, _ := f.rep.Leader()
		return id == ld.rep.ServerID()
	})
	g.produce(ld, a, 5, 5)
	g.checkConverged(a)
	if !ld.rep.IsLeader() {
		t.Fatalf("%s lost the leadership over a follower's restart", ld.name)
	}
	g.quiesced(ld)
}

// TestFollowersHoldElectionsWhileTheLeadersNodeLives: followers that stop
// hearing their leader while its node's link lives (starved, not dead)
// campaign, but every pre-vote is held, so the leader keeps its term and
// its leadership; when the leader's node goes, they elect.
func TestFollowersHoldElectionsWhileTheLeadersNodeLives(t *testing.T) {
	g, a, ld := quiescedGroup(t)
	term := ld.rep.Term()
	fs := g.others(ld)
	// Wake the followers behind the leader's back: it keeps answering for
	// them, so they hear nothing from it and time out.
	for _, f := range fs {
		if err := f.rep.raft.ReloadConfig(f.rep.quiesce.awake); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the followers to campaign and be held", 20*time.Second, func() bool {
		return fs[0].rep.guard.held.Load() >= 2 && fs[1].rep.guard.held.Load() >= 2
	})
	if !ld.rep.IsLeader() || ld.rep.Term() != term {
		t.Fatalf("%s: leader %v in term %d, was leader in term %d", ld.name, ld.rep.IsLeader(), ld.rep.Term(), term)
	}
	for _, f := range fs {
		if f.rep.Term() != term {
			t.Fatalf("%s moved to term %d from %d while the leader's node lived", f.name, f.rep.Term(), term)
		}
	}
	g.kill(ld)
	nl := g.leader(fs...)
	g.produce(nl, a, 5, 5)
	g.start(ld)
	g.checkConverged(a)
}

// TestLeaderAnswersHeartbeatsWhileFollowerNodesLive: a heartbeat to a
// follower whose node's link is alive is answered by the leader's
// transport (its lease holds while the follower is slow), and is still
// delivered; appends are not; without the link nothing is answered.
func TestLeaderAnswersHeartbeatsWhileFollowerNodesLive(t *testing.T) {
	g := newTestGroup(t, 3, quiesceTimings)
	ld := g.leader()
	f := g.others(ld)[0]
	target := raft.ServerAddress(f.addr)
	waitFor(t, "the link from "+f.name, 20*time.Second, func() bool { return ld.q.peer(target) != nil })
	hb := &raft.AppendEntriesRequest{Term: ld.rep.Term(), RPCHeader: raft.RPCHeader{Addr: []byte(ld.addr)}}
	var resp raft.AppendEntriesResponse
	if !ld.rep.quiesce.answerHeartbeat(raft.ServerID(f.rep.ServerID()), target, hb, &resp) || !resp.Success || resp.Term != hb.Term {
		t.Fatalf("a heartbeat to a live node was not answered: %+v", resp)
	}
	// Raft's own heartbeats, answered here, still reach the follower
	// (kept awake by writes: quiesced, it is sent none).
	// Raft's own heartbeats to it are answered by the leader's transport.
	beats, answered, a, n := f.rep.quiesce.beatsN.Load(), ld.rep.quiesce.beatsAnswered.Load(), acked{}, 0
	waitFor(t, "heartbeats answered and still delivered", 20*time.Second, func() bool {
		g.produce(ld, a, n, 1)
		n++
		return f.rep.quiesce.beatsN.Load() > beats+10 && ld.rep.quiesce.beatsAnswered.Load() > answered+10
	})
	app := &raft.AppendEntriesRequest{Term: hb.Term, PrevLogEntry: 1, PrevLogTerm: 1, LeaderCommitIndex: 1}
	if ld.rep.quiesce.answerHeartbeat(raft.ServerID(f.rep.ServerID()), target, app, &resp) {
		t.Fatal("an append was answered on the follower's behalf")
	}
	if ld.rep.quiesce.answerHeartbeat(raft.ServerID(f.rep.ServerID()), "127.0.0.1:1", hb, &resp) {
		t.Fatal("a heartbeat to a node without a link was answered")
	}
}

// TestLeadersNodeDeathElectsInOneTerm: when the leader's node dies, one
// follower campaigns at once, as on a leadership transfer, and the other
// votes for it rather than campaign against it: the group elects in the
// next term, whether its followers were quiesced or awake (here woken
// behind the quiescence's back, so that they time out and are held).
func TestLeadersNodeDeathElectsInOneTerm(t *testing.T) {
	for _, awake := range []bool{false, true} {
		t.Run(fmt.Sprintf("awake=%v", awake), func(t *testing.T) {
			g, a, ld := quiescedGroup(t)
			fs := g.others(ld)
			if awake {
				for _, f := range fs {
					if err := f.rep.raft.ReloadConfig(f.rep.quiesce.awake); err != nil {
						t.Fatal(err)
					}
				}
				waitFor(t, "the followers to campaign and be held", 20*time.Second, func() bool {
					return fs[0].rep.guard.held.Load() >= 2 && fs[1].rep.guard.held.Load() >= 2
				})
			}
			term := ld.rep.Term()
			g.kill(ld)
			nl := g.leader(fs...)
			if got := nl.rep.Term(); got != term+1 {
				t.Fatalf("%s leads in term %d, the dead leader's was %d", nl.name, got, term)
			}
			for _, f := range fs {
				got, want := f.rep.quiesce.takeovers.Load(), uint64(0)
				if f == nl {
					want = 1
					if awake && got == 0 {
						// Campaigning already, it was not told: its own
						// next round stood in for the takeover.
						want = 0
					}
				}
				if got != want {
					t.Fatalf("%s took over %d times, want %d (%s leads)", f.name, got, want, nl.name)
				}
				// What keeps a later turn from deposing the winner.
				if v := f.rep.votedFor(); v != nl.rep.Address() {
					t.Fatalf("%s voted for %q in term %d, want %q", f.name, v, f.rep.Term(), nl.rep.Address())
				}
				// The takeover's TimeoutNow, made in the dead leader's
				// name, is no sign of its life.
				waitFor(t, f.name+" to take the dead "+ld.name+" for gone", 10*time.Second, func() bool { return f.q.isGone(raft.ServerAddress(ld.addr)) })
			}
			g.produce(nl, a, 5, 5)
			g.start(ld)
			g.checkConverged(a)
		})
	}
}

// TestTakeoverPassesTheTurn: when the voter whose turn it is to take over
// from a dead leader cannot campaign (here its campaign fails, as a gated
// replica's does), it passes the turn to the next voter, which campaigns
// at once and wins, well before the election timeouts of Raft would
// (raised out of reach here).
func TestTakeoverPassesTheTurn(t *testing.T) {
	for _, awake := range []bool{false, true} {
		t.Run(fmt.Sprintf("awake=%v", awake), func(t *testing.T) {
			var g *tgroup
			var a acked
			var ld *tnode
			if awake {
				// Followers that just took a write: awake, their own
				// timeouts running (held to their turn by the takeover).
				g, a = newTestGroup(t, 3, quiesceTimings), acked{}
				ld = g.leader()
				g.produce(ld, a, 0, 5)
			} else {
				g, a, ld = quiescedGroup(t)
			}
			fs := g.others(ld)
			first, next := fs[0], fs[1]
			if takeoverRank(testGroup, raft.ServerID(next.rep.ServerID())) < takeoverRank(testGroup, raft.ServerID(first.rep.ServerID())) {
				first, next = next, first
			}
			fq := first.rep.quiesce
			fq.mu.Lock()
			fq.takeover = func(raft.ServerAddress) error { return errors.New("test: this campaign fails") }
			// Nor does it campaign on its own timeouts, awake or woken.
			fq.awake.HeartbeatTimeout, fq.awake.ElectionTimeout = time.Hour, time.Hour
			fq.mu.Unlock()
			if awake {
				if err := first.rep.raft.ReloadConfig(fq.reloadable(time.Hour)); err != nil {
					t.Fatal(err)
				}
			}
			g.kill(ld)
			// The first voter's node is seen campaigning for other groups
			// meanwhile, so the next voter never takes its own turn: only
			// the pass can make it campaign (a loaded machine may be slow
			// to notice the leader's death on the first voter's side).
			firstAddr := raft.ServerAddress(first.addr)
			var nl *tnode
			waitFor(t, "a leader", 20*time.Second, func() bool {
				next.q.noteCampaign(firstAddr)
				for _, f := range fs {
					if f.rep.IsLeader() {
						nl = f
					}
				}
				return nl != nil
			})
			if nl != next {
				t.Fatalf("%s leads, want %s (the next in turn)", nl.name, next.name)
			}
			if p, n := fq.passes.Load(), next.rep.quiesce.takeovers.Load(); p != 1 || n != 0 {
				t.Fatalf("%s passed the turn %d times and %s took over on its own %d times, want 1 and 0", first.name, p, next.name, n)
			}
			g.produce(nl, a, 5, 5)
			g.start(ld)
			g.checkConverged(a)
		})
	}
}

// TestTakeoverTurnKeptWhileQueued: the voter whose turn it is keeps it
// while it waits for a campaign slot and its node is seen campaigning
// for other groups (a node electing thousands of groups works through
// them): the next voter does not campaign against it past its turn, and
// the group elects the first voter, in the next term, once it has a
// slot.
func TestTakeoverTurnKeptWhileQueued(t *testing.T) {
	g, a, ld := quiescedGroup(t)
	fs := g.others(ld)
	first, next := fs[0], fs[1]
	if takeoverRank(testGroup, raft.ServerID(next.rep.ServerID())) < takeoverRank(testGroup, raft.ServerID(first.rep.ServerID())) {
		first, next = next, first
	}
	// Every campaign slot of the first voter's node taken.
	slots := first.q.campaigns
	for range cap(slots) {
		slots <- struct{}{}
	}
	term := ld.rep.Term()
	g.kill(ld)
	// Its node's campaigns for other groups keep reaching the next voter's
	// node, for two turns and more.
	firstAddr := raft.ServerAddress(first.addr)
	for end := time.Now().Add(2*takeoverTurn + time.Second); time.Now().Before(end); {
		next.q.noteCampaign(firstAddr)
		if next.rep.raft.State() != raft.Follower || next.rep.quiesce.takeovers.Load() != 0 {
			t.Fatalf("%s campaigned (state %v) while %s held the turn", next.name, next.rep.raft.State(), first.name)
		}
		if first.rep.raft.State() != raft.Follower {
			t.Fatalf("%s campaigned (state %v) without a slot", first.name, first.rep.raft.State())
		}
		time.Sleep(100 * time.Millisecond) // a polled property over time, not a synchronisation
	}
	for range cap(slots) {
		<-slots
	}
	nl := g.leader(fs...)
	if nl != first || nl.rep.Term() != term+1 {
		t.Fatalf("%s leads in term %d, want %s in term %d", nl.name, nl.rep.Term(), first.name, term+1)
	}
	g.produce(nl, a, 5, 5)
	g.start(ld)
	g.checkConverged(a)
}

// TestLinkOutlivesSessions: a quiescence link has a connection of its
// own, so the sessions between the nodes closing (as the keep-alive
// closes one whose peer is slow to answer) does not end it: no node is
// taken for gone for it.
func TestLinkOutlivesSessions(t *testing.T) {
	g, a, ld := quiescedGroup(t)
	peerOf := func(nd *tnode, addr string) *peerIn {
		nd.q.mu.RLock()
		defer nd.q.mu.RUnlock()
		return nd.q.peers[raft.ServerAddress(addr)]
	}
	before := map[*tnode]*peerIn{}
	for _, f := range g.others(ld) {
		before[f] = peerOf(f, ld.addr)
		if before[f] == nil {
			t.Fatalf("%s has no link from %s", f.name, ld.name)
		}
	}
	for _, nd := range g.nodes {
		nd.mux.mu.Lock()
		var ss []*dialedSession
		for _, s := range nd.mux.sessions {
			ss = append(ss, s)
		}
		nd.mux.mu.Unlock()
		for _, s := range ss {
			s.Close()
		}
	}
	g.produce(ld, a, 5, 5) // on new sessions
	for f, p := range before {
		if now := peerOf(f, ld.addr); now != p {
			t.Fatalf("the link from %s to %s ended with the sessions", ld.name, f.name)
		}
	}
	g.checkConverged(a)
}

// TestGoneNodeHeardFrom: a peer taken for gone (here marked so while its
// link lives) is alive again as soon as a request comes from it.
func TestGoneNodeHeardFrom(t *testing.T) {
	g, a, ld := quiescedGroup(t)
	f := g.others(ld)[0]
	addr := raft.ServerAddress(ld.addr)
	f.q.gone.Store(addr, struct{}{})
	if !f.q.isGone(addr) {
		t.Fatal("not gone")
	}
	g.produce(ld, a, 5, 5) // appends from the leader's node
	waitFor(t, ld.name+" alive again on "+f.name, 10*time.Second, func() bool { return !f.q.isGone(addr) })
	g.checkConverged(a)
}

// TestTakeoverSparesARevivedLeader: followers that took their leader's
// node for gone and queued to take over (no campaign slot free) do not
// campaign once a request from that node shows it alive: the group keeps
// its leader and its term.
func TestTakeoverSparesARevivedLeader(t *testing.T) {
	g, a, ld := quiescedGroup(t)
	fs := g.others(ld)
	addr := raft.ServerAddress(ld.addr)
	term := ld.rep.Term()
	for _, f := range fs {
		f.q.gone.Store(addr, struct{}{})
		for range cap(f.q.campaigns) {
			f.q.campaigns <- struct{}{}
		}
	}
	for _, f := range fs {
		go f.rep.quiesce.leaderGone(addr, "test: taken for gone")
	}
	failingOver := func(f *tnode) bool {
		f.rep.quiesce.mu.Lock()
		defer f.rep.quiesce.mu.Unlock()
		return f.rep.quiesce.failingOver
	}
	for _, f := range fs {
		waitFor(t, f.name+" to queue its takeover", 10*time.Second, func() bool { return failingOver(f) })
	}
	g.produce(ld, a, 5, 5) // requests from the leader's node
	for _, f := range fs {
		waitFor(t, ld.name+" alive again on "+f.name, 10*time.Second, func() bool { return !f.q.isGone(addr) })
		for range cap(f.q.campaigns) {
			<-f.q.campaigns
		}
	}
	for _, f := range fs {
		waitFor(t, f.name+"'s takeover to end", 20*time.Second, func() bool { return !failingOver(f) })
		if n := f.rep.quiesce.takeovers.Load(); n != 0 {
			t.Fatalf("%s campaigned %d times against a live leader", f.name, n)
		}
	}
	if !ld.rep.IsLeader() || ld.rep.Term() != term {
		t.Fatalf("%s leads %v in term %d, want the same leader in term %d", ld.name, ld.rep.IsLeader(), ld.rep.Term(), term)
	}
	g.produce(ld, a, 10, 5)
	g.checkConverged(a)
}

// TestLinkComesBackAfterSilence: a reader that finds its link silent for
// Dead (its own process starved, or the sender's) drops it; the sender
// must notice and link again, so that the reader takes its node for alive
// again and lets votes to it through.
func TestLinkComesBackAfterSilence(t *testing.T) {
	// A closed stream is reset long after the wait below: only the
	// sender's noticing the close can bring the link back in time.
	g := newTestGroup(t, 3, quiesceTimings, func(g *tgroup) {
		g.muxOpts = append(g.muxOpts, func(m *Mux) { m.closeTimeout = time.Hour })
	})
	ld := g.leader()
	g.produce(ld, acked{}, 0, 5)
	g.quiesced(ld)
	f := g.others(ld)[0]
	peer := raft.ServerAddress(ld.addr)

	// What readLink does when its read deadline passes, without the
	// sender's writes meeting any delay.
	f.q.mu.RLock()
	p := f.q.peers[peer]
	f.q.mu.RUnlock()
	if p == nil {
		t.Fatalf("%s has no link from %s", f.name, ld.name)
	}
	p.conn.Close()
	waitFor(t, f.name+" to hear "+ld.name+" link again", 30*time.Second, func() bool {
		return !f.q.isGone(peer) && f.q.peer(peer) != nil && f.q.peer(peer) != p
	})
}

// TestLeaderQuietWithAFollowersNodeGone: a leader whose followers are
// quiesced or on a node taken for gone raises its timeouts as one whose
// followers are all quiesced does (it heartbeat its live followers two
// and a half times as often before).
func TestLeaderQuietWithAFollowersNodeGone(t *testing.T) {
	g, a, ld := quiescedGroup(t)
	f := g.others(ld)[0]
	g.kill(f)
	waitFor(t, ld.name+" to take "+f.name+" for gone", 20*time.Second, func() bool {
		return ld.q.isGone(raft.ServerAddress(f.addr))
	})
	// A write wakes the group; the follower left quiesces again.
	g.produce(ld, a, 5, 1)
	quiet := func() bool {
		ld.rep.quiesce.mu.Lock()
		defer ld.rep.quiesce.mu.Unlock()
		return ld.rep.quiesce.leaderQuiet
	}
	waitFor(t, ld.name+" to go quiet", 20*time.Second, quiet)
	if !ld.rep.IsLeader() {
		t.Fatalf("%s lost the leadership", ld.name)
	}
	g.start(f)
	g.checkConverged(a)
}

// TestNoAppendToAGoneNode: an append to a follower whose node is taken
// for gone is refused by the leader's transport, as a vote is, rather
// than dialed; the node here is alive, so only the refusal fails it.
func TestNoAppendToAGoneNode(t *testing.T) {
	g, a, ld := quiescedGroup(t)
	f := g.others(ld)[0]
	addr := raft.ServerAddress(f.addr)
	at := ld.rep.guard.Transport.(*appendTransport)
	req := &raft.AppendEntriesRequest{
		RPCHeader: ld.rep.guard.header(),
		Term:      ld.rep.Term(), PrevLogEntry: 1, PrevLogTerm: 1, // not a heartbeat, nothing quiescence answers
	}
	ld.q.gone.Store(addr, struct{}{})
	var resp raft.AppendEntriesResponse
	if err := at.AppendEntries(raft.ServerID(f.rep.ServerID()), addr, req, &resp); !errors.Is(err, errPeerGone) {
		t.Fatalf("an append to a node taken for gone: %v, want %v", err, errPeerGone)
	}
	ld.q.gone.Delete(addr)
	g.produce(ld, a, 5, 5)
	g.checkConverged(a)
}
