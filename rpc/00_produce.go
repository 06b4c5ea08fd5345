package rpc

import (
	"context"
	"fmt"
	"sync"

	"github.com/raftlog/raftlog/log"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Produce: v3–11.
//
// Each partition's records hold one or more RecordBatch v2. They are all
// checked first (framing, magic 2, CRC, record count, no control batch,
// no transactional batch), so a bad batch fails the partition before
// anything is appended; then each is appended in order with
// Partition.Append, stopping at the first error. The answer is the base
// offset of the first batch, log append time -1 (CreateTime only) and the
// log start offset (v5+). Partitions of one request are appended
// concurrently. Requests of one connection are started one after another,
// so the order of a producer's batches on a partition is kept; on a
// PipelinedPartition, a request's single-batch appends are only started,
// and the connection goes on to the next Produce request while they
// commit (see Server).
//
// Errors: NOT_LEADER_OR_FOLLOWER and UNKNOWN_TOPIC_OR_PARTITION from the
// broker; CORRUPT_MESSAGE for bad batches (magic other than 2 included);
// INVALID_RECORD for a control batch; MESSAGE_TOO_LARGE from the log;
// REQUEST_TIMED_OUT when the request's timeout passes before the append is
// acknowledged; INVALID_REQUIRED_ACKS for acks other than 0, 1, -1.
//
// Transactions are not supported: a request with a transactional id, or a
// transactional batch, is answered INVALID_TXN_STATE. Idempotent batches
// are appended as they are (the broker may check their sequences).
//
// acks=0: nothing is answered; as Kafka, the connection is closed when an
// append failed, the only way to tell the producer.
func (s *Server) produce(c *call, req *kmsg.ProduceRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	var reqErr error
	switch {
	case req.Acks != 0 && req.Acks != 1 && req.Acks != -1:
		reqErr = kerr.InvalidRequiredAcks
	case req.TransactionID != nil:
		reqErr = kerr.InvalidTxnState
	}

	ctx, cancel := timeoutCtx(c.ctx, req.TimeoutMillis)
	pipelined := false
	defer func() {
		if !pipelined {
			cancel()
		}
	}()

	// One job per topic-partition; a partition named twice is appended in
	// request order by one job.
	type job struct {
		topic     string
		partition int32
		entries   []*kmsg.ProduceResponseTopicPartition
		records   [][]byte
		// Set when the job's one batch was started on a
		// PipelinedPartition and waits to be committed.
		p    Partition
		wait func() (int64, error)
		// settled: the outcome of wait is in the response.
		settled bool
	}
	var (
		jobs  []*job
		index = make(map[tp]*job)
	)
	resp.Topics = make([]kmsg.ProduceResponseTopic, len(req.Topics))
	for i := range req.Topics {
		rt := &req.Topics[i]
		st := &resp.Topics[i]
		*st = kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		st.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			sp := &st.Partitions[j]
			*sp = kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.BaseOffset = -1
			if reqErr != nil {
				sp.ErrorCode = s.code(reqErr)
				continue
			}
			k := tp{rt.Topic, rp.Partition}
			jb := index[k]
			if jb == nil {
				jb = &job{topic: rt.Topic, partition: rp.Partition}
				index[k] = jb
				jobs = append(jobs, jb)
			}
			jb.entries = append(jb.entries, sp)
			jb.records = append(jb.records, rp.Records)
		}
	}

	failed := func(jb *job, sp *kmsg.ProduceResponseTopicPartition, err error) {
		s.logger.Debug("produce failed", "topic", jb.topic, "partition", jb.partition, "client_id", c.clientID, "error", err)
		sp.ErrorCode = s.code(err)
	}
	run := func(jb *job) {
		p, err := s.b.Partition(jb.topic, jb.partition)
		if pp, ok := p.(PipelinedPartition); ok && err == nil && len(jb.entries) == 1 && req.Acks != 0 {
			// The common case: one batch for the partition. Its append is
			// started here, in request order, and waited for after the
			// request's other partitions are started (and, on the
			// connection, while the next requests are started).
			if batches, berr := splitBatches(jb.records[0]); berr == nil && len(batches) == 1 {
				wait, serr := pp.StartAppend(ctx, batches[0], int(req.Acks))
				if serr != nil {
					failed(jb, jb.entries[0], serr)
					return
				}
				jb.p, jb.wait = p, wait
				return
			}
		}
		for i, sp := range jb.entries {
			if err != nil {
				sp.ErrorCode = s.code(err)
				continue
			}
			base, perr := s.appendRecords(ctx, p, jb.records[i], int(req.Acks))
			if perr != nil {
				failed(jb, sp, perr)
				continue
			}
			sp.BaseOffset = base
			sp.LogStartOffset = p.LogStartOffset()
		}
	}
	parallel(jobs, maxParallel, run)

	var waiting []*job
	for _, jb := range jobs {
		if jb.wait != nil {
			waiting = append(waiting, jb)
		}
	}
	if len(waiting) > 0 {
		// The connection answers this request once c.wait returns, and
		// meanwhile serves the Produce requests behind it.
		pipelined = true
		var (
			mu      sync.Mutex // resp, expired and the jobs' settled
			expired bool
		)
		settle := func(jb *job, base int64, err error) {
			mu.Lock()
			defer mu.Unlock()
			if expired {
				return
			}
			sp := jb.entries[0]
			if err != nil {
				failed(jb, sp, err)
			} else {
				sp.BaseOffset = base
				sp.LogStartOffset = jb.p.LogStartOffset()
			}
			jb.settled = true
		}
		c.wait = func() {
			defer cancel()
			// Each partition is waited for on a goroutine of its own
			// (the last on this one), so that one stalling past the
			// timeout does not take the others along: each is answered
			// its own outcome. Waited for even once expired: a wait
			// that fails settles the producer state of its batch.
			parallel(waiting, len(waiting), func(jb *job) {
				base, err := jb.wait()
				settle(jb, base, err)
			})
		}
		// The request's timeout passed with commits still awaited (a
		// quorum that stays out of reach while the leader keeps its
		// lease): those partitions are answered REQUEST_TIMED_OUT, as
		// Kafka answers from its purgatory. Their batches may still be
		// committed; an idempotent producer's retry then gets its offset.
		c.expire = func() {
			mu.Lock()
			defer mu.Unlock()
			expired = true
			for _, jb := range waiting {
				if !jb.settled {
					failed(jb, jb.entries[0], context.DeadlineExceeded)
				}
			}
		}
		c.deadline, _ = ctx.Deadline()
		return resp, nil
	}

	if req.Acks == 0 {
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode != 0 {
					return nil, fmt.Errorf("acks=0 produce to %s/%d failed: %s", rt.Topic, rp.Partition, kerr.ErrorForCode(rp.ErrorCode))
				}
			}
		}
		return nil, nil
	}
	return resp, nil
}

