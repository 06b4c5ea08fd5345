package replication

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/raftlog/raftlog/log"
)

// Idempotent producers. Each partition keeps, per producer id, the epoch
// and the sequence ranges of its last five batches (as Kafka does), so a
// retried batch is answered with its original offset instead of being
// written twice, an out-of-order one is refused, and a fenced epoch too.
//
// The state has two layers. The applied layer is kept by every replica
// from the committed batches it applies (and rebuilt from its log when it
// opens), so a new leader has it. The leader adds a pending layer: batches
// handed to Raft and not yet applied, so that several in flight from one
// producer are checked against each other. Leadership changes drop the
// pending layer.
//
// The applied layer is bounded as Kafka bounds it: a producer that has
// written nothing for the expiration (producer.id.expiration.ms, by the
// largest timestamp of its batches, as Kafka judges it) is forgotten, and
// past a cap on ids per partition the least recently written is. A
// forgotten producer is treated as new: its next batch is accepted at
// whatever sequence it carries, as Kafka accepts one whose state expired.

// Errors of the producer checks; rpc maps them to Kafka's codes.
var (
	ErrOutOfOrderSequence = errors.New("replication: out of order sequence number")
	ErrProducerFenced     = errors.New("replication: producer epoch is fenced by a newer one")
	ErrDuplicateSequence  = errors.New("replication: duplicate of a batch older than the last five")
)

const producerWindow = 5

type seqRange struct {
	first, last int32
	offset      int64 // base offset; -1 while pending
	done        chan struct{}
	err         error
}

// Defaults of the producer-state bounds.
const (
	DefaultProducerIDExpiration = 24 * time.Hour // Kafka's producer.id.expiration.ms
	DefaultMaxProducerIDs       = 100000         // per partition
)

type producerState struct {
	epoch   int16
	lastTS  int64      // largest batch timestamp seen (ms)
	batches []seqRange // oldest first, at most producerWindow
}

type producers struct {
	mu        sync.Mutex
	applied   map[int64]*producerState
	pending   map[int64][]*seqRange
	pendEpoch map[int64]int16 // epoch of a producer's pending batches

	expiryMs  int64            // forget a producer silent this long (ms)
	maxIDs    int              // at most this many producers in the applied layer
	now       func() time.Time // wall clock (tests set it)
	lastSweep int64            // ms of the last expiry sweep
	expired   int              // producers forgotten so far (expiry or cap)
}

func newProducers() *producers {
	return &producers{applied: map[int64]*producerState{}, pending: map[int64][]*seqRange{}, pendEpoch: map[int64]int16{},
		expiryMs: DefaultProducerIDExpiration.Milliseconds(), maxIDs: DefaultMaxProducerIDs, now: time.Now}
}

// setBounds sets the expiration and the cap (zero values keep defaults).
func (p *producers) setBounds(expiry time.Duration, maxIDs int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if expiry > 0 {
		p.expiryMs = expiry.Milliseconds()
	}
	if maxIDs > 0 {
		p.maxIDs = maxIDs
	}
}

// count is the number of producers the applied layer holds, and how many
// it has forgotten.
func (p *producers) count() (held, forgotten int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.applied), p.expired
}

// sweepInterval is how often observe looks for expired producers.
func (p *producers) sweepInterval() int64 { return min(max(p.expiryMs/10, 1000), 60_000) }

// bound applies the expiration and the cap; mu is held.
func (p *producers) bound() {
	now := p.now().UnixMilli()
	if now-p.lastSweep >= p.sweepInterval() {
		p.lastSweep = now
		for pid, st := range p.applied {
			if now-st.lastTS >= p.expiryMs && len(p.pending[pid]) == 0 {
				delete(p.applied, pid)
				p.expired++
			}
		}
	}
	for len(p.applied) > p.maxIDs {
		oldest, ts := int64(-1), int64(0)
		for pid, st := range p.applied {
			if len(p.pending[pid]) == 0 && (oldest < 0 || st.lastTS < ts) {
				oldest, ts = pid, st.lastTS
			}
		}
		if oldest < 0 {
			return
		}
		delete(p.applied, oldest)
		p.expired++
	}
}

// nextSeq is the sequence that follows last (sequences wrap to 0).
func nextSeq(last int32) int32 {
	if last == 1<<31-1 {
		return 0
	}
	return last + 1
}

