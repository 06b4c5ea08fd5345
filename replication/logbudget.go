package replication

import (
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// logBudget bounds the lines a node's replicas log, together, above
// debug: logLinesPerSecond a second, the rest dropped and counted, and
// the count told once a second while lines are dropped. A node's death
// had thousands of groups on each survivor log at once (a failed vote, a
// failed heartbeat, a state change each), and every logging goroutine
// queued on the logger's lock: a goroutine dump of a survivor showed
// 20,000 of them waiting there, Raft's main loops among them, and the
// node stalled for seconds, its leaders' leases ran out and they stepped
// down. The budget is taken without a lock. Debug and trace lines, which
// an operator turns on to see everything, are not bounded.
type logBudget struct {
	logger  hclog.Logger // the node's, for the count of dropped lines
	second  atomic.Int64 // the unix second lines are counted in
	lines   atomic.Int64 // lines logged or dropped in it
	dropped atomic.Int64 // since the last count told
}

// logLinesPerSecond is the budget's rate.
const logLinesPerSecond = 100

func newLogBudget(logger hclog.Logger) *logBudget { return &logBudget{logger: logger} }

// allow reports whether a line may be logged now, and tells the lines
// dropped in earlier seconds when a new second begins.
func (b *logBudget) allow() bool {
	now := time.Now().Unix()
	if s := b.second.Load(); s != now && b.second.CompareAndSwap(s, now) {
		b.lines.Store(0)
		if n := b.dropped.Swap(0); n > 0 {
			b.logger.Warn("replica log lines dropped: over the node's budget", "lines", n, "per_second", logLinesPerSecond)
		}
	}
	if b.lines.Add(1) <= logLinesPerSecond {
		return true
	}
	b.dropped.Add(1)
	return false
}

// budgetLogger logs its lines above debug within a node's logBudget.
type budgetLogger struct {
	hclog.Logger
	b *logBudget
}

// withBudget returns l bounded by b (l itself when b is nil).
func withBudget(l hclog.Logger, b *logBudget) hclog.Logger {
	if b == nil {
		return l
	}
	return budgetLogger{Logger: l, b: b}
}

func (l budgetLogger) Log(level hclog.Level, msg string, args ...any) {
	if level > hclog.Debug && (level < l.Logger.GetLevel() || !l.b.allow()) {
		return
	}
	l.Logger.Log(level, msg, args...)
}

func (l budgetLogger) Info(msg string, args ...any) {
	if l.Logger.IsInfo() && l.b.allow() {
		l.Logger.Info(msg, args...)
	}
}

func (l budgetLogger) Warn(msg string, args ...any) {
	if l.Logger.IsWarn() && l.b.allow() {
		l.Logger.Warn(msg, args...)
	}
}

func (l budgetLogger) Error(msg string, args ...any) {
	if l.Logger.IsError() && l.b.allow() {
		l.Logger.Error(msg, args...)
	}
}

func (l budgetLogger) With(args ...any) hclog.Logger {
	return budgetLogger{Logger: l.Logger.With(args...), b: l.b}
}

func (l budgetLogger) Named(name string) hclog.Logger {
	return budgetLogger{Logger: l.Logger.Named(name), b: l.b}
}

func (l budgetLogger) ResetNamed(name string) hclog.Logger {
	return budgetLogger{Logger: l.Logger.ResetNamed(name), b: l.b}
}
