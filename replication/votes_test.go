package replication

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
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

// TestVoteSlotsBoundStreams: at most voteStreams requests to a peer are in
// flight; one more is refused after voteWait, not queued, and is let
// through once one ends; other peers are not held up.
func TestVoteSlotsBoundStreams(t *testing.T) {
	v := &votes{slots: map[raft.ServerAddress]chan struct{}{}}
	var releases []func()
	for i := 0; i < voteStreams; i++ {
		r, err := v.slot("a", time.Second)
		if err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
		releases = append(releases, r)
	}
	if _, err := v.slot("a", 10*time.Millisecond); !errors.Is(err, errVotesBusy) {
		t.Fatalf("a request past the bound: %v, want errVotesBusy", err)
	}
	if r, err := v.slot("b", 10*time.Millisecond); err != nil {
		t.Fatalf("another peer: %v", err)
	} else {
		r()
	}
	releases[0]()
	if _, err := v.slot("a", 10*time.Millisecond); err != nil {
		t.Fatalf("after one ended: %v", err)
	}
}

// TestVoteToAGroupNotHosted: a vote for a group the peer hosts no replica
// of (not created there yet) fails with ErrGroupNotHosted, which Raft's
// log shows at debug, and the stream serves the next request.
func TestVoteToAGroupNotHosted(t *testing.T) {
	g := newTestGroup(t, 2)
	ld := g.leader()
	peer := g.others(ld)[0]
	req := &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("x"), Addr: []byte(ld.addr)}, Term: 1}
	for i := 0; i < 2; i++ {
		err := ld.mux.votes.call(raft.ServerAddress(peer.addr), "t-elsewhere", voteKindVote, req, new(raft.RequestVoteResponse), 5*time.Second)
		if !errors.Is(err, ErrGroupNotHosted) {
			t.Fatalf("vote %d for a group not hosted: %v, want ErrGroupNotHosted", i, err)
		}
	}
	// Answered on the vote streams: not sent again the old way (a dial
	// of the group's own stream for every vote of a group being created).
	tr := &appendTransport{votes: ld.mux.votes, group: "t-elsewhere", timeout: 5 * time.Second}
	if ok, err := tr.voted(raft.ServerAddress(peer.addr), voteKindVote, req, new(raft.RequestVoteResponse)); !ok || !errors.Is(err, ErrGroupNotHosted) {
		t.Fatalf("voted = %v, %v: want an answer on the vote streams, ErrGroupNotHosted", ok, err)
	}
}
