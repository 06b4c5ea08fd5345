package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log"
)

// Append replicates one record batch and returns its base offset. The
// batch must be one whole v2 batch that log.SplitBatches (or
// ValidateBatch) accepted: the replica checks only its size against the
// log's limit and refuses control batches, which are Raft's and the
// replica's own. With acks=-1 and acks=1 it returns after the batch is
// committed on a quorum (raftlog does not acknowledge a write a single
// node holds: acks=1 is served as acks=all); with acks=0 it returns once the
// batch is handed to Raft, with offset -1. batch is rewritten in place
// (baseOffset, partitionLeaderEpoch) and must not be reused. When ctx ends
// before the commit, Append returns its error; the batch may still be
// committed (Kafka's REQUEST_TIMED_OUT), and a retry of an idempotent
// producer's batch is then answered with its offset.
func (r *Replica) Append(ctx context.Context, batch []byte, acks int) (int64, error) {
	p, err := r.StartAppend(ctx, batch, acks)
	if err != nil {
		return -1, err
	}
	if ctx.Done() == nil {
		return p.Wait()
	}
	type result struct {
		off int64
		err error
	}
	// Raft's future has no channel to select on: a goroutine waits for it.
	done := make(chan result, 1)
	go func() {
		off, err := p.Wait()
		done <- result{off, err}
	}()
	select {
	case res := <-done:
		return res.off, res.err
	case <-ctx.Done():
		select {
		case res := <-done: // both at once: the outcome wins
			return res.off, res.err
		default:
		}
		return -1, fmt.Errorf("replication: waiting for the commit: %w", ctx.Err())
	}
}

// PendingAppend is a batch StartAppend handed to Raft; Wait returns its
// outcome.
type PendingAppend struct {
	ctx context.Context
	r   *Replica
	// One of: dup, a retry of a batch already written or in flight;
	// f, the batch's own Raft entry; neither, acks=0 (offset -1).
	dup *seqRange
	f   raft.ApplyFuture
	reg *seqRange // the producer-state entry f settles, nil if none
	pid int64
}

// StartAppend is the first half of Append: it checks the batch's size
// and kind (not its contents: see Append) and the producer's sequence,
// and hands the batch to Raft, in the order of the
// calls, and returns without waiting for the commit. Wait, called from
// any goroutine, is the second half. A caller can so keep several
// appends of one producer in flight (Produce requests pipelined on a
// connection) and still have them written in the order it started them.
func (r *Replica) StartAppend(ctx context.Context, batch []byte, acks int) (*PendingAppend, error) {
	if max := r.log.Config().MaxBatchBytes; max > 0 && len(batch) > max {
		return nil, fmt.Errorf("replication: %w: %d bytes, limit %d", log.ErrBatchTooLarge, len(batch), max)
	}
	if len(batch) < log.BatchHeaderSize || log.Batch(batch).Size() != len(batch) {
		return nil, fmt.Errorf("replication: %w: %d bytes are not one whole batch", log.ErrCorruptBatch, len(batch))
	}
	if log.Batch(batch).IsControl() {
		return nil, fmt.Errorf("replication: %w: producers may not write control batches", log.ErrCorruptBatch)
	}
	if r.raft.State() != raft.Leader {
		return nil, r.notLeader()
	}
	timeout := applyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	b := log.Batch(batch)
	r.appendMu.Lock()
	dup, reg, err := r.prod.check(b)
	if err != nil {
		r.appendMu.Unlock()
		return nil, err
	}
	if dup != nil {
		r.appendMu.Unlock()
		return &PendingAppend{ctx: ctx, r: r, dup: dup}, nil
	}
	f := r.raft.Apply(batch, timeout)
	r.appendMu.Unlock()
	pid := b.ProducerID()
	if acks == AcksNone {
		if reg != nil {
			go func() {
				if err := f.Error(); err != nil {
					r.prod.fail(reg, pid, err)
				}
			}()
		}
		return &PendingAppend{ctx: ctx, r: r}, nil
	}
	return &PendingAppend{ctx: ctx, r: r, f: f, reg: reg, pid: pid}, nil
}

// Wait blocks until the batch is committed on a quorum (acks 1 and -1)
// and returns its base offset; -1 at once for acks=0. For the batch's own
// entry it waits however long the outcome takes (Raft's future cannot be
// abandoned without a goroutine per wait, a hand-off on every produce): a
// caller with a deadline answers on its own when it passes, as the rpc
// server does for Produce, and still calls Wait, whose failure settles
// the producer state of the batch.
func (p *PendingAppend) Wait() (int64, error) {
	r := p.r
	if p.dup != nil {
		// A retry of a batch already written (or in flight): its offset.
		if p.dup.done != nil {
			select {
			case <-p.dup.done:
			case <-p.ctx.Done():
				return -1, p.ctx.Err()
			}
		}
		if p.dup.err != nil {
			return -1, r.notLeader()
		}
		return p.dup.offset, nil
	}
	if p.f == nil {
		return -1, nil
	}
	if err := p.f.Error(); err != nil {
		if p.reg != nil {
			r.prod.fail(p.reg, p.pid, err)
		}
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return -1, r.notLeader()
		}
		return -1, err
	}
	switch res := p.f.Response().(type) {
	case AppliedEntry:
		return res.BaseOffset, nil
	case error:
		return -1, res
	default:
		return -1, fmt.Errorf("replication: unexpected apply result %T", res)
	}
}
