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
		recs[i] = log.Record{Value: []byte(fmt.Sprintf("p%d-e%d-s%d", pid, epoch, int(seq)+i)), Timestamp: time.Now().UnixMilli()}
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
		if first != 0 {
			return -1, ErrOutOfOrderSequence // a new epoch starts at sequence 0
		}
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
			case k == 6: // a new epoch that does not start at 0
				epoch, seq = epochs[pid]+1, 1+int32(r.IntN(5))
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

// tsBatch is idemBatch with every record at timestamp ts (ms).
func tsBatch(pid int64, epoch int16, seq int32, n int, ts int64) log.Batch {
	recs := make([]log.Record, n)
	for i := range recs {
		recs[i] = log.Record{Value: []byte("x"), Timestamp: ts}
	}
	return log.Batch(log.BuildBatch(nil, log.BatchOptions{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq}, recs))
}

// TestProducerStateExpiry: a producer silent for the expiration (by its
// batches' timestamps) is forgotten at the next sweep; until then its
// retries are duplicates, afterwards its next batch is taken as new, at
// any sequence, as Kafka takes a producer whose state expired.
func TestProducerStateExpiry(t *testing.T) {
	now := time.UnixMilli(10_000_000)
	p := newProducers()
	p.now = func() time.Time { return now }
	p.setBounds(time.Hour, 0)
	commit := func(b log.Batch, off int64) {
		t.Helper()
		dup, reg, err := p.check(b)
		if err != nil || dup != nil || reg == nil {
			t.Fatalf("batch of %d not taken as new: dup %+v err %v", b.ProducerID(), dup, err)
		}
		b.SetBaseOffset(off)
		p.observe(b)
	}
	old := tsBatch(1, 0, 0, 2, now.UnixMilli())
	commit(old, 100)
	// Within the expiration: a retry is a duplicate.
	now = now.Add(59 * time.Minute)
	commit(tsBatch(2, 0, 0, 1, now.UnixMilli()), 102)
	if dup, _, err := p.check(tsBatch(1, 0, 0, 2, 0)); err != nil || dup == nil || dup.offset != 100 {
		t.Fatalf("retry within the expiration: dup %+v err %v", dup, err)
	}
	if held, gone := p.count(); held != 2 || gone != 0 {
		t.Fatalf("held %d forgotten %d, want 2 and 0", held, gone)
	}
	// Past it: the next write sweeps producer 1 away, producer 2 stays.
	now = now.Add(2 * time.Minute)
	commit(tsBatch(3, 0, 0, 1, now.UnixMilli()), 103)
	if held, gone := p.count(); held != 2 || gone != 1 {
		t.Fatalf("after the expiration: held %d forgotten %d, want 2 and 1", held, gone)
	}
	if dup, _, err := p.check(tsBatch(2, 0, 0, 1, 0)); err != nil || dup == nil || dup.offset != 102 {
		t.Fatalf("producer 2 should still be known: dup %+v err %v", dup, err)
	}
	commit(tsBatch(1, 0, 7, 1, now.UnixMilli()), 104)
}

// TestProducerStateCap: past the cap, the least recently written producer
// is forgotten first.
func TestProducerStateCap(t *testing.T) {
	now := time.UnixMilli(10_000_000)
	p := newProducers()
	p.now = func() time.Time { return now }
	p.setBounds(0, 10)
	for pid := int64(0); pid < 25; pid++ {
		b := tsBatch(pid, 0, 0, 1, now.UnixMilli()+pid)
		if _, _, err := p.check(b); err != nil {
			t.Fatal(err)
		}
		b.SetBaseOffset(pid)
		p.observe(b)
	}
	if held, gone := p.count(); held != 10 || gone != 15 {
		t.Fatalf("held %d forgotten %d, want 10 and 15", held, gone)
	}
	for pid := int64(15); pid < 25; pid++ {
		if dup, _, err := p.check(tsBatch(pid, 0, 0, 1, 0)); err != nil || dup == nil || dup.offset != pid {
			t.Fatalf("producer %d (among the newest ten) forgotten: dup %+v err %v", pid, dup, err)
		}
	}
}
