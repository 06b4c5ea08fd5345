package node

import (
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
	if MemoryAvailable() <= 0 {
		t.Fatal("no memory found on this machine")
	}
}

// The flags apply unless GOGC or GOMEMLIMIT are set and the flags were
// not given; SetGC hands back what it replaced.
func TestNodeGC(t *testing.T) {
	orig := CurrentGC()
	t.Cleanup(func() { SetGC(orig) })

	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	s := ResolveGC(DefaultGCPercent, false, 0, false)
	if s.GCPercent != DefaultGCPercent || s.MemoryLimit != MemoryAvailable()/2 {
		t.Fatalf("defaults: %+v, want %d and half of %d", s, DefaultGCPercent, MemoryAvailable())
	}
	if s := ResolveGC(-5, false, -1, false); s.GCPercent != -1 || s.MemoryLimit != math.MaxInt64 {
		t.Fatalf("off and none: %+v", s)
	}
	if s := ResolveGC(150, true, 1<<30, true); s.GCPercent != 150 || s.MemoryLimit != 1<<30 {
		t.Fatalf("given: %+v", s)
	}

	// The environment's, which the runtime applied at start (here set by
	// hand), stand unless the flags were given.
	prev := SetGC(GCSettings{GCPercent: 77, MemoryLimit: 3 << 30})
	if prev != orig {
		t.Fatalf("SetGC replaced %+v, the settings were %+v", prev, orig)
	}
	t.Setenv("GOGC", "77")
	t.Setenv("GOMEMLIMIT", "3GiB")
	if s := ResolveGC(DefaultGCPercent, false, 0, false); s.GCPercent != 77 || s.MemoryLimit != 3<<30 {
		t.Fatalf("environment: %+v", s)
	}
	if s := ResolveGC(DefaultGCPercent, true, 0, true); s.GCPercent != DefaultGCPercent || s.MemoryLimit != MemoryAvailable()/2 {
		t.Fatalf("flags over the environment: %+v", s)
	}
	if got := CurrentGC(); got != (GCSettings{GCPercent: 77, MemoryLimit: 3 << 30}) {
		t.Fatalf("read back %+v", got)
	}
	SetGC(GCSettings{GCPercent: -1, MemoryLimit: math.MaxInt64})
	if got := CurrentGC(); got.GCPercent != -1 || got.MemoryLimit != math.MaxInt64 {
		t.Fatalf("off read back as %+v", got)
	}
}
