// Package testkit is what the tests of every package share: waiting for a
// condition with a deadline (never a sleep as synchronisation) and a
// logger into the test's own output. It sits under log, the lowest layer,
// so that the tests of any package may import it.
package testkit

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// pollEvery is how often a condition is checked again.
const pollEvery = 10 * time.Millisecond

// Eventually checks check until it returns nil, and fails the test with
// its last error once timeout has passed.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		<-tick.C
	}
}

// WaitFor checks cond until it holds, and fails the test saying what it
// waited for once timeout has passed.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	Eventually(t, timeout, func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
	})
}

// LogEnv names the environment variable that sets the level of every
// test logger (trace, debug, info, warn, error, off).
const LogEnv = "RAFTLOG_TEST_LOG"

// Logger returns a logger named after the test that writes into the
// test's output at level, or at the level LogEnv gives. It goes quiet
// once the test ends, so that goroutines outliving it (a node still
// stopping) do not write into a finished test.
func Logger(t testing.TB, level hclog.Level) hclog.Logger {
	if s := os.Getenv(LogEnv); s != "" {
		level = hclog.LevelFromString(s)
	}
	w := &writer{t: t, on: true}
	t.Cleanup(func() {
		w.mu.Lock()
		w.on = false
		w.mu.Unlock()
	})
	return hclog.New(&hclog.LoggerOptions{Level: level, Output: w, Name: t.Name()})
}

type writer struct {
	t  testing.TB
	mu sync.Mutex
	on bool
}

func (w *writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.on {
		w.t.Log(string(bytes.TrimRight(p, "\n")))
	}
	return len(p), nil
}
