package replication

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/log/vfs"
)

// noLeaderFor asserts that none of nodes becomes leader during d: a thing
// that must never happen, watched for a bounded time.
func noLeaderFor(t *testing.T, d time.Duration, nodes ...*tnode) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for _, nd := range nodes {
			if nd.up && nd.rep.IsLeader() {
				t.Fatalf("%s was elected leader", nd.name)
			}
		}
		time.Sleep(20 * time.Millisecond) // sampling during the window
	}
}

func flushAll(t *testing.T, g *tgroup) {
	t.Helper()
	for _, nd := range g.nodes {
		if nd.up {
			if err := nd.rep.Log().Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// holds reports whether r's log holds batch b at its offset.
func holds(t *testing.T, r *Replica, b []byte) bool {
	t.Helper()
	got, err := r.Log().ReadBatch(log.Batch(b).BaseOffset())
	return err == nil && bytes.Equal(got, b)
}

// TestPowerLossVoteGuard runs the sequence of docs/durability.md with 3
// replicas: A (leader) and B hold a committed entry e, C does not; B loses
// power and with it e; A is cut off; B and C could elect a leader without
// e. With the guard, B refuses to vote until it has caught up, no leader is
// elected without A, and e survives. Without it, e is lost: the test shows
// both.
func TestPowerLossVoteGuard(t *testing.T) {
	for _, guard := range []bool{true, false} {
		name := map[bool]string{true: "guard", false: "no-guard-loses-the-entry"}[guard]
		t.Run(name, func(t *testing.T) {
			g := newTestGroup(t, 3, func(g *tgroup) { g.noGuard = !guard })
			a := acked{}
			A := g.leader()
			g.produce(A, a, 0, 10)
			g.checkConverged(a)
			flushAll(t, g)
			var B, C *tnode
			for _, nd := range g.nodes {
				if nd != A {
					if B == nil {
						B = nd
					} else {
						C = nd
					}
				}
			}
			// e is committed on A and B only.
			g.net.Partition([]string{C.addr}, []string{A.addr, B.addr})
			eAcked := acked{}
			g.produce(A, eAcked, 10, 1)
			var e []byte
			for _, b := range eAcked {
				e = b
			}
			waitFor(t, "B to hold e", 10*time.Second, func() bool { return holds(t, B.rep, e) })
			// B loses power: e was never fsynced there.
			g.powerLoss(B, vfs.CrashOptions{})
			g.net.Heal()
			g.net.Partition([]string{A.addr}, []string{B.addr, C.addr})
			g.start(B)
			if holds(t, B.rep, e) {
				t.Fatal("test setup: B still holds e after the power loss")
			}
			if !guard {
				nl := g.leader(B, C)
				g.produce(nl, acked{}, 20, 3)
				g.net.Heal()
				waitFor(t, "A to follow the new leader", 20*time.Second, func() bool {
					ld := g.leader()
					return ld != A && A.rep.Log().EndOffset() == ld.rep.Log().EndOffset()
				})
				if holds(t, g.leader().rep, e) || holds(t, A.rep, e) {
					t.Fatal("without the guard the acknowledged entry was expected to be lost, and it was not")
				}
				return
			}
			if !B.rep.Gated() {
				t.Fatal("B restarted after a power loss and is not gated")
			}
			noLeaderFor(t, 3*time.Second, B, C)
			g.net.Heal()
			for k, v := range eAcked {
				a[k] = v
			}
			g.produceTo(a, 20, 5)
			waitFor(t, "B to be released by its rejoin marker", 20*time.Second, func() bool { return !B.rep.Gated() })
			g.checkConverged(a)
			if !holds(t, B.rep, e) {
				t.Fatal("B does not hold e after catching up")
			}
		})
	}
}

// TestPowerLossTwoOfFive: with five replicas, two that held a committed
// entry lose power while the leader that also held it is cut off; the
// other three (two of them gated) elect no leader until the leader is
// back, and nothing acknowledged is lost.
func TestPowerLossTwoOfFive(t *testing.T) {
	g := newTestGroup(t, 5)
	a := acked{}
	A := g.leader()
	g.produce(A, a, 0, 10)
	g.checkConverged(a)
	flushAll(t, g)
	rest := others(g.nodes, []*tnode{A})
	B, C, D, E := rest[0], rest[1], rest[2], rest[3]
	g.net.Partition([]string{D.addr, E.addr}, []string{A.addr, B.addr, C.addr})
	g.produce(A, a, 10, 3)
	for _, nd := range []*tnode{B, C} {
		nd := nd
		waitFor(t, nd.name+" to hold the new entries", 10*time.Second, func() bool { return nd.rep.Log().EndOffset() == A.rep.Log().EndOffset() })
	}
	g.powerLoss(B, vfs.CrashOptions{})
	g.powerLoss(C, vfs.CrashOptions{})
	g.net.Heal()
	g.net.Isolate(A.addr, g.addrs())
	g.start(B)
	g.start(C)
	if !B.rep.Gated() || !C.rep.Gated() {
		t.Fatal("replicas restarted after a power loss are not gated")
	}
	noLeaderFor(t, 3*time.Second, B, C, D, E)
	g.net.Heal()
	g.produceTo(a, 20, 5)
	waitFor(t, "B and C to be released", 20*time.Second, func() bool { return !B.rep.Gated() && !C.rep.Gated() })
	g.checkConverged(a)
}

// TestAllVotersLostPower: every replica loses power at once. All come back
// gated; when all are reachable they elect the most complete log among
// them, and what it holds is kept.
func TestAllVotersLostPower(t *testing.T) {
	g := newTestGroup(t, 3)
	a := acked{}
	A := g.leader()
	g.produce(A, a, 0, 10)
	g.checkConverged(a)
	// One replica happens to have fsynced everything so far (flush.ms);
	// the others only what the configuration forced.
	best := g.nodes[1]
	if err := best.rep.Log().Flush(); err != nil {
		t.Fatal(err)
	}
	durable := best.rep.Log().EndOffset()
	g.produce(A, acked{}, 10, 5) // acknowledged, fsynced nowhere: the bound
	for _, nd := range g.nodes {
		g.powerLoss(nd, vfs.CrashOptions{})
	}
	for _, nd := range g.nodes {
		g.start(nd)
	}
	for _, nd := range g.nodes {
		if !nd.rep.Gated() {
			t.Fatalf("%s not gated after the power loss", nd.name)
		}
	}
	ld := g.leader()
	if ld != best {
		t.Fatalf("%s was elected, the most complete log is %s's", ld.name, best.name)
	}
	for _, nd := range g.nodes {
		nd := nd
		waitFor(t, nd.name+" to be released", 20*time.Second, func() bool { return !nd.rep.Gated() })
	}
	if ld.rep.Log().EndOffset() < durable {
		t.Fatalf("the elected log ends at %d, %d was fsynced on it", ld.rep.Log().EndOffset(), durable)
	}
	g.checkConverged(a) // every batch of the fsynced prefix is kept
}

// TestAcceptDataLoss: every replica lost power and one never comes back;
// the group waits, gated, until an operator releases the survivors.
func TestAcceptDataLoss(t *testing.T) {
	g := newTestGroup(t, 3)
	a := acked{}
	A := g.leader()
	g.produce(A, a, 0, 10)
	g.checkConverged(a)
	flushAll(t, g)
	for _, nd := range g.nodes {
		g.powerLoss(nd, vfs.CrashOptions{})
	}
	gone := g.nodes[2]
	g.start(g.nodes[0])
	g.start(g.nodes[1])
	noLeaderFor(t, 3*time.Second, g.nodes[0], g.nodes[1])
	g.nodes[0].rep.ForceUngate("test: node 2 is gone")
	g.nodes[1].rep.ForceUngate("test: node 2 is gone")
	ld := g.leader(g.nodes[0], g.nodes[1])
	g.produce(ld, a, 10, 3)
	g.start(gone)
	g.checkConverged(a)
}

// TestTwoOfThreeLostPowerInTurn: a follower is cut off, the leader's
// process dies, the other follower loses power and the cut-off one too:
// two of three voters come back gated and the one that kept its log
// cannot win an election alone. The voters the guard holds back are no
// quorum, so the most complete log (the replica that never lost power)
// is elected, everything acknowledged is kept, and the others catch up.
func TestTwoOfThreeLostPowerInTurn(t *testing.T) {
	g := newTestGroup(t, 3)
	a := acked{}
	L := g.leader()
	g.produce(L, a, 0, 10)
	g.checkConverged(a)
	var F1, F2 *tnode
	for _, nd := range g.nodes {
		if nd != L {
			if F1 == nil {
				F1 = nd
			} else {
				F2 = nd
			}
		}
	}
	g.net.Isolate(F2.addr, g.addrs())
	g.produce(L, a, 10, 10) // committed on L and F1
	// The leader's process dies (its disk keeps everything: no power
	// loss), F1 loses power, and F2, still cut off, too.
	g.kill(L)
	g.powerLoss(F1, vfs.CrashOptions{})
	g.powerLoss(F2, vfs.CrashOptions{})
	g.net.Heal()
	for _, nd := range g.nodes {
		g.start(nd)
	}
	if !F1.rep.Gated() || !F2.rep.Gated() {
		t.Fatalf("gated after the power losses: %s %v, %s %v", F1.name, F1.rep.Gated(), F2.name, F2.rep.Gated())
	}
	if ld := g.leader(); ld != L {
		t.Fatalf("%s was elected, the most complete log is %s's", ld.name, L.name)
	}
	g.produceTo(a, 20, 5)
	for _, nd := range []*tnode{F1, F2} {
		nd := nd
		waitFor(t, nd.name+" to catch up and be released", 20*time.Second, func() bool { return !nd.rep.Gated() })
	}
	g.checkConverged(a)
}

// A replica opened with Config.Gate (reopened after its log failed a
// write, on the same boot) is gated whatever its recovery found, votes
// for nobody meanwhile, and is released once it has caught up.
func TestGateOnReopen(t *testing.T) {
	g := newTestGroup(t, 3)
	a := acked{}
	g.produceTo(a, 0, 20)
	ld := g.leader()
	var f *tnode
	for _, nd := range g.nodes {
		if nd != ld {
			f = nd
			break
		}
	}
	g.kill(f)
	g.produceTo(a, 20, 10)
	f.gate = "reopened after a write error: test"
	g.start(f)
	if !f.rep.Gated() || f.rep.GateReason() != f.gate {
		t.Fatalf("reopened with a gate: gated=%v (%q)", f.rep.Gated(), f.rep.GateReason())
	}
	waitFor(t, "the reopened replica to be released", 20*time.Second, func() bool { return !f.rep.Gated() })
	g.produceTo(a, 30, 5)
	g.checkConverged(a)
}

// blockingPreVotes is a transport whose pre-votes wait for release.
type blockingPreVotes struct {
	raft.Transport
	calls   atomic.Int32
	release chan struct{}
}

func (b *blockingPreVotes) Consumer() <-chan raft.RPC { return nil }

func (b *blockingPreVotes) RequestPreVote(_ raft.ServerID, _ raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	b.calls.Add(1)
	<-b.release
	*resp = raft.RequestPreVoteResponse{Term: args.Term, Granted: true}
	return nil
}

// TestOnePreVoteInFlightPerPeer: a pre-vote to a peer whose last one has
// not come back is refused at once (not queued behind it); other peers
// are asked; once the first returns, the peer is asked again.
func TestOnePreVoteInFlightPerPeer(t *testing.T) {
	inner := &blockingPreVotes{release: make(chan struct{})}
	g := newGuardTransport(inner, "me", func() uint64 { return 1 }, nil, hclog.NewNullLogger())
	g.start()
	defer g.Close()
	ask := func(target raft.ServerAddress) chan raft.RequestPreVoteResponse {
		out := make(chan raft.RequestPreVoteResponse, 1)
		go func() {
			var resp raft.RequestPreVoteResponse
			if err := g.RequestPreVote("p", target, &raft.RequestPreVoteRequest{Term: 2}, &resp); err != nil {
				t.Error(err)
			}
			out <- resp
		}()
		return out
	}
	first := ask("a")
	waitFor(t, "the first pre-vote to be sent", 5*time.Second, func() bool { return inner.calls.Load() == 1 })
	if resp := <-ask("a"); resp.Granted {
		t.Fatal("a second pre-vote to a peer with one in flight was sent and granted")
	}
	other := ask("b")
	waitFor(t, "the pre-vote to another peer to be sent", 5*time.Second, func() bool { return inner.calls.Load() == 2 })
	close(inner.release)
	if !(<-first).Granted || !(<-other).Granted {
		t.Fatal("pre-votes in flight were not answered")
	}
	if resp := <-ask("a"); !resp.Granted || inner.calls.Load() != 3 {
		t.Fatalf("after the first came back: granted %v, %d sent", resp.Granted, inner.calls.Load())
	}
}
