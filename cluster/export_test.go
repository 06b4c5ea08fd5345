package cluster

import "context"

// ForgetMember drops node id from this node's view of the live members,
// as if its gossip had not seen it (until memberlist tells of it again).
func (n *Node) ForgetMember(id int32) {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	for name, b := range n.members {
		if b.NodeID == id {
			delete(n.members, name)
		}
	}
}

// Unregister drops node id from this node's copy of the broker registry.
func (n *Node) Unregister(id int32) {
	n.meta.mu.Lock()
	defer n.meta.mu.Unlock()
	delete(n.meta.brokers, id)
}

// RejoinTargets lists the known nodes missing from this node's gossip
// view with the gossip address the rejoin loop would join each at.
func (n *Node) RejoinTargets() map[int32]string {
	out := map[int32]string{}
	for _, t := range n.missingMembers() {
		out[t.id] = n.gossipAddrOf(t)
	}
	return out
}

// RegisterOld registers node id through the controller as a node of a
// version without features would: with none.
func (n *Node) RegisterOld(ctx context.Context, id int32) error {
	_, err := n.ctl.append(ctx, command{Op: "register_broker", Broker: &Registration{NodeID: id, KafkaAddr: "127.0.0.1:1"}})
	return err
}