// observe records a committed batch in the applied layer (FSM).
func (p *producers) observe(b log.Batch) {
	pid := b.ProducerID()
	if pid < 0 || b.IsControl() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.applied[pid]
	if st == nil || b.ProducerEpoch() > st.epoch {
		st = &producerState{epoch: b.ProducerEpoch()}
		p.applied[pid] = st
	}
	if b.ProducerEpoch() < st.epoch {
		return
	}
	ts := b.MaxTimestamp()
	if ts <= 0 {
		ts = p.now().UnixMilli() // a batch without timestamps: when it was seen
	}
	st.lastTS = max(st.lastTS, ts)
	defer p.bound()
	first := b.BaseSequence()
	last := first + b.LastOffsetDelta()
	for _, r := range st.batches {
		if r.first == first && r.last == last {
			return
		}
	}
	st.batches = append(st.batches, seqRange{first: first, last: last, offset: b.BaseOffset()})
	if len(st.batches) > producerWindow {
		st.batches = st.batches[len(st.batches)-producerWindow:]
	}
	// The pending copy of this batch is done.
	q := p.pending[pid]
	for i, r := range q {
		if r.first == first && r.last == last {
			r.offset = b.BaseOffset()
			close(r.done)
			p.pending[pid] = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(p.pending[pid]) == 0 {
		delete(p.pending, pid)
		delete(p.pendEpoch, pid)
	}
}

// dropPending fails every pending batch (leadership lost).
func (p *producers) dropPending(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pid, q := range p.pending {
		for _, r := range q {
			r.err = err
			close(r.done)
		}
		delete(p.pending, pid)
		delete(p.pendEpoch, pid)
	}
}

// check decides what to do with batch b on the leader: a non-nil dup is a
// batch already written or in flight (wait on dup.done, answer dup.offset);
// otherwise, with a nil error, b is registered as pending and returned as
// reg, which the caller must finish (done/failed).
func (p *producers) check(b log.Batch) (dup, reg *seqRange, err error) {
	pid := b.ProducerID()
	if pid < 0 {
		return nil, nil, nil
	}
	epoch, first := b.ProducerEpoch(), b.BaseSequence()
	last := first + b.LastOffsetDelta()
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.applied[pid]
	q := p.pending[pid]
	curEpoch := int16(-1)
	var window []*seqRange
	if st != nil {
		curEpoch = st.epoch
		for i := range st.batches {
			window = append(window, &st.batches[i])
		}
	}
	for _, r := range q {
		window = append(window, r)
	}
	if len(q) > 0 {
		curEpoch = max(curEpoch, p.pendEpoch[pid])
	}
	switch {
	case curEpoch >= 0 && epoch < curEpoch:
		return nil, nil, fmt.Errorf("%w: epoch %d, current %d", ErrProducerFenced, epoch, curEpoch)
	case curEpoch >= 0 && epoch > curEpoch && first != 0:
		return nil, nil, fmt.Errorf("%w: a new epoch %d must start at sequence 0, got %d", ErrOutOfOrderSequence, epoch, first)
	case epoch > curEpoch:
		window = nil // a new epoch starts its sequences again
	}
	for _, r := range window {
		if r.first == first && r.last == last {
			return r, nil, nil
		}
	}
	if n := len(window); n > 0 {
		want := nextSeq(window[n-1].last)
		if first != want {
			if seqBefore(first, window[0].first) {
				return nil, nil, fmt.Errorf("%w: sequence %d is older than the last %d batches", ErrDuplicateSequence, first, producerWindow)
			}
			return nil, nil, fmt.Errorf("%w: got %d, expected %d", ErrOutOfOrderSequence, first, want)
		}
	}
	reg = &seqRange{first: first, last: last, offset: -1, done: make(chan struct{})}
	p.pending[pid] = append(p.pending[pid], reg)
	p.pendEpoch[pid] = epoch
	return nil, reg, nil
}

// seqBefore reports whether a comes before b (no wrap handling beyond the
// int32 range: sequences wrap to 0 after MaxInt32).
func seqBefore(a, b int32) bool { return a < b }

// fail removes a pending batch that did not make it into the log.
func (p *producers) fail(r *seqRange, pid int64, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.pending[pid]
	for i, x := range q {
		if x == r {
			r.err = err
			close(r.done)
			p.pending[pid] = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(p.pending[pid]) == 0 {
		delete(p.pending, pid)
		delete(p.pendEpoch, pid)
	}
}
