package cluster

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
