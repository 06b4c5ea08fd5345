package replication

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// logBudget bounds the lines a node's replicas log, together, above
// debug, and writes them from a goroutine of its own: logLinesPerSecond
// a second, the rest dropped and counted, and the count told once a
// second while lines are dropped. A node's death had thousands of groups
// on each survivor log at once (a failed vote, a failed heartbeat, a
// state change each), and every logging goroutine queued on the logger's
// lock, which it holds while it formats and writes: a goroutine dump of
// a survivor showed 20,000 of them waiting there, Raft's main loops
// among them, and the node stalled for seconds, its leaders' leases ran
// out and they stepped down. Bounding the rate was not enough: with tens
// of thousands of goroutines runnable, each hand-off of a contended lock
// waits for the scheduler, and a hundred lines a second queued faster
// than they drained. So a line is handed to the writer without a lock
// and without waiting (dropped, and counted, when logQueue lines wait
// already). Debug and trace lines, which an operator turns on to see
// everything, are neither bounded nor queued.
type logBudget struct {
	logger  hclog.Logger // the node's, for the count of dropped lines
	second  atomic.Int64 // the unix second lines are counted in
	lines   atomic.Int64 // lines logged or dropped in it
	dropped atomic.Int64 // since the last count told
	queue   chan logLine
	start   sync.Once
	stop    <-chan struct{}
}

// logLine is a line on its way to the writer.
type logLine struct {
	to    hclog.Logger
	level hclog.Level
	msg   string
	args  []any
}

const (
	logLinesPerSecond = 100  // the budget's rate
	logQueue          = 1024 // lines waiting for the writer, at most
)

// newLogBudget returns a budget whose writer runs until stop is closed.
func newLogBudget(logger hclog.Logger, stop <-chan struct{}) *logBudget {
	return &logBudget{logger: logger, queue: make(chan logLine, logQueue), stop: stop}
}

// allow reports whether a line may be logged now.
func (b *logBudget) allow() bool {
	now := time.Now().Unix()
	if s := b.second.Load(); s != now && b.second.CompareAndSwap(s, now) {
		b.lines.Store(0)
	}
	if b.lines.Add(1) <= logLinesPerSecond {
		return true
	}
	b.dropped.Add(1)
	return false
}

// log hands a line to the writer, if the budget and the queue allow.
func (b *logBudget) log(to hclog.Logger, level hclog.Level, msg string, args []any) {
	if !b.allow() {
		return
	}
	b.start.Do(func() { go b.write() })
	select {
	case b.queue <- logLine{to, level, msg, args}:
	default:
		b.dropped.Add(1)
	}
}

// write writes the queued lines, and once a second the count of those
// dropped, until stop.
func (b *logBudget) write() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-b.stop:
			return
		case l := <-b.queue:
			l.to.Log(l.level, l.msg, l.args...)
		case <-tick.C:
			if n := b.dropped.Swap(0); n > 0 {
				b.logger.Warn("replica log lines dropped: over the node's budget", "lines", n, "per_second", logLinesPerSecond)
			}
		}
	}
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
	switch {
	case level <= hclog.Debug:
		l.Logger.Log(level, msg, args...)
	case level >= l.Logger.GetLevel():
		l.b.log(l.Logger, level, msg, args)
	}
}

func (l budgetLogger) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l budgetLogger) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l budgetLogger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l budgetLogger) With(args ...any) hclog.Logger {
	return budgetLogger{Logger: l.Logger.With(args...), b: l.b}
}

func (l budgetLogger) Named(name string) hclog.Logger {
	return budgetLogger{Logger: l.Logger.Named(name), b: l.b}
}

func (l budgetLogger) ResetNamed(name string) hclog.Logger {
	return budgetLogger{Logger: l.Logger.ResetNamed(name), b: l.b}
}
