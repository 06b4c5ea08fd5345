package bench

import (
	"fmt"
	"runtime/metrics"
	"time"

	"github.com/prometheus/procfs"
)

// Process is what this process spent over a stretch of time (its CPU,
// its page faults, its garbage collector) and how busy the machine was.
// In `bench compare` the
// client and the nodes share the process, so this is the cost of a run
// as a whole; it shows what changes with a latency figure (more
// collections, more faults into memory the host backs slowly).
type Process struct {
	CPU         time.Duration // user and system time
	MinorFaults uint64        // page faults served without I/O (first touch of a page included)
	MajorFaults uint64
	GCCycles    uint64
	GCPause     time.Duration // stop-the-world time of the collector
	GCCPU       time.Duration // CPU time of the collector (marking, assists, pauses)
	ScavengeCPU time.Duration // CPU time returning heap memory to the kernel
	Released    uint64        // heap bytes returned to the kernel at the end
	// Of the whole machine (/proc/stat), summed over its CPUs: the time
	// they ran anything (this process included), were idle, and, on a
	// virtual machine, wanted to run while the host ran something else
	// (steal). Busy less CPU is what else ran: a latency spike with much
	// of it is the machine's, not the process's.
	Busy, Idle, Steal time.Duration
}

var processMetrics = []string{
	"/gc/cycles/total:gc-cycles",
	"/sched/pauses/total/gc:seconds",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/scavenge/total:cpu-seconds",
	"/memory/classes/heap/released:bytes",
}

// SnapshotProcess reads the process's counters now; the difference of
// two snapshots (Sub) is what the stretch between them spent. The page
// faults and CPU come from /proc/self/stat and are zero where there is
// none.
func SnapshotProcess() Process {
	var p Process
	if fs, err := procfs.NewDefaultFS(); err == nil {
		if st, err := fs.Stat(); err == nil {
			c := st.CPUTotal
			p.Busy = time.Duration((c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ) * float64(time.Second))
			p.Idle = time.Duration(c.Idle * float64(time.Second))
			p.Steal = time.Duration(st.CPUTotal.Steal * float64(time.Second))
		}
		if self, err := fs.Self(); err == nil {
			if st, err := self.Stat(); err == nil {
				p.CPU = time.Duration(st.CPUTime() * float64(time.Second))
				p.MinorFaults, p.MajorFaults = uint64(st.MinFlt), uint64(st.MajFlt)
			}
		}
	}
	samples := make([]metrics.Sample, len(processMetrics))
	for i, name := range processMetrics {
		samples[i].Name = name
	}
	metrics.Read(samples)
	seconds := func(v metrics.Value) time.Duration {
		switch v.Kind() {
		case metrics.KindFloat64:
			return time.Duration(v.Float64() * float64(time.Second))
		case metrics.KindFloat64Histogram:
			// The pauses are a histogram: its total is estimated from
			// the buckets' lower bounds (a lower bound of the time).
			h := v.Float64Histogram()
			var sum float64
			for i, n := range h.Counts {
				if lo := h.Buckets[i]; n > 0 && lo > 0 {
					sum += float64(n) * lo
				}
			}
			return time.Duration(sum * float64(time.Second))
		}
		return 0
	}
	count := func(v metrics.Value) uint64 {
		if v.Kind() == metrics.KindUint64 {
			return v.Uint64()
		}
		return 0
	}
	p.GCCycles = count(samples[0].Value)
	p.GCPause = seconds(samples[1].Value)
	p.GCCPU = seconds(samples[2].Value)
	p.ScavengeCPU = seconds(samples[3].Value)
	p.Released = count(samples[4].Value)
	return p
}

// Sub is what p spent since the earlier snapshot q (Released is p's).
func (p Process) Sub(q Process) Process {
	return Process{
		CPU:         p.CPU - q.CPU,
		MinorFaults: p.MinorFaults - q.MinorFaults,
		MajorFaults: p.MajorFaults - q.MajorFaults,
		GCCycles:    p.GCCycles - q.GCCycles,
		GCPause:     p.GCPause - q.GCPause,
		GCCPU:       p.GCCPU - q.GCCPU,
		ScavengeCPU: p.ScavengeCPU - q.ScavengeCPU,
		Released:    p.Released,
		Busy:        p.Busy - q.Busy,
		Idle:        p.Idle - q.Idle,
		Steal:       p.Steal - q.Steal,
	}
}

// String is one line for a person.
func (p Process) String() string {
	return fmt.Sprintf("cpu %v, page faults %d minor %d major, %d collections (pauses ≥ %v, gc cpu %v), scavenger cpu %v, %d MiB released; the rest of the machine: cpu %v, idle %v, steal %v",
		p.CPU.Round(10*time.Millisecond), p.MinorFaults, p.MajorFaults, p.GCCycles, p.GCPause.Round(100*time.Microsecond),
		p.GCCPU.Round(time.Millisecond), p.ScavengeCPU.Round(time.Millisecond), p.Released>>20,
		max(p.Busy-p.CPU, 0).Round(10*time.Millisecond), p.Idle.Round(10*time.Millisecond), p.Steal.Round(10*time.Millisecond))
}
