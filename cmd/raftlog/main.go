// Command raftlog is the single binary of raftlog: the server, a local
// development cluster, the topic/produce/consume CLI, benchmarks and the
// log dump tool.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
)

const usage = `raftlog: a Kafka-compatible, Raft-replicated log.

Usage:
  raftlog dev [--nodes 3] [--dir DIR] [--kafka-port 9092] [--exit]
                               start a local cluster in this process and show it working
  raftlog serve [flags]        run one node (flags and RAFTLOG_* variables: raftlog serve -h)
  raftlog topic create [--partitions 3] [--replication-factor N] [--config k=v] NAME
  raftlog topic list | describe NAME | delete NAME
  raftlog produce --topic T [--key-sep SEP] [--partition P]
                               one record per line of standard input, acks=all
  raftlog consume --topic T [--from start|end|OFFSET] [--partition P] [--count N] [--exit]
  raftlog bench produce|consume [--bootstrap ADDRS] [--topic bench] [--size 1024] [--duration 10s] [--records N] [--acks all] [--partitions 6]
                               load a cluster for a bounded time and print records/s, MB/s, latency quantiles and errors
  raftlog bench compare [--rounds 3] [--duration 3s] [--out docs]
                               raftlog beside a raw write and kfake on this machine (docs/performance.md)
  raftlog bench partitions [--counts 1000,3000]
                               what partitions cost a 3-node cluster: leaders, idle CPU, memory, failover
  raftlog health [--url URL]   exit 0 when URL (default http://127.0.0.1:9392/readyz) answers 200 (container health checks)
  raftlog cluster status [--http ADDR,...] [--discover=false]
                               ask every node's /v1/status (default 127.0.0.1:9392 and the members it names) and print nodes and partitions
  raftlog partition reassign --topic T --partition P [--replicas 1,2,4 | --cancel] [--bootstrap ADDRS] [--http ADDRS] [--wait=true]
                               move a partition's replicas (add, catch up, remove) and follow the move until done
  raftlog log dump PATH...     list the batches of segment files or partition directories and verify their indexes
  raftlog version              the module version, commit and Go version of this binary

The client commands (topic, produce, consume, bench, partition) take
--bootstrap ADDRS (default 127.0.0.1:9092, or RAFTLOG_BOOTSTRAP) and
--timeout. Every command prints its own flags with -h.
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
		if len(args) >= 2 && isHelp(args[1]) {
			fmt.Fprintln(stdout, logDumpSynopsis)
			return 0
		}
		if len(args) == 1 {
			fmt.Fprintln(stderr, "raftlog log: a command is needed: dump")
		} else {
			fmt.Fprintf(stderr, "raftlog log: unknown command %q\n", args[1])
		}
		fmt.Fprintln(stderr, logDumpSynopsis)
		return 2
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
	case "version", "-version", "--version":
		return runVersion(args[1:], stdout, stderr)
	case "flag-table": // docs/operations.md's table of serve's flags
		flagTable(stdout)
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	if strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(stderr, "raftlog: unknown flag %s: flags come after a command\n", args[0])
	} else {
		fmt.Fprintf(stderr, "raftlog: unknown command %q\n", args[0])
	}
	fmt.Fprintln(stderr, "Run 'raftlog help' for the commands.")
	return 2
}

func isHelp(a string) bool {
	return a == "-h" || a == "-help" || a == "--help" || a == "help"
}

// runVersion prints the version of the main module as the build recorded
// it (a tagged version when installed with go install, "(devel)" when
// built from a checkout), the commit it was built from and Go's version.
func runVersion(args []string, stdout, stderr io.Writer) int {
	c := newCommand("version", "", "Print the module version, commit and Go version this binary was built with.")
	pos, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if code, ok := c.noArgs(pos, stderr); !ok {
		return code
	}
	fmt.Fprintln(stdout, versionString())
	return 0
}

func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "raftlog: no build information in this binary"
	}
	path, version := bi.Main.Path, bi.Main.Version
	if path == "" {
		path = "github.com/raftlog/raftlog"
	}
	if version == "" {
		version = "(devel)"
	}
	s := fmt.Sprintf("raftlog %s (%s)", version, path)
	var rev, at, modified string
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			rev = kv.Value
		case "vcs.time":
			at = kv.Value
		case "vcs.modified":
			if kv.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if rev != "" {
		s += fmt.Sprintf(" commit %s", rev)
		if at != "" {
			s += " of " + at
		}
		s += modified
	}
	return s + ", " + bi.GoVersion
}
