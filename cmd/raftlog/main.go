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
  raftlog dev [--nodes 3] [--dir DIR] [--kafka-port 9092] [--exit]
                               start a local cluster in this process and show it working
  raftlog serve [flags]        run one node (flags and RAFTLOG_* variables: raftlog serve -h)
  raftlog topic create|list|describe|delete [--bootstrap ADDRS] [--partitions N] [--replication-factor N] [--config k=v] [NAME]
  raftlog produce --topic T [--key-sep SEP]    one record per line of standard input, acks=all
  raftlog consume --topic T [--from start|end] [--count N] [--exit]
  raftlog bench produce|consume [--bootstrap ADDRS] [--topic bench] [--size 1024] [--duration 10s] [--records N] [--acks all] [--partitions 6]
                               load a cluster for a bounded time and print records/s, MB/s, latency quantiles and errors
  raftlog bench compare [--rounds 3] [--duration 3s] [--out docs]
                               raftlog beside a raw write and kfake on this machine (docs/performance.md)
  raftlog health [--url URL]   exit 0 when URL (default http://127.0.0.1:9392/readyz) answers 200 (container health checks)
  raftlog cluster status [--http ADDR,...] [--discover=false]
                               ask every node's /v1/status (default 127.0.0.1:9392 and the members it names) and print nodes and partitions
  raftlog partition reassign --topic T --partition P [--replicas 1,2,4 | --cancel] [--bootstrap ADDRS] [--http ADDRS] [--wait=true]
                               move a partition's replicas (add, catch up, remove) and follow the move until done
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
		return runDev(args[1:], stdout, stderr)
	case "serve":
		return runServe(args[1:], stdout, stderr)
	case "log":
		if len(args) >= 2 && args[1] == "dump" {
			return runLogDump(args[2:], stdout, stderr)
		}
	case "topic":
		return runTopic(args[1:], stdout, stderr)
	case "produce":
		return runProduce(args[1:], os.Stdin, stdout, stderr)
	case "consume":
		return runConsume(args[1:], stdout, stderr)
	case "bench":
		return runBench(args[1:], stdout, stderr)
	case "health":
		return runHealth(args[1:], stdout, stderr)
	case "cluster":
		return runCluster(args[1:], stdout, stderr)
	case "partition":
		return runPartition(args[1:], stdout, stderr)
	case "flag-table":
		flagTable(stdout)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprint(stderr, usage)
	return 2
}
