package cluster

import "strings"

// Features a node's version supports that change what every replica of
// a group must do alike, so that the cluster uses one only once every
// node has it (as Kafka's finalized features): each node says what it
// has in its gossiped metadata and its registration.
const (
	// featureDenseOffsets: the node opens a topic's replicas in the
	// dense offset layout when the topic says so. A node without it
	// would open them in the legacy layout, giving the same records
	// other offsets than its peers.
	featureDenseOffsets = "dense-offsets"
)

// nodeFeatures is what this version has, as Registration.Features.
const nodeFeatures = featureDenseOffsets

// hasFeature reports whether the comma-separated list has f.
func hasFeature(list, f string) bool {
	for _, x := range strings.Split(list, ",") {
		if x == f {
			return true
		}
	}
	return false
}

// clusterHas reports whether every node the cluster knows has feature f:
// every registered broker and every live member, since a node of a
// version before the registry never registers.
func (n *Node) clusterHas(f string) bool {
	for _, r := range n.meta.Brokers() {
		if !hasFeature(r.Features, f) {
			return false
		}
	}
	for _, b := range n.Brokers() {
		if !hasFeature(b.Features, f) {
			return false
		}
	}
	return true
}
