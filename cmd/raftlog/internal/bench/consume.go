package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// consumeIdle ends a consume from the start when nothing arrives for this
// long before every partition reached its end offset: the offsets left
// are then those of Raft's entries that carry no records (a leader's
// first entry, membership changes), which a consumer steps over.
const consumeIdle = 2 * time.Second

// Consume reads c.Topic with one kgo client (no group) and counts what it
// receives until c.Duration has passed or c.Records arrived. From the
// start (the default) it also stops once every partition is read up to
// the end offset it had when the consume began; with c.FromEnd it waits
// for new records and measures their end-to-end latency.
func Consume(ctx context.Context, c Config) (Result, error) {
	if err := c.check(false); err != nil {
		return Result{}, err
	}
	res := Result{Kind: "consume", Topic: c.Topic}
	// The client fetches as soon as it exists: the clock starts before.
	start := time.Now()
	reset := kgo.NewOffset().AtStart()
	if c.FromEnd {
		reset = kgo.NewOffset().AtEnd()
	}
	cl, err := c.client(kgo.ConsumeTopics(c.Topic), kgo.ConsumeResetOffset(reset))
	if err != nil {
		return res, err
	}
	defer cl.Close()
	if res.Partitions, err = partitionCount(ctx, cl, c.Topic); err != nil {
		return res, err
	}
	// ends[p] is the offset partition p must be read up to; absent once it
	// has been.
	ends := map[int32]int64{}
	if !c.FromEnd {
		adm := kadm.NewClient(cl)
		starts, err := adm.ListStartOffsets(ctx, c.Topic)
		if err != nil {
			return res, err
		}
		endOffs, err := adm.ListEndOffsets(ctx, c.Topic)
		if err != nil {
			return res, err
		}
		endOffs.Each(func(o kadm.ListedOffset) {
			if s, ok := starts.Lookup(o.Topic, o.Partition); ok && o.Offset > s.Offset {
				ends[o.Partition] = o.Offset
			}
		})
		if len(ends) == 0 {
			res.finish(0)
			return res, nil
		}
	}

	var (
		hist         Histogram
		recs, bytes  atomic.Int64
		runCtx, stop = context.WithTimeout(ctx, c.Duration)
		last         = start // when the last record arrived
		stopProgress = progress(c.Progress, &recs, &bytes)
		errs         int64
		firstErr     string
		countReached bool
	)
	defer stop()
	for runCtx.Err() == nil && !countReached && (c.FromEnd || len(ends) > 0) {
		pctx, pcancel := runCtx, context.CancelFunc(func() {})
		if !c.FromEnd {
			pctx, pcancel = context.WithTimeout(runCtx, consumeIdle)
		}
		fetches := cl.PollFetches(pctx)
		now := time.Now()
		pcancel()
		got := 0
		fetches.EachError(func(_ string, _ int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return
			}
			errs++
			if firstErr == "" {
				firstErr = err.Error()
			}
		})
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			for _, r := range p.Records {
				if c.Records > 0 && recs.Load() >= c.Records {
					countReached = true
					return
				}
				got++
				recs.Add(1)
				bytes.Add(int64(len(r.Value)))
				// From the end every record read was appended after the
				// consumer found that end, one stamped a moment before its
				// start included (it was in flight then); from the start,
				// only those stamped since measure this read.
				if t, ok := stamped(r.Value); ok && (c.FromEnd || !t.Before(start)) {
					hist.Record(now.Sub(t))
				}
				if end, ok := ends[r.Partition]; ok && r.Offset+1 >= end {
					delete(ends, r.Partition)
				}
			}
			if c.Records > 0 && recs.Load() >= c.Records {
				countReached = true
			}
		})
		if got > 0 {
			last = now
		} else if !c.FromEnd && pctx.Err() != nil && runCtx.Err() == nil {
			break // idle at the tail
		}
	}
	stopProgress()
	res.Records, res.Bytes, res.Errors, res.FirstError = recs.Load(), bytes.Load(), errs, firstErr
	res.EndToEnd = quantiles(&hist)
	elapsed := time.Since(start)
	if runCtx.Err() == nil {
		// Stopped by itself before the deadline (at the end offsets, the
		// record count or an idle tail): the time it took is up to the
		// last record.
		elapsed = last.Sub(start)
	}
	res.finish(elapsed)
	return res, nil
}
