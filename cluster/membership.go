package cluster

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
)

// leaderEntry says that Node leads Group in Raft term Term.
type leaderEntry struct {
	Group string `json:"g"`
	Node  int32  `json:"n"`
	Term  int32  `json:"t"`
}

// leaderTable is every node's view of who leads each partition, fed by
// gossip: the entry with the highest term wins.
type leaderTable struct {
	mu sync.RWMutex
	m  map[string]leaderEntry
}

func newLeaderTable() *leaderTable { return &leaderTable{m: map[string]leaderEntry{}} }

func (t *leaderTable) get(g string) (leaderEntry, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	e, ok := t.m[g]
	return e, ok
}

// merge records e if it is newer; true when it changed the table.
func (t *leaderTable) merge(e leaderEntry) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	old, ok := t.m[e.Group]
	if ok && (old.Term > e.Term || old == e) {
		return false
	}
	t.m[e.Group] = e
	return true
}

func (t *leaderTable) all() []leaderEntry {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]leaderEntry, 0, len(t.m))
	for _, e := range t.m {
		out = append(out, e)
	}
	return out
}

// delegate is the memberlist delegate of a node.
type delegate struct{ n *Node }

func (d delegate) NodeMeta(limit int) []byte {
	b, _ := json.Marshal(BrokerInfo{
		NodeID: d.n.cfg.NodeID, Incarnation: d.n.incarnation, KafkaAddr: d.n.cfg.AdvertisedKafkaAddr,
		RaftAddr: string(d.n.mux.Addr()), HTTPAddr: d.n.cfg.HTTPAddr, Rack: d.n.cfg.Rack, Features: nodeFeatures,
	})
	if len(b) > limit {
		return nil
	}
	return b
}

func (d delegate) NotifyMsg(b []byte) {
	var e leaderEntry
	if json.Unmarshal(b, &e) == nil {
		d.n.leaders.merge(e)
	}
}

func (d delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.n.bq.GetBroadcasts(overhead, limit)
}

func (d delegate) LocalState(join bool) []byte {
	b, _ := json.Marshal(d.n.leaders.all())
	return b
}

func (d delegate) MergeRemoteState(buf []byte, join bool) {
	var es []leaderEntry
	if json.Unmarshal(buf, &es) == nil {
		for _, e := range es {
			d.n.leaders.merge(e)
		}
	}
}

type events struct{ n *Node }

// The callbacks run under memberlist's lock: what they copy out of m is
// consistent.
func (e events) NotifyJoin(m *memberlist.Node) {
	e.n.logger.Info("member joined", "member", m.Name, "addr", m.Address())
	e.n.setMember(m)
	e.n.kickReconcile()
}
func (e events) NotifyLeave(m *memberlist.Node) {
	e.n.logger.Warn("member left or failed", "member", m.Name)
	e.n.membersMu.Lock()
	delete(e.n.members, m.Name)
	e.n.membersMu.Unlock()
	e.n.kickReconcile()
}
func (e events) NotifyUpdate(m *memberlist.Node) {
	e.n.setMember(m)
	e.n.kickReconcile()
}

// setMember records a live member's broker information (none when its
// metadata does not parse: not a raftlog node).
func (n *Node) setMember(m *memberlist.Node) {
	var bi BrokerInfo
	ok := json.Unmarshal(m.Meta, &bi) == nil
	bi.GossipAddr = m.Address()
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	if n.members == nil {
		n.members = map[string]BrokerInfo{}
	}
	if ok {
		n.members[m.Name] = bi
	} else {
		delete(n.members, m.Name)
	}
}

type leaderBroadcast struct{ e leaderEntry }

func (b leaderBroadcast) Invalidates(o memberlist.Broadcast) bool {
	ob, ok := o.(leaderBroadcast)
	return ok && ob.e.Group == b.e.Group
}
func (b leaderBroadcast) Message() []byte { m, _ := json.Marshal(b.e); return m }
func (b leaderBroadcast) Finished()       {}

func (n *Node) startMembership() error {
	var mc *memberlist.Config
	if n.cfg.LocalGossip {
		mc = memberlist.DefaultLocalConfig()
	} else {
		mc = memberlist.DefaultLANConfig()
	}
	mc.Name = strconv.Itoa(int(n.cfg.NodeID))
	host, port, err := net.SplitHostPort(n.cfg.GossipAddr)
	if err != nil {
		return fmt.Errorf("cluster: gossip address: %w", err)
	}
	mc.BindAddr = host
	if mc.BindPort, err = strconv.Atoi(port); err != nil {
		return fmt.Errorf("cluster: gossip port: %w", err)
	}
	if adv := n.cfg.AdvertisedGossip; adv != "" {
		ah, ap, err := net.SplitHostPort(adv)
		if err != nil {
			return fmt.Errorf("cluster: advertised gossip address: %w", err)
		}
		mc.AdvertiseAddr = ah
		mc.AdvertisePort, _ = strconv.Atoi(ap)
	}
	// A node that comes back at another address (a rescheduled pod) may
	// take its name back once the old entry has been dead this long.
	mc.DeadNodeReclaimTime = 30 * time.Second
	mc.Delegate = delegate{n}
	mc.Events = events{n}
	mc.LogOutput = nil
	mc.Logger = n.logger.Named("memberlist").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	n.bq = &memberlist.TransmitLimitedQueue{RetransmitMult: 3, NumNodes: func() int {
		if n.ml == nil {
			return 1
		}
		return n.ml.NumMembers()
	}}
	if n.ml, err = memberlist.Create(mc); err != nil {
		return fmt.Errorf("cluster: memberlist: %w", err)
	}
	n.gossipAddr = n.ml.LocalNode().Address()
	if len(n.cfg.Join) > 0 {
		n.wg.Add(1)
		go n.joinLoop()
	}
	return nil
}

// joinLoop joins the seeds, retrying until another node answers: a seed
// list that names this node by another name (a DNS name of its own, as a
// StatefulSet's peer list does) reaches only itself, which is no join.
func (n *Node) joinLoop() {
	defer n.wg.Done()
	backoff := 100 * time.Millisecond
	for {
		var seeds []string
		for _, s := range n.cfg.Join {
			if s != n.cfg.GossipAddr && s != n.cfg.AdvertisedGossip {
				seeds = append(seeds, s)
			}
		}
		if len(seeds) == 0 {
			return
		}
		if _, err := n.ml.Join(seeds); err == nil && n.ml.NumMembers() > 1 {
			n.kickReconcile()
			return
		} else {
			n.logger.Debug("join found no other node, retrying", "seeds", seeds, "error", err)
		}
		select {
		case <-n.stop:
			return
		case <-time.After(backoff):
		}
		if backoff < 2*time.Second {
			backoff *= 2
		}
	}
}

// announce gossips that this node leads group in term.
func (n *Node) announce(group string, term int32) {
	e := leaderEntry{Group: group, Node: n.cfg.NodeID, Term: term}
	if n.leaders.merge(e) {
		n.bq.QueueBroadcast(leaderBroadcast{e})
	}
}
