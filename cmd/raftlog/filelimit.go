package main

import "github.com/hashicorp/go-hclog"

// descriptorsPerReplica is what a partition replica holds open: its
// segments' .log files, one while it has a single segment (the indexes
// are mapped and their files closed; raft.entries is opened only to be
// written).
const descriptorsPerReplica = 1

// descriptorReserve is kept for connections, clients and the rest.
const descriptorReserve = 1024

// warnFileLimit warns when the process's limit on open files cannot hold
// the partition replicas the node may be assigned: past it, new files
// fail with "too many open files". (Go raises the soft limit to the hard
// one at start.)
func warnFileLimit(logger hclog.Logger, maxPerNode int) {
	limit := openFileLimit()
	if limit <= 0 {
		return
	}
	fits := max(0, (int(limit)-descriptorReserve)/descriptorsPerReplica)
	if maxPerNode >= 0 && maxPerNode <= fits {
		return
	}
	logger.Warn("the limit on open files holds fewer partition replicas than this node may be assigned: raise it (LimitNOFILE, ulimit -n)",
		"open_files_limit", limit, "replicas_it_holds", fits, "max_partitions_per_node", maxPerNode,
		"descriptors_per_replica", descriptorsPerReplica)
}
