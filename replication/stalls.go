package replication

import (
	"sync/atomic"
	"time"
)

// stallClock measures how long this process has been stalled: starved of
// CPU, paused by the collector, stopped. A link's silence that overlaps
// such a stall says nothing of the peer (its messages may wait unread in
// this node's buffers), so the silence a link is judged by leaves the
// stalls out, as memberlist's Lifeguard scales its timeouts by the local
// node's health. Without it, a node on a starved machine takes its live
// peers for gone, refuses them votes and starts takeovers of their
// groups, which starve it further.
type stallClock struct {
	period time.Duration
	last   atomic.Int64 // unix nanos of the last tick seen
	total  atomic.Int64 // nanoseconds of stalls seen, summed
}

// stallPeriod is the stall clock's tick: stalls shorter than a quarter of
// it are not counted.
const stallPeriod = 100 * time.Millisecond

func newStallClock(period time.Duration) *stallClock {
	s := &stallClock{period: period}
	s.last.Store(time.Now().UnixNano())
	return s
}

// run ticks every period until stop closes; a tick that comes late by
// more than a quarter period counts its lateness as a stall.
func (s *stallClock) run(stop <-chan struct{}) {
	t := time.NewTicker(s.period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s.tick(time.Now().UnixNano())
		}
	}
}

func (s *stallClock) tick(now int64) {
	if late := now - s.last.Swap(now) - int64(s.period); late > int64(s.period)/4 {
		s.total.Add(late)
	}
}

// stalled is the stall time summed up to now, the stall under way (a
// tick overdue: the clock's own goroutine not yet run since) included.
func (s *stallClock) stalled(now int64) int64 {
	total := s.total.Load()
	if late := now - s.last.Load() - int64(s.period); late > int64(s.period)/4 {
		total += late
	}
	return total
}

// ran is how long this node ran between at, when the stall time summed
// was stalledAt, and now: the time between, its stalls left out.
func (s *stallClock) ran(at, stalledAt, now int64) time.Duration {
	return time.Duration(now - at - (s.stalled(now) - stalledAt))
}

// waited reports whether d of this node's running time has passed since
// at (stalledAt its stalls then), or limit of time whatever the stalls,
// and if not, how much longer to wait at least.
func (s *stallClock) waited(at, stalledAt, now int64, d, limit time.Duration) (bool, time.Duration) {
	left := min(d-s.ran(at, stalledAt, now), limit-time.Duration(now-at))
	return left <= 0, left
}
