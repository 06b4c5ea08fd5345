package main

import (
	"flag"
	"testing"

	"github.com/raftlog/raftlog/cluster/node"
)

// A serve flag is given when it is on the command line or in its
// RAFTLOG_* variable.
func TestEnvDefaultsGiven(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var f serveFlags
	f.register(fs)
	t.Setenv("RAFTLOG_MEMORY_LIMIT_BYTES", "1000000000")
	if err := fs.Parse([]string{"--node-id", "2"}); err != nil {
		t.Fatal(err)
	}
	got, err := envDefaults(fs)
	if err != nil {
		t.Fatal(err)
	}
	if !got["node-id"] || !got["memory-limit-bytes"] || got["gc-percent"] || f.memoryLimit != 1e9 || f.gcPercent != node.DefaultGCPercent {
		t.Fatalf("explicit %v, memory limit %d, gc percent %d", got, f.memoryLimit, f.gcPercent)
	}
}
