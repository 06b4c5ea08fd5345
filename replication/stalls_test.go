package replication

import (
	"bufio"
	"errors"
	"io"
	"net"
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

// stalledQuiescer is a quiescer of Dead 1 s whose stall clock counts
// only the stalls a test adds (no stall under way ever counts).
func stalledQuiescer() *Quiescer {
	return &Quiescer{dead: time.Second, mux: &Mux{stalls: newStallClock(time.Hour)}}
}

func TestSilenceOverlappingAStallIsExcused(t *testing.T) {
	q := stalledQuiescer()
	stalls := q.mux.stalls
	p := &peerIn{}
	now := time.Now().UnixNano()
	stalls.last.Store(now)
	silentSince := func(d time.Duration) { q.hear(p, now-int64(d)) }

	silentSince(1500 * time.Millisecond)
	if silent, _ := q.silentFor(p, now); !silent {
		t.Fatal("a silence past Dead with no stall of this node was excused")
	}

	silentSince(1500 * time.Millisecond)
	stalls.total.Add(int64(time.Second))
	silent, left := q.silentFor(p, now)
	if silent || left != 500*time.Millisecond {
		t.Fatalf("a silence of 1.5 s, 1 s of it this node's stall: silent %v, %v left; want 0.5 s left", silent, left)
	}

	silentSince(4500 * time.Millisecond)
	stalls.total.Add(int64(time.Hour))
	if silent, _ := q.silentFor(p, now); !silent {
		t.Fatal("a silence past maxExcused Deads was excused")
	}
}

// TestReaderWaitsOutItsOwnStall: a link's reader whose node is stalled
// keeps the link past Dead of silence and hears the next message on it;
// not stalled, it drops the link at Dead.
func TestReaderWaitsOutItsOwnStall(t *testing.T) {
	for _, stalled := range []bool{false, true} {
		q := stalledQuiescer()
		if stalled {
			// A clock whose goroutine never runs: from now on, all of
			// this node's time counts as a stall under way, which grows
			// while the reader waits past the deadline it set.
			q.mux.stalls = newStallClock(100 * time.Millisecond)
		}
		local, remote := net.Pipe()
		p := &peerIn{conn: local, marks: map[string]followMark{}}
		q.hear(p, time.Now().UnixNano())
		ended := make(chan error, 1)
		go func() { ended <- q.readEvents(bufio.NewReader(local), local, p) }()

		if !stalled {
			select {
			case err := <-ended:
				if errors.Is(err, io.EOF) || err == nil {
					t.Fatalf("not stalled: the silent link ended with %v, want its silence", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("not stalled: the reader kept a silent link for 20 s")
			}
			remote.Close()
			continue
		}
		// Silent for 1.3 Deads, then a tick.
		timer := time.NewTimer(1300 * time.Millisecond)
		select {
		case err := <-ended:
			timer.Stop()
			remote.Close()
			t.Fatalf("stalled: the reader dropped the link after %v of silence: %v", q.dead, err)
		case <-timer.C:
		}
		before := p.heard.Load()
		if _, err := remote.Write([]byte{kindTick}); err != nil {
			t.Fatalf("the reader did not read on: %v", err)
		}
		remote.Close()
		if err := <-ended; !errors.Is(err, io.EOF) {
			t.Fatalf("the link ended with %v, want its end (EOF)", err)
		}
		if p.heard.Load() == before {
			t.Fatal("the tick after the stall was not heard")
		}
	}
}
