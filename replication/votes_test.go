package replication

import (
	"testing"
	"time"
)

// TestVotesOnVoteStreams: elections and leadership transfers go over the
// nodes' vote streams, and still reach, through the NetworkTransport, a
// node that predates them (n2 here), whose own votes come back that way.
func TestVotesOnVoteStreams(t *testing.T) {
	g := newTestGroup(t, 3, func(g *tgroup) { g.noVotes = map[string]bool{"n2": true} })
	a := acked{}
	ld := g.leader()
	g.produce(ld, a, 0, 5)
	served := func() uint64 {
		var n uint64
		for _, nd := range g.nodes {
			if nd.up && nd.mux.votes != nil {
				n += nd.mux.votes.served.Load()
			}
		}
		return n
	}
	before := served()
	// A transfer to each node in turn: TimeoutNow, then the votes of the
	// election it starts.
	for _, to := range []string{"n0", "n1", "n2", "n0"} {
		cur := g.leader()
		if cur.name == to {
			continue
		}
		var target *tnode
		for _, nd := range g.nodes {
			if nd.name == to {
				target = nd
			}
		}
		if err := cur.rep.raft.LeadershipTransferToServer(target.rep.ServerID(), target.rep.Address()).Error(); err != nil {
			t.Fatalf("transfer %s → %s: %v", cur.name, to, err)
		}
		waitFor(t, to+" to lead", 20*time.Second, func() bool { return target.rep.IsLeader() })
	}
	if served() == before {
		t.Fatal("no vote went over the vote streams")
	}
	// A crash elects over them too.
	ld = g.leader()
	g.kill(ld)
	nl := g.leader(g.others(ld)...)
	g.produce(nl, a, 5, 5)
	g.start(ld)
	g.checkConverged(a)
}
