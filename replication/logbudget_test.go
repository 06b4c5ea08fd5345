package replication

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// String is what was written.
func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLogBudget: the replicas of a node log, together, at most
// logLinesPerSecond lines above debug a second, written by the budget's
// own goroutine; what is dropped is counted and told once a second;
// lines below the logger's level take nothing of the budget; debug lines
// are neither bounded nor queued.
func TestLogBudget(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	var out lockedBuffer
	root := hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info})
	b := newLogBudget(root.Named("mux"), stop)
	var wg sync.WaitGroup
	for g := range 20 {
		l := withBudget(root.With("group", g), b).Named("raft")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				l.Debug("not shown") // below the level: takes no budget
				l.Error("a failed vote")
				l.Log(hclog.Warn, "a failed heartbeat")
			}
		}()
	}
	wg.Wait()
	waitFor(t, "the dropped lines told", 5*time.Second, func() bool {
		return strings.Contains(out.String(), "replica log lines dropped")
	})
	// The 4,000 lines may straddle two seconds.
	if logged := strings.Count(out.String(), "a failed"); logged < logLinesPerSecond || logged > 2*logLinesPerSecond {
		t.Fatalf("%d lines logged of 4,000, want %d to %d", logged, logLinesPerSecond, 2*logLinesPerSecond)
	}
	if strings.Contains(out.String(), "not shown") {
		t.Fatal("a debug line was logged at info")
	}
	var dbg lockedBuffer
	dl := withBudget(hclog.New(&hclog.LoggerOptions{Output: &dbg, Level: hclog.Debug}), newLogBudget(hclog.NewNullLogger(), stop))
	for range 3 * logLinesPerSecond {
		dl.Debug("every debug line")
	}
	if n := strings.Count(dbg.String(), "every debug line"); n != 3*logLinesPerSecond {
		t.Fatalf("%d debug lines logged, want all %d", n, 3*logLinesPerSecond)
	}
}
