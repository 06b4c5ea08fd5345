package bench

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// TestSnapshotProcess: the snapshot sees what the process does between
// two reads: the CPU it burns (counted in the machine's busy time too,
// both in clock ticks, hence the margin) and a collection it runs.
func TestSnapshotProcess(t *testing.T) {
	_, err := os.Stat("/proc/self/stat")
	haveProc := err == nil // the CPU figures come from /proc (Linux)
	before := SnapshotProcess()
	runtime.GC()
	deadline := time.Now().Add(20 * time.Second)
	var spent Process
	for x := 0; ; x++ {
		spent = SnapshotProcess().Sub(before)
		if (spent.CPU >= 200*time.Millisecond || !haveProc) && spent.GCCycles > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no CPU or collection seen: %v", spent)
		}
		for i := range 1 << 20 { // burn some CPU
			x ^= i * x
		}
		runtime.GC()
	}
	if haveProc && spent.Busy < spent.CPU/2 {
		t.Errorf("the machine was busy for %v, less than this process's %v", spent.Busy, spent.CPU)
	}
	if spent.String() == "" {
		t.Error("empty summary")
	}
}
