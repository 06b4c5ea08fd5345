// Command jepsen is raftlog's chaos harness: it builds the raftlog binary,
// runs a real cluster of `raftlog serve` processes on loopback, drives a
// workload through franz-go (idempotent producers with acks=all, readers),
// injects faults on a seeded schedule (kill -9, SIGSTOP pauses, power loss
// of a node: kill, drop its unsynced log tail, reboot), heals, reads
// everything back and checks the history for lost, duplicated, reordered
// or inconsistent records. It is black-box: it imports no raftlog package.
//
//	go run ./jepsen run [--quick] [--nemesis kill,pause,power] [--seed N] [--out DIR]
//
// The exit status is non-zero when an anomaly is found.
package main
