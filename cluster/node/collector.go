package node

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"path"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// The Go collector's settings of a process that hosts nodes (`raftlog
// serve`, `raftlog dev`, the clusters of `bench compare`).
//
// A node's garbage is mostly the Kafka requests it was sent: a Produce
// request is read into a buffer of its own, whose batches Raft and the
// leader's entry cache hold until they are replicated and applied, and
// which is garbage after that. At a steady produce load that is the
// produce rate in bytes per second, against a live heap of a few entry
// caches: with Go's default (GOGC=100) the collector runs several times a
// second, and each cycle takes CPU from the appends in flight and makes
// the goroutines that allocate meanwhile (the connections reading the next
// requests) help it mark. At 400 it runs a quarter as often for a heap up
// to five times what is live, and a soft limit on the heap keeps that
// bounded where memory is short: nearing the limit the collector runs as
// often as it must, whatever the percentage.
const DefaultGCPercent = 400

// GCSettings are a process's collector settings.
type GCSettings struct {
	GCPercent   int   // negative: off
	MemoryLimit int64 // bytes; math.MaxInt64: none
}

// SetGC applies s and returns the settings it replaced.
func SetGC(s GCSettings) GCSettings {
	return GCSettings{
		GCPercent:   debug.SetGCPercent(s.GCPercent),
		MemoryLimit: debug.SetMemoryLimit(s.MemoryLimit),
	}
}

// ResolveGC resolves the settings a process hosting nodes runs with:
// gcPercent and memoryLimit (0: half of MemoryAvailable; negative: none)
// when explicit (given as flags) or when the environment has no GOGC or
// GOMEMLIMIT, which the runtime has applied already; else the runtime's
// current ones.
func ResolveGC(gcPercent int, gcExplicit bool, memoryLimit int64, limitExplicit bool) GCSettings {
	s := CurrentGC()
	if gcExplicit || os.Getenv("GOGC") == "" {
		s.GCPercent = gcPercent
		if gcPercent < 0 {
			s.GCPercent = -1
		}
	}
	if limitExplicit || os.Getenv("GOMEMLIMIT") == "" {
		switch {
		case memoryLimit < 0:
			s.MemoryLimit = math.MaxInt64
		case memoryLimit == 0:
			s.MemoryLimit = math.MaxInt64
			if m := MemoryAvailable(); m > 0 {
				s.MemoryLimit = m / 2
			}
		default:
			s.MemoryLimit = memoryLimit
		}
	}
	return s
}

// CurrentGC reads the runtime's settings.
func CurrentGC() GCSettings {
	m := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(m)
	s := GCSettings{GCPercent: -1, MemoryLimit: math.MaxInt64}
	if p := m[0].Value.Uint64(); p <= math.MaxInt32 { // off reads as the largest uint64
		s.GCPercent = int(p)
	}
	if l := m[1].Value.Uint64(); l < math.MaxInt64 {
		s.MemoryLimit = int64(l)
	}
	return s
}

func LogGC(logger hclog.Logger, s GCSettings) {
	limit := "none"
	if s.MemoryLimit != math.MaxInt64 {
		limit = strconv.FormatInt(s.MemoryLimit, 10)
	}
	logger.Info("collector", "gc_percent", s.GCPercent, "memory_limit_bytes", limit)
}

// MemoryAvailable is the memory this process may use: the machine's
// (MemTotal), or the lowest cgroup limit over it when lower; 0 when
// neither is known.
func MemoryAvailable() int64 {
	total := memTotal(readFile("/proc/meminfo"))
	for _, f := range cgroupLimitFiles(readFile("/proc/self/cgroup")) {
		if l := cgroupLimit(readFile(f)); l > 0 && (total == 0 || l < total) {
			total = l
		}
	}
	return total
}

// cgroupLimitFiles are the memory limit files that may bound this
// process, from /proc/self/cgroup's text: with cgroup v2, memory.max of
// its cgroup and of each one above it (a parent's limit bounds its
// children: a systemd unit in its slice); with v1, memory.limit_in_bytes
// of its memory cgroup and those above; and the files at the hierarchies'
// roots, which are the process's own cgroup in a container with a cgroup
// namespace.
func cgroupLimitFiles(procCgroup []byte) []string {
	files := []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}
	walk := func(root, dir, name string) {
		for dir = path.Clean("/" + dir); dir != "/"; dir = path.Dir(dir) {
			files = append(files, path.Join(root, dir, name))
		}
	}
	for _, line := range strings.Split(string(procCgroup), "\n") {
		f := strings.SplitN(line, ":", 3)
		switch {
		case len(f) != 3:
		case f[0] == "0" && f[1] == "": // v2
			walk("/sys/fs/cgroup", f[2], "memory.max")
		case slices.Contains(strings.Split(f[1], ","), "memory"): // v1
			walk("/sys/fs/cgroup/memory", f[2], "memory.limit_in_bytes")
		}
	}
	return files
}

func readFile(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}

// memTotal reads MemTotal from /proc/meminfo's text, in bytes (0: absent).
func memTotal(meminfo []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil && n > 0 && n < math.MaxInt64>>10 {
				return n << 10
			}
		}
	}
	return 0
}

// cgroupLimit reads a cgroup memory limit file, in bytes (0: none, or
// not a number). cgroup v2 writes "max" for none; v1 a number near the
// largest int64 rounded down to a page.
func cgroupLimit(b []byte) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 || n >= math.MaxInt64>>1 {
		return 0
	}
	return n
}
