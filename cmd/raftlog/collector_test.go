package main

import (
	"flag"
	"math"
	"slices"
	"testing"
)

func TestMemoryFiles(t *testing.T) {
	if got := memTotal([]byte("MemFree:  10 kB\nMemTotal:       24684332 kB\n")); got != 24684332<<10 {
		t.Fatalf("MemTotal read as %d", got)
	}
	for _, in := range []string{"", "MemTotal: x kB\n", "MemTotal: 12 MB\n"} {
		if got := memTotal([]byte(in)); got != 0 {
			t.Fatalf("%q read as %d", in, got)
		}
	}
	for in, want := range map[string]int64{
		"max\n":                 0, // v2: none
		"9223372036854771712\n": 0, // v1: none
		"1073741824\n":          1 << 30,
		"":                      0,
		"-1":                    0,
	} {
		if got := cgroupLimit([]byte(in)); got != want {
			t.Fatalf("cgroup limit %q read as %d, want %d", in, got, want)
		}
	}
	got := cgroupLimitFiles([]byte("0::/system.slice/raftlog.service\n"))
	for _, want := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/system.slice/raftlog.service/memory.max", "/sys/fs/cgroup/system.slice/memory.max"} {
		if !slices.Contains(got, want) {
			t.Fatalf("cgroup v2: %q not among %q", want, got)
		}
	}
	got = cgroupLimitFiles([]byte("12:pids:/docker/a\n4:cpuset,memory:/docker/a\n"))
	for _, want := range []string{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/docker/a/memory.limit_in_bytes", "/sys/fs/cgroup/memory/docker/memory.limit_in_bytes"} {
		if !slices.Contains(got, want) {
			t.Fatalf("cgroup v1: %q not among %q", want, got)
		}
	}
	if n := len(cgroupLimitFiles([]byte("0::/\n"))); n != 2 {
		t.Fatalf("the root cgroup: %d files, want the 2 roots", n)
	}
	if memoryAvailable() <= 0 {
		t.Fatal("no memory found on this machine")
	}
}

// The flags apply unless GOGC or GOMEMLIMIT are set and the flags were
// not given; setCollector hands back what it replaced.
func TestNodeGC(t *testing.T) {
	orig := currentCollector()
	t.Cleanup(func() { setCollector(orig) })

	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	s := nodeGC(defaultGCPercent, false, 0, false)
	if s.gcPercent != defaultGCPercent || s.memoryLimit != memoryAvailable()/2 {
		t.Fatalf("defaults: %+v, want %d and half of %d", s, defaultGCPercent, memoryAvailable())
	}
	if s := nodeGC(-5, false, -1, false); s.gcPercent != -1 || s.memoryLimit != math.MaxInt64 {
		t.Fatalf("off and none: %+v", s)
	}
	if s := nodeGC(150, true, 1<<30, true); s.gcPercent != 150 || s.memoryLimit != 1<<30 {
		t.Fatalf("given: %+v", s)
	}

	// The environment's, which the runtime applied at start (here set by
	// hand), stand unless the flags were given.
	prev := setCollector(collectorSettings{gcPercent: 77, memoryLimit: 3 << 30})
	if prev != orig {
		t.Fatalf("setCollector replaced %+v, the settings were %+v", prev, orig)
	}
	t.Setenv("GOGC", "77")
	t.Setenv("GOMEMLIMIT", "3GiB")
	if s := nodeGC(defaultGCPercent, false, 0, false); s.gcPercent != 77 || s.memoryLimit != 3<<30 {
		t.Fatalf("environment: %+v", s)
	}
	if s := nodeGC(defaultGCPercent, true, 0, true); s.gcPercent != defaultGCPercent || s.memoryLimit != memoryAvailable()/2 {
		t.Fatalf("flags over the environment: %+v", s)
	}
	if got := currentCollector(); got != (collectorSettings{gcPercent: 77, memoryLimit: 3 << 30}) {
		t.Fatalf("read back %+v", got)
	}
	setCollector(collectorSettings{gcPercent: -1, memoryLimit: math.MaxInt64})
	if got := currentCollector(); got.gcPercent != -1 || got.memoryLimit != math.MaxInt64 {
		t.Fatalf("off read back as %+v", got)
	}
}

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
	if !got["node-id"] || !got["memory-limit-bytes"] || got["gc-percent"] || f.memoryLimit != 1e9 || f.gcPercent != defaultGCPercent {
		t.Fatalf("explicit %v, memory limit %d, gc percent %d", got, f.memoryLimit, f.gcPercent)
	}
}
