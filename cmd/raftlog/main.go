// Command raftlog is the single binary of raftlog: the server, a local
// development cluster, the topic/produce/consume CLI, benchmarks and the
// log dump tool.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `raftlog: a Kafka-compatible, Raft-replicated log.

Usage:
  raftlog dev                  start a local cluster (not yet: replication and the Kafka front end come first)
  raftlog log dump PATH...     list the batches of segment files or partition directories and verify their indexes
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "dev":
		fmt.Fprintln(stdout, "raftlog dev: not yet. The storage engine is in place; the cluster (replication, Kafka front end) is being built.")
		fmt.Fprintln(stdout, "Try: go run ./cmd/raftlog log dump <partition dir> on a log written by the tests.")
		return 0
	case "log":
		if len(args) >= 2 && args[1] == "dump" {
			return runLogDump(args[2:], stdout, stderr)
		}
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprint(stderr, usage)
	return 2
}
