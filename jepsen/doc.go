// Command jepsen is raftlog's chaos harness: it builds the raftlog binary,
// runs a real cluster of `raftlog serve` processes (each in a network
// namespace of its own, as Docker containers, or on loopback), drives a
// workload through franz-go (idempotent producers with acks=all, readers,
// register clients for a linearizability check with porcupine), injects
// faults on a seeded schedule (kill -9, SIGSTOP pauses, power loss of a
// node or of every node, network partitions, a node added and replicas
// moved under load), heals, reads everything back and checks the history
// for lost, duplicated, reordered or inconsistent records. It is
// black-box: it imports no raftlog package. docs/jepsen.md describes it.
//
//	go run ./jepsen run [--quick] [--nemesis kill,pause,partition,...] [--net netns|docker|loopback] [--seed N] [--out DIR]
//
// The exit status is non-zero when an anomaly is found.
package main
