package replication

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

func TestStallClockSumsLateTicks(t *testing.T) {
	const ms = int64(time.Millisecond)
	s := &stallClock{period: 100 * time.Millisecond}
	s.last.Store(0)
	s.tick(110 * ms) // jitter: no stall
	if got := s.total.Load(); got != 0 {
		t.Fatalf("a tick 10 ms late counted %d ns of stall", got)
	}
	s.tick(3110 * ms) // stalled for 2.9 s
	if got := s.total.Load(); got != 2900*ms {
		t.Fatalf("stall summed to %v, want 2.9s", time.Duration(got))
	}
	// A stall under way counts before the clock's goroutine runs again.
	if got := s.stalled(4210 * ms); got != 3900*ms {
		t.Fatalf("stalled with one under way = %v, want 3.9s", time.Duration(got))
	}
	if got := s.stalled(3200 * ms); got != 2900*ms {
		t.Fatalf("stalled on time = %v, want 2.9s", time.Duration(got))
	}
}

func TestSilenceOverlappingAStallIsExcused(t *testing.T) {
	q := &Quiescer{dead: time.Second, stalls: newStallClock(time.Hour)}
	p := &peerIn{}
	silent := func(d time.Duration) {
		now := time.Now()
		q.stalls.last.Store(now.UnixNano()) // no stall under way
		q.hear(p, now.Add(-d).UnixNano())
	}

	silent(1500 * time.Millisecond)
	if q.excuse(p, os.ErrDeadlineExceeded) {
		t.Fatal("a silence past Dead with no stall of this node was excused")
	}

	silent(1500 * time.Millisecond)
	q.stalls.total.Add(int64(time.Second))
	if !q.excuse(p, os.ErrDeadlineExceeded) {
		t.Fatal("a silence of 1.5 s, 1 s of it this node's stall, was not excused")
	}
	if until, want := p.until.Load(), p.heard.Load()+int64(2*time.Second); until != want {
		t.Fatalf("the deadline moved to %v after the last message, want 2s", time.Duration(until-p.heard.Load()))
	}
	if !p.alive() {
		t.Fatal("an excused link does not count as alive")
	}

	silent(4500 * time.Millisecond)
	q.stalls.total.Add(int64(time.Hour))
	if q.excuse(p, os.ErrDeadlineExceeded) {
		t.Fatal("a silence past maxExcused Deads was excused")
	}

	silent(1500 * time.Millisecond)
	q.stalls.total.Add(int64(time.Second))
	for _, err := range []error{io.EOF, errors.New("reset")} {
		if q.excuse(p, err) {
			t.Fatalf("a link that ended (%v) was excused", err)
		}
	}
}