type tp struct {
	topic     string
	partition int32
}

// maxParallel bounds the goroutines one request uses.
const maxParallel = 16

// parallel runs fn on every job, up to limit at a time, and returns when
// all are done; the last job runs on the caller's goroutine. A panic in
// fn is re-raised in the caller's goroutine (where the connection's
// recover catches it).
func parallel[T any](jobs []T, limit int, fn func(T)) {
	switch len(jobs) {
	case 0:
		return
	case 1:
		fn(jobs[0])
		return
	}
	var (
		wg       sync.WaitGroup
		sem      chan struct{} // nil: no bound needed
		panicked any
		pmu      sync.Mutex
	)
	if limit < len(jobs) {
		sem = make(chan struct{}, limit)
	}
	run := func(j T) {
		defer func() {
			if v := recover(); v != nil {
				pmu.Lock()
				if panicked == nil {
					panicked = v
				}
				pmu.Unlock()
			}
			if sem != nil {
				<-sem
			}
			wg.Done()
		}()
		fn(j)
	}
	for i, j := range jobs {
		if sem != nil {
			sem <- struct{}{}
		}
		wg.Add(1)
		if i == len(jobs)-1 {
			run(j)
		} else {
			go run(j)
		}
	}
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
}

// appendRecords checks every batch of records, then appends them in order
// and returns the base offset of the first.
func (s *Server) appendRecords(ctx context.Context, p Partition, records []byte, acks int) (int64, error) {
	batches, err := splitBatches(records)
	if err != nil {
		return -1, err
	}
	first := int64(-1)
	for i, b := range batches {
		base, err := p.Append(ctx, b, acks)
		if err != nil {
			if i > 0 {
				err = fmt.Errorf("batch %d of %d (the ones before are appended from %d): %w", i+1, len(batches), first, err)
			}
			return -1, err
		}
		if i == 0 {
			first = base
		}
	}
	return first, nil
}

// splitBatches splits a partition's produced records into their batches,
// each validated in full (log.SplitBatches: the one check of a batch on
// its way into the log; the partition's size limit is the replica's), and
// refuses what a producer may not write.
func splitBatches(records []byte) ([]log.Batch, error) {
	batches, err := log.SplitBatches(records, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", kerr.CorruptMessage, err)
	}
	for _, b := range batches {
		attrs := b.Attributes()
		if attrs&log.AttrControl != 0 {
			return nil, fmt.Errorf("%w: a client may not produce control batches", kerr.InvalidRecord)
		}
		if attrs&log.AttrTransactional != 0 {
			return nil, fmt.Errorf("%w: transactions are not supported", kerr.InvalidTxnState)
		}
	}
	return batches, nil
}
