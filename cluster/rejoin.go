package cluster

import (
	"context"
	"sort"
	"time"

	"github.com/hashicorp/raft"
)

// Rejoining.
//
// --join only seeds the first join: a node restarted with a seed list that
// names nobody else (the first node of a cluster whose every node was
// started with --join naming it) would otherwise stay alone, while the
// others, which saw it leave, never call on it again. So every node, once
// a second, compares its gossip view with the nodes the cluster knows: the
// broker registry (registry.go) and the controller's Raft configuration
// (the configuration on this node's disk; it holds every node that ever
// held the metadata). A known node that is not a live member is joined at
// its registered gossip address, or, when it has none (a node registered
// by no version that had the registry), at the one it answers over the
// cluster RPC at its Raft address. memberlist's Join merges both views, so
// one side's join heals the split for both. A node that does not answer is
// tried again after a backoff that grows from rejoinFirstBackoff to
// rejoinMaxBackoff; a node gone for good is thus tried every
// rejoinMaxBackoff, each try bounded by memberlist's TCP timeout.
//
// The same loop registers this node whenever its registration differs
// from what it is now.

const (
	rejoinInterval     = time.Second
	rejoinFirstBackoff = time.Second
	rejoinMaxBackoff   = 30 * time.Second
	// gossipAskTimeout bounds asking a peer its gossip address.
	gossipAskTimeout = 2 * time.Second
	// registerTimeout bounds one registration.
	registerTimeout = 10 * time.Second
)

// rejoinTarget is a known node missing from the gossip view.
type rejoinTarget struct {
	id     int32
	gossip string // "" when unknown
	raft   raft.ServerAddress
}

// rejoinBackoff is when a missing node is tried next.
type rejoinBackoff struct {
	next time.Time
	wait time.Duration
}

func (n *Node) rejoinLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(rejoinInterval)
	defer tick.Stop()
	backoff := map[int32]*rejoinBackoff{}
	var registerAt time.Time
	for {
		ch := n.meta.changes()
		if now := time.Now(); !now.Before(registerAt) && n.meta.ClusterID() != "" && !n.registered() {
			ctx, cancel := context.WithTimeout(n.ctx, registerTimeout)
			if err := n.register(ctx); err != nil {
				n.logger.Debug("register", "error", err)
				registerAt = time.Now().Add(registerRetry)
			}
			cancel()
		}
		select {
		case <-n.stop:
			return
		case <-ch:
			continue
		case <-tick.C:
		}
		n.rejoin(time.Now(), backoff)
	}
}

// missingMembers lists the nodes the registry or the controller's Raft
// configuration knows that are not live members, by node id.
func (n *Node) missingMembers() []rejoinTarget {
	live := map[int32]bool{n.cfg.NodeID: true}
	for _, b := range n.Brokers() {
		live[b.NodeID] = true
	}
	known := map[int32]rejoinTarget{}
	for _, r := range n.meta.Brokers() {
		if !live[r.NodeID] {
			known[r.NodeID] = rejoinTarget{id: r.NodeID, gossip: r.GossipAddr, raft: raft.ServerAddress(r.RaftAddr)}
		}
	}
	if cfg, err := n.ctl.r.Configuration(); err == nil {
		for _, s := range cfg.Servers {
			id := nodeOf(s.ID)
			if _, ok := known[id]; id < 0 || ok || live[id] {
				continue
			}
			known[id] = rejoinTarget{id: id, raft: s.Address}
		}
	}
	out := make([]rejoinTarget, 0, len(known))
	for _, t := range known {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// rejoin joins each known node missing from the gossip view whose backoff
// has passed.
func (n *Node) rejoin(now time.Time, backoff map[int32]*rejoinBackoff) {
	missing := n.missingMembers()
	want := make(map[int32]bool, len(missing))
	for _, t := range missing {
		want[t.id] = true
	}
	for id := range backoff {
		if !want[id] {
			delete(backoff, id) // live again (or forgotten): starts over
		}
	}
	for _, t := range missing {
		select {
		case <-n.stop:
			return
		default:
		}
		b := backoff[t.id]
		if b == nil {
			b = &rejoinBackoff{}
			backoff[t.id] = b
		}
		if now.Before(b.next) {
			continue
		}
		addr := n.gossipAddrOf(t)
		joined := false
		if addr != "" {
			if _, err := n.ml.Join([]string{addr}); err == nil {
				joined = true
				n.logger.Info("rejoined a known node missing from the membership", "member", t.id, "gossip", addr)
				n.kickReconcile()
			} else {
				n.logger.Debug("rejoin", "member", t.id, "gossip", addr, "error", err)
			}
		}
		// After a join too: the member shows up once gossip has merged
		// the views; not joined again meanwhile.
		if joined || b.wait == 0 {
			b.wait = rejoinFirstBackoff
		} else {
			b.wait = min(2*b.wait, rejoinMaxBackoff)
		}
		b.next = time.Now().Add(b.wait)
	}
}

// gossipAddrOf is a missing node's gossip address: its registered one,
// else the one it answers at its Raft address ("" when neither is known).
func (n *Node) gossipAddrOf(t rejoinTarget) string {
	if t.gossip != "" || t.raft == "" {
		return t.gossip
	}
	return n.askGossipAddr(t)
}

// askGossipAddr asks a node at its Raft address for its gossip address
// ("" when it does not answer it).
func (n *Node) askGossipAddr(t rejoinTarget) string {
	ctx, cancel := context.WithTimeout(n.ctx, gossipAskTimeout)
	defer cancel()
	resp, err := n.call(ctx, t.raft, rpcRequest{Op: "gossip"})
	if err != nil || resp.Err != "" || resp.Node != t.id {
		n.logger.Debug("ask gossip address", "member", t.id, "raft", t.raft, "error", err, "answer", resp.Err)
		return ""
	}
	return resp.Gossip
}
