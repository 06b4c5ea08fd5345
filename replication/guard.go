package replication

import (
	"encoding/binary"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log"
)

// The vote guard: durability without fsync.
//
// A replica that opens its log after an unclean shutdown on a new kernel
// boot (a power loss) may have lost entries it had acknowledged, since
// appends are not fsynced; and hashicorp/raft's leader never lowers a
// follower's match index. If such a replica voted, a leader could be
// elected without a committed entry (docs/durability.md has the sequence).
// So until it is provably caught up it neither grants votes or pre-votes,
// nor starts an election, nor takes a leadership transfer. Caught up means:
// the leader has committed a rejoin marker this replica proposed after the
// restart, and this replica has applied it, so everything committed before
// the restart is committed and present locally.
//
// guardTransport wraps the Raft transport in both directions. Incoming
// RequestVote and RequestPreVote get Granted=false (never an error: raft
// reads some errors as a granted pre-vote); TimeoutNow gets an error.
// Outgoing votes and pre-votes fail locally, so the replica never campaigns.
// Heartbeats, appends and snapshots pass untouched.
//
// It also holds pre-votes, both ways, while hold says so (quiescence's
// holdsElection: the leader's node is alive): an incoming one is refused,
// an outgoing one refused locally, as the peer would. And it sends at
// most one pre-vote to a peer at a time: a candidate that restarts its
// campaign while the last one's request is still on its way (a starved
// peer, a full session) is refused by that peer at once, rather than
// leaving another request to pile up behind it.
type guardTransport struct {
	raft.Transport
	prevote raft.WithPreVote
	localID raft.ServerID
	term    func() uint64
	logger  hclog.Logger

	// hold, when set, tells whether to hold a pre-vote for candidate
	// (nil: this replica's own).
	hold func(candidate []byte) bool
	// campaign, when set, is told the address of each candidate asking
	// for a vote as on a leadership transfer (Quiescer.noteCampaign).
	campaign func(candidate raft.ServerAddress)
	// heard, when set, is told the sender of every request received
	// (Quiescer.heard).
	heard func(sender raft.ServerAddress)

	held      atomic.Uint64 // pre-votes held, both ways
	preVoting inFlight

	gated atomic.Bool
	// allowed is the one candidate a gated replica may vote for while
	// every voter is gated (recovery election of the most complete log).
	allowed atomic.Pointer[raft.ServerID]

	out      chan raft.RPC
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// ErrGated is the error of what a gated replica refuses to do.
var ErrGated = errors.New("replication: replica is gated by the vote guard until it has caught up")

func newGuardTransport(inner raft.Transport, localID raft.ServerID, term func() uint64, hold func([]byte) bool, logger hclog.Logger) *guardTransport {
	g := &guardTransport{
		Transport: inner, localID: localID, term: term, hold: hold, logger: logger,
		out: make(chan raft.RPC), stop: make(chan struct{}), done: make(chan struct{}),
	}
	g.prevote, _ = inner.(raft.WithPreVote)
	return g
}

// start starts passing RPCs on; the hooks (campaign, heard) are set
// before it.
func (g *guardTransport) start() { go g.filter() }

// twoConsumers is a transport whose RPCs arrive on two channels
// (appendTransport.consumers): the guard reads both.
type twoConsumers interface {
	consumers() (a, b <-chan raft.RPC)
}

func (g *guardTransport) filter() {
	defer close(g.done)
	var in, in2 <-chan raft.RPC // in2 nil: never ready
	if c, ok := g.Transport.(twoConsumers); ok {
		in, in2 = c.consumers()
	} else {
		in = g.Transport.Consumer()
	}
	for {
		var rpc raft.RPC
		select {
		case <-g.stop:
			return
		case rpc = <-in:
		case rpc = <-in2:
		}
		if g.heard != nil {
			// A request a peer's Raft sent names the sender's ID; the
			// TimeoutNow a takeover makes here in its dead leader's name
			// (appendTransport.campaign) names none, and must not pass
			// for a sign of that leader's life.
			if h, ok := rpc.Command.(raft.WithRPCHeader); ok && len(h.GetRPCHeader().ID) > 0 {
				g.heard(raft.ServerAddress(h.GetRPCHeader().Addr))
			}
		}
		if g.intercept(rpc) {
			continue
		}
		select {
		case g.out <- rpc:
		case <-g.stop:
			rpc.Respond(nil, raft.ErrTransportShutdown)
			return
		}
	}
}

// refuses reports whether a vote for candidate must be refused now.
func (g *guardTransport) refuses(candidate []byte) bool {
	if !g.gated.Load() {
		return false
	}
	if a := g.allowed.Load(); a != nil && string(*a) == string(candidate) {
		return false
	}
	return true
}

func (g *guardTransport) header() raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(g.localID), Addr: g.Transport.EncodePeer(g.localID, g.Transport.LocalAddr())}
}

