package bench

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// TestSnapshotProcess: the difference of two snapshots is what the
// process did between them: the collections it ran (as many as the
// runtime's own count says, not its total since start) and the CPU it
// burnt (counted in the machine's busy time too; both in clock ticks,
// hence the margins).
func TestSnapshotProcess(t *testing.T) {
	_, err := os.Stat("/proc/self/stat")
	haveProc := err == nil // the CPU figures come from /proc (Linux)
	burn := func() {
		x := 1
		for i := range 1 << 20 {
			x ^= i * x
		}
		runtime.KeepAlive(x)
	}
	// Something before the first snapshot, so that its totals are not
	// zero and a difference that returned them would show.
	for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
		burn()
	}
	runtime.GC()

	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	before := SnapshotProcess()
	const collections = 3
	for range collections {
		runtime.GC()
	}
	deadline := time.Now().Add(20 * time.Second)
	for haveProc && SnapshotProcess().Sub(before).CPU < 200*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatal("no CPU seen")
		}
		burn()
	}
	after := SnapshotProcess()
	runtime.ReadMemStats(&ms1)
	spent := after.Sub(before)

	if n := uint64(ms1.NumGC - ms0.NumGC); spent.GCCycles < collections || spent.GCCycles > n {
		t.Errorf("%d collections between the snapshots, want %d to %d", spent.GCCycles, collections, n)
	}
	if haveProc {
		if spent.CPU >= after.CPU || spent.Busy < spent.CPU/2 {
			t.Errorf("cpu %v of the process's %v in all, the machine busy %v", spent.CPU, after.CPU, spent.Busy)
		}
	}
	if spent.String() == "" {
		t.Error("empty summary")
	}
}
