package replication

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/raftlog/raftlog/log"
)

func idemBatch(pid int64, epoch int16, seq int32, n int) log.Batch {
	recs := make([]log.Record, n)
	for i := range recs {
		recs[i] = log.Record{Value: []byte(fmt.Sprintf("p%d-e%d-s%d", pid, epoch, int(seq)+i)), Timestamp: 1}
	}
	return log.Batch(log.BuildBatch(nil, log.BatchOptions{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq}, recs))
}

// refModel is the reference: per producer, the epoch and every batch ever
// written (no window), with Kafka's rules stated plainly.
type refModel struct {
	epoch map[int64]int16
	hist  map[int64][][3]int64 // first, last, offset
}

func (m *refModel) decide(pid int64, epoch int16, first, last int32) (dupOffset int64, err error) {
	cur, known := m.epoch[pid]
	if known && epoch < cur {
		return -1, ErrProducerFenced
	}
	h := m.hist[pid]
	if known && epoch > cur {
		h = nil
	}
	for _, b := range h {
		if b[0] == int64(first) && b[1] == int64(last) {
			// Kafka remembers the last five only.
			if len(h) > producerWindow {
				for _, w := range h[len(h)-producerWindow:] {
					if w == b {
						return b[2], nil
					}
				}
				return -1, ErrDuplicateSequence
			}
			return b[2], nil
		}
	}
	if len(h) > 0 && int64(first) != h[len(h)-1][1]+1 {
		if int64(first) < h[max(0, len(h)-producerWindow)][0] {
			return -1, ErrDuplicateSequence
		}
		return -1, ErrOutOfOrderSequence
	}
	return -2, nil // new: written
}

func (m *refModel) write(pid int64, epoch int16, first, last int32, off int64) {
	if cur, ok := m.epoch[pid]; !ok || epoch > cur {
		m.epoch[pid] = epoch
		m.hist[pid] = nil
	}
	m.hist[pid] = append(m.hist[pid], [3]int64{int64(first), int64(last), off})
}

// TestProducerStateAgainstReference drives the producer checks with a
// seeded mix of in-order batches, retries of recent and old batches,
// sequence gaps, and epoch bumps and fences, and compares every decision
// with the reference model.
func TestProducerStateAgainstReference(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		p := newProducers()
		m := &refModel{epoch: map[int64]int16{}, hist: map[int64][][3]int64{}}
		next := map[int64]int32{}
		epochs := map[int64]int16{}
		offset := int64(0)
		for step := 0; step < 400; step++ {
			pid := int64(r.IntN(3))
			epoch := epochs[pid]
			seq := next[pid]
			n := 1 + r.IntN(4)
			switch k := r.IntN(20); {
			case k < 3 && len(m.hist[pid]) > 0: // retry of an earlier batch
				h := m.hist[pid]
				b := h[r.IntN(len(h))]
				seq, n = int32(b[0]), int(b[1]-b[0]+1)
			case k == 3: // a gap
				seq += 1 + int32(r.IntN(3))
			case k == 4: // a new epoch, sequences from 0
				epochs[pid]++
				epoch, seq = epochs[pid], 0
			case k == 5 && epoch > 0: // a zombie with the old epoch
				epoch--
			}
			b := idemBatch(pid, epoch, seq, n)
			first, last := seq, seq+int32(n-1)
			wantOff, wantErr := m.decide(pid, epoch, first, last)
			dup, reg, err := p.check(b)
			where := fmt.Sprintf("seed %d step %d: pid %d epoch %d seq %d-%d", seed, step, pid, epoch, first, last)
			switch {
			case wantErr != nil:
				if !errors.Is(err, wantErr) {
					t.Fatalf("%s: got (%v, %v), want error %v", where, dup, err, wantErr)
				}
			case wantOff >= 0:
				if err != nil || dup == nil || dup.offset != wantOff {
					t.Fatalf("%s: want duplicate of offset %d, got dup %+v err %v", where, wantOff, dup, err)
				}
			default:
				if err != nil || dup != nil || reg == nil {
					t.Fatalf("%s: want a new batch, got dup %+v err %v", where, dup, err)
				}
				// It commits: the FSM observes it.
				b.SetBaseOffset(offset)
				p.observe(b)
				m.write(pid, epoch, first, last, offset)
				select {
				case <-reg.done:
				default:
					t.Fatalf("%s: pending batch not finished by its commit", where)
				}
				offset += int64(n)
				if last >= next[pid] || epoch == epochs[pid] {
					next[pid] = last + 1
				}
			}
		}
	}
}

// TestDuplicateSuppressionAcrossFailover: an idempotent producer's batch
// is written, its acknowledgement lost; the retry (to the same leader, and
// after a leader change to the new one) is answered with the original
// offset and the log holds the batch once.
func TestDuplicateSuppressionAcrossFailover(t *testing.T) {
	g := newTestGroup(t, 3)
	ld := g.leader()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var offs []int64
	for i := 0; i < 5; i++ {
		off, err := ld.rep.Append(ctx, idemBatch(42, 0, int32(3*i), 3), AcksAll)
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, off)
	}
	// The retry of batch 3 (its ack "lost").
	off, err := ld.rep.Append(ctx, idemBatch(42, 0, 9, 3), AcksAll)
	if err != nil || off != offs[3] {
		t.Fatalf("retry on the same leader: offset %d %v, want %d", off, err, offs[3])
	}
	if _, err := ld.rep.Append(ctx, idemBatch(42, 0, 20, 1), AcksAll); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("a gap: %v", err)
	}
	// Fail over: the new leader rebuilt the state from its log.
	g.kill(ld)
	nl := g.leader(others(g.nodes, []*tnode{ld})...)
	waitFor(t, "the new leader to apply", 10*time.Second, func() bool { return nl.rep.HighWatermark() > offs[4] })
	off, err = nl.rep.Append(ctx, idemBatch(42, 0, 12, 3), AcksAll)
	if err != nil || off != offs[4] {
		t.Fatalf("retry on the new leader: offset %d %v, want %d", off, err, offs[4])
	}
	if _, err := nl.rep.Append(ctx, idemBatch(42, 0, 15, 3), AcksAll); err != nil {
		t.Fatalf("the next batch: %v", err)
	}
	count := 0
	for _, b := range batches(t, nl.rep) {
		if !b.IsControl() && b.ProducerID() == 42 {
			count++
		}
	}
	if count != 6 {
		t.Fatalf("the log holds %d batches of the producer, want 6", count)
	}
	// And after a restart (state rebuilt from the log, not from memory).
	g.start(ld)
	g.stop(nl)
	g.start(nl)
	ld2 := g.leader()
	waitFor(t, "apply after restart", 20*time.Second, func() bool { return ld2.rep.HighWatermark() > offs[4] })
	off, err = ld2.rep.Append(ctx, idemBatch(42, 0, 12, 3), AcksAll)
	if err != nil || off != offs[4] {
		t.Fatalf("retry after restarts: offset %d %v, want %d", off, err, offs[4])
	}
}
