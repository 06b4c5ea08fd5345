package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A value of at least stampLen bytes starts with stampMagic and the
// producer's clock (Unix nanoseconds, big endian) when the record was due:
//
//	0        8                16           Size
//	+--------+----------------+------------+
//	|rlbench1| due (int64 BE) | zeros ...  |
//	+--------+----------------+------------+
//
// A consumer on the same machine subtracts it from its own clock for the
// end-to-end latency. Frozen: consumers read values of older producers.
const (
	stampMagic = "rlbench1"
	stampLen   = 16
)

// pendingRecord is a record the producer has in flight.
type pendingRecord struct {
	rec  kgo.Record
	due  time.Time
	done func(*kgo.Record, error) // the record's promise, made once
}

func stamp(v []byte, t time.Time) {
	if len(v) < stampLen {
		return
	}
	copy(v, stampMagic)
	binary.BigEndian.PutUint64(v[8:], uint64(t.UnixNano()))
}

func stamped(v []byte) (time.Time, bool) {
	if len(v) < stampLen || string(v[:8]) != stampMagic {
		return time.Time{}, false
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(v[8:]))), true
}

// randomValue is a value of n random bytes: incompressible, so that a
// codec cannot shrink what is measured. Values are reused once
// acknowledged, so a batch may hold the same value twice (which a codec
// with a window larger than a value could exploit).
func randomValue(n int) *[]byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], rand.Uint64())
		copy(b[i:], w[:])
	}
	return &b
}

// flushTimeout bounds the wait for the acknowledgements of the records in
// flight when a produce run ends.
const flushTimeout = 30 * time.Second

// pacingSlack: a record due less than this far ahead is sent at once
// rather than after a sleep (timers are coarser than this).
const pacingSlack = 200 * time.Microsecond

// Produce writes records of c.Size bytes to c.Topic with c.Producers kgo
// clients, spread round-robin over its partitions, until c.Duration has
// passed or c.Records were handed to the clients, then waits for the
// acknowledgements in flight. The topic must exist (EnsureTopic).
func Produce(ctx context.Context, c Config) (Result, error) {
	if err := c.check(true); err != nil {
		return Result{}, err
	}
	res := Result{Kind: "produce", Topic: c.Topic, Size: c.Size, Acks: c.Acks.String(), Producers: c.Producers, TargetRate: c.Rate}
	var clients []*kgo.Client
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
	}()
	codec, _ := compression(c.Compression) // checked
	for i := 0; i < c.Producers; i++ {
		opts := append(c.Acks.opts(), kgo.DefaultProduceTopic(c.Topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
			kgo.ProducerBatchCompression(codec))
		if c.Linger != 0 {
			opts = append(opts, kgo.ProducerLinger(max(c.Linger, 0)))
		}
		cl, err := c.client(opts...)
		if err != nil {
			return res, err
		}
		clients = append(clients, cl)
	}
	if n, err := partitionCount(ctx, clients[0], c.Topic); err != nil {
		return res, err
	} else {
		res.Partitions = n
	}

	var (
		hist            Histogram
		acked, bytes    atomic.Int64
		failed, issued  atomic.Int64
		errMu           sync.Mutex
		firstErr        string
		runCtx, stopRun = context.WithTimeout(ctx, c.Warmup+c.Duration)
	)
	defer stopRun()
	stopProgress := progress(c.Progress, &acked, &bytes)
	var worst []atomic.Int64 // per TimelineStep of due time
	if c.Timeline {
		worst = make([]atomic.Int64, c.Duration/TimelineStep+1)
	}
	// The warm-up's records go out at the same pace through the same
	// clients (connections open, producer id and metadata loaded, batches
	// flowing); only those due from measured on are counted.
	start := time.Now()
	measured := start.Add(c.Warmup)
	// A record, its due time and its promise are reused once acknowledged
	// (kgo lets a promise change its record): the client in the same
	// process as the clusters measured allocates nothing per record, and
	// its collections do not stand in for theirs.
	var pool sync.Pool
	newPending := func() *pendingRecord {
		p := &pendingRecord{rec: kgo.Record{Value: *randomValue(c.Size)}}
		p.done = func(r *kgo.Record, err error) {
			due := p.due
			switch {
			case err != nil:
				failed.Add(1)
				errMu.Lock()
				if firstErr == "" {
					firstErr = err.Error()
				}
				errMu.Unlock()
			case due.Before(measured): // a warm-up record: not counted
			default:
				lat := time.Since(due)
				hist.Record(lat)
				if w := int(due.Sub(measured) / TimelineStep); w < len(worst) {
					raise(&worst[w], int64(lat))
				}
				acked.Add(1)
				bytes.Add(int64(len(r.Value)))
			}
			p.rec = kgo.Record{Value: p.rec.Value}
			pool.Put(p)
		}
		return p
	}
	var wg sync.WaitGroup
	for _, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				i := issued.Add(1) - 1
				if c.Records > 0 && i >= c.Records {
					return
				}
				due := time.Now()
				if c.Rate > 0 {
					at := start.Add(time.Duration(float64(i) / c.Rate * float64(time.Second)))
					if d := time.Until(at); d > pacingSlack {
						select {
						case <-runCtx.Done():
							return
						case <-time.After(d):
						}
						due = time.Now()
					}
					// Late records count their lateness: the latency runs
					// from the slot they were due in, not from when the
					// loop got round to them.
					if at.Before(due) {
						due = at
					}
				}
				p, _ := pool.Get().(*pendingRecord)
				if p == nil {
					p = newPending()
				}
				p.due = due
				stamp(p.rec.Value, due)
				// ctx, not runCtx: records still buffered when the run
				// ends are sent and acknowledged, not failed.
				cl.Produce(ctx, &p.rec, p.done)
			}
		}()
	}
	wg.Wait()
	fctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	var flushErr error
	for _, cl := range clients {
		if err := cl.Flush(fctx); err != nil && flushErr == nil {
			flushErr = fmt.Errorf("waiting for acknowledgements: %w", err)
		}
	}
	elapsed := max(time.Since(measured), time.Millisecond) // a count bound can end the run in its warm-up
	stopProgress()
	res.Records, res.Bytes, res.Errors = acked.Load(), bytes.Load(), failed.Load()
	errMu.Lock()
	res.FirstError = firstErr
	errMu.Unlock()
	res.Latency = quantiles(&hist)
	for i := range worst {
		res.Timeline = append(res.Timeline, time.Duration(worst[i].Load()))
	}
	res.finish(elapsed)
	if flushErr != nil && !errors.Is(flushErr, context.Canceled) {
		return res, flushErr
	}
	return res, nil
}

// TimelineStep is the width of a step of Result.Timeline.
const TimelineStep = 100 * time.Millisecond

// progress calls fn every 100 ms with the counters until the returned
// function is called (which makes a last call).
func progress(fn func(records, bytes int64), recs, bytes *atomic.Int64) (stop func()) {
	if fn == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fn(recs.Load(), bytes.Load())
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		fn(recs.Load(), bytes.Load())
	}
}