// intercept answers the RPCs a gated replica refuses; true when answered.
func (g *guardTransport) intercept(rpc raft.RPC) bool {
	switch req := rpc.Command.(type) {
	case *raft.RequestVoteRequest:
		if req.LeadershipTransfer && g.campaign != nil {
			g.campaign(raft.ServerAddress(req.GetRPCHeader().Addr))
		}
		if g.refuses(req.GetRPCHeader().ID) {
			g.logger.Debug("vote guard: refusing vote", "candidate", string(req.GetRPCHeader().ID), "term", req.Term)
			rpc.Respond(&raft.RequestVoteResponse{RPCHeader: g.header(), Term: g.term(), Granted: false}, nil)
			return true
		}
	case *raft.RequestPreVoteRequest:
		if g.refuses(req.GetRPCHeader().ID) {
			g.logger.Debug("vote guard: refusing pre-vote", "candidate", string(req.GetRPCHeader().ID), "term", req.Term)
			rpc.Respond(&raft.RequestPreVoteResponse{RPCHeader: g.header(), Term: g.term(), Granted: false}, nil)
			return true
		}
		if g.hold != nil && g.hold(req.GetRPCHeader().Addr) {
			g.held.Add(1)
			g.logger.Debug("refusing pre-vote: the leader's node is alive", "candidate", string(req.GetRPCHeader().ID), "term", req.Term)
			rpc.Respond(&raft.RequestPreVoteResponse{RPCHeader: g.header(), Term: g.term(), Granted: false}, nil)
			return true
		}
	case *raft.TimeoutNowRequest:
		if g.gated.Load() {
			g.logger.Info("vote guard: refusing leadership transfer")
			rpc.Respond(nil, ErrGated)
			return true
		}
	}
	return false
}

// Consumer implements raft.Transport.
func (g *guardTransport) Consumer() <-chan raft.RPC { return g.out }

// RequestVote implements raft.Transport: a gated replica does not campaign.
func (g *guardTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if g.gated.Load() {
		return ErrGated
	}
	return g.Transport.RequestVote(id, target, args, resp)
}

// RequestPreVote implements raft.WithPreVote.
func (g *guardTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if g.gated.Load() {
		return ErrGated
	}
	if g.prevote == nil {
		return errors.New("replication: transport without pre-vote")
	}
	// Held, or one already on its way: refused here, as the peer would.
	if g.hold != nil && g.hold(nil) {
		g.held.Add(1)
	} else if g.preVoting.start(target) {
		defer g.preVoting.done(target)
		return g.prevote.RequestPreVote(id, target, args, resp)
	}
	*resp = raft.RequestPreVoteResponse{RPCHeader: args.RPCHeader, Term: args.Term, Granted: false}
	return nil
}

// Close implements raft.WithClose.
func (g *guardTransport) Close() error {
	g.stopOnce.Do(func() { close(g.stop) })
	<-g.done
	if c, ok := g.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

// marker is a rejoin marker: the replica that proposed it after a restart
// and the nonce of that restart.
type marker struct {
	server string
	nonce  uint64
}

// encodeMarker builds the control batch of a rejoin marker.
func encodeMarker(m marker, now time.Time) []byte {
	data := binary.BigEndian.AppendUint64(nil, m.nonce)
	data = append(data, m.server...)
	return encodeControl(&raft.Log{Type: entryRejoin, Data: data, AppendedAt: now})
}

func decodeMarker(b log.Batch) (marker, bool) {
	var l raft.Log
	if err := decodeControl(b, &l); err != nil || l.Type != entryRejoin || len(l.Data) < 8 {
		return marker{}, false
	}
	return marker{nonce: binary.BigEndian.Uint64(l.Data), server: string(l.Data[8:])}, true
}

var timeZero time.Time

var _ io.Reader = (*snapReader)(nil)
