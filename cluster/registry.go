package cluster

import (
	"context"
	"sort"
	"time"
)

// The broker registry.
//
// Every node registers itself in the metadata: a register_broker command
// with its node id, incarnation and the addresses it is reached at (Kafka,
// Raft, HTTP, gossip) and its rack, appended again whenever what it would
// register differs from its entry (it came back at another address, or a
// snapshot of a version without the registry dropped it). Snapshots carry
// the registry. It serves two ends:
//
//   - a node whose gossip view lacks a node the registry (or the
//     controller's Raft configuration) knows joins that node's gossip
//     address (rejoin.go): a membership split heals whatever --join says;
//   - the Kafka front end lists a broker it names as a partition's leader
//     or replica at its registered addresses when it is not a live member
//     in this node's view: a Metadata answer never names a broker it does
//     not list.
//
// Entries are never removed: a node gone for good stays registered, and
// the rejoin loop tries its gossip address now and then (with a backoff).

// Registration is a broker's entry in the registry.
type Registration struct {
	NodeID      int32  `json:"id"`
	Incarnation string `json:"inc,omitempty"`
	KafkaAddr   string `json:"kafka,omitempty"`
	RaftAddr    string `json:"raft,omitempty"`
	HTTPAddr    string `json:"http,omitempty"`
	GossipAddr  string `json:"gossip,omitempty"`
	Rack        string `json:"rack,omitempty"`
	// Features are what the node's version supports that the cluster
	// may only use once every node does (see features.go), comma
	// separated; absent from the registrations of earlier versions.
	Features string `json:"features,omitempty"`
}

// info is the registration as a BrokerInfo.
func (r Registration) info() BrokerInfo {
	return BrokerInfo{NodeID: r.NodeID, Incarnation: r.Incarnation, KafkaAddr: r.KafkaAddr, RaftAddr: r.RaftAddr,
		HTTPAddr: r.HTTPAddr, GossipAddr: r.GossipAddr, Rack: r.Rack, Features: r.Features}
}

// Broker returns a broker's registration.
func (m *Meta) Broker(id int32) (Registration, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.brokers[id]
	return r, ok
}

// Brokers lists the registered brokers, by node id.
func (m *Meta) Brokers() []Registration {
	m.mu.RLock()
	out := make([]Registration, 0, len(m.brokers))
	for _, r := range m.brokers {
		out = append(out, r)
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

// registration is what this node registers now.
func (n *Node) registration() Registration {
	return Registration{NodeID: n.cfg.NodeID, Incarnation: n.incarnation, KafkaAddr: n.cfg.AdvertisedKafkaAddr,
		RaftAddr: string(n.mux.Addr()), HTTPAddr: n.cfg.HTTPAddr, GossipAddr: n.gossipAddr, Rack: n.cfg.Rack,
		Features: nodeFeatures}
}

// registered reports whether the registry holds this node as it is now.
func (n *Node) registered() bool {
	r, ok := n.meta.Broker(n.cfg.NodeID)
	return ok && r == n.registration()
}

// register appends this node's registration through the controller.
func (n *Node) register(ctx context.Context) error {
	r := n.registration()
	_, err := n.ctl.append(ctx, command{Op: "register_broker", Broker: &r})
	if err == nil {
		n.logger.Info("registered", "kafka", r.KafkaAddr, "raft", r.RaftAddr, "gossip", r.GossipAddr, "http", r.HTTPAddr)
	}
	return err
}

// liveBroker returns a live member's broker information.
func (n *Node) liveBroker(id int32) (BrokerInfo, bool) {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	for _, b := range n.members {
		if b.NodeID == id {
			return b, true
		}
	}
	return BrokerInfo{}, false
}

// LookupBroker returns broker id's information: a live member's (live
// true), else its registration's (its last addresses; Incarnation as
// registered). ok is false for a node neither live nor registered.
func (n *Node) LookupBroker(id int32) (b BrokerInfo, live, ok bool) {
	if b, ok := n.liveBroker(id); ok {
		return b, true, true
	}
	if r, ok := n.meta.Broker(id); ok {
		return r.info(), false, true
	}
	return BrokerInfo{}, false, false
}

// known reports whether node id is a live member or registered.
func (n *Node) known(id int32) bool {
	_, _, ok := n.LookupBroker(id)
	return ok
}

// registerRetry is how long a failed registration waits before the next.
const registerRetry = time.Second
