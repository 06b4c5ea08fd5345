package rpc

import (
	"context"
	"encoding/binary"
	"sync"
	"time"

	"github.com/raftlog/raftlog/log"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Fetch: v4–12 (v13+, which name topics by id, are not advertised).
//
// For each partition, in request order: the broker's error (not leader,
// unknown), FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH when the current
// leader epoch (v9+, -1 skips) differs, OFFSET_OUT_OF_RANGE when the
// fetch offset is below the log start or past the high watermark;
// otherwise the whole batches from the one holding the fetch offset, up
// to the partition's max bytes, with the high watermark, the last stable
// offset (= the high watermark: no transactions), the log start offset
// (v5+), no aborted transactions and preferred read replica -1 (v11+).
//
// MaxBytes bounds the whole response: the first partition with data gets
// its first batch whole even when larger than every limit (so a consumer
// always progresses), later ones only batches that fit what is left.
//
// Long poll: while the bytes gathered are below MinBytes, no partition has
// an error and MaxWaitMs (counted from when the request was read) has not
// passed, the fetch waits for any requested partition's high watermark to
// move (Partition.WaitHighWatermark) and reads again. A client that
// disconnects ends its wait.
//
// Fetch sessions (v7+, KIP-227) are not kept: every fetch is a full one and
// is answered with session id 0, which tells the client (kgo, the Java
// client) to stop asking for one. A full fetch (epoch 0: "create", or -1:
// sessionless/close) is served; an incremental one (epoch > 0) is
// answered FETCH_SESSION_ID_NOT_FOUND, an epoch below -1
// INVALID_FETCH_SESSION_EPOCH. Forgotten topics and the rack are ignored;
// the isolation level too, since the last stable offset is the high
// watermark.
func (s *Server) fetch(c *call, req *kmsg.FetchRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	if req.Version >= 7 {
		resp.SessionID = 0
		switch {
		case req.SessionEpoch > 0:
			resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
			return resp, nil
		case req.SessionEpoch < -1:
			resp.ErrorCode = kerr.InvalidFetchSessionEpoch.Code
			return resp, nil
		}
	}

	// Look the partitions up once.
	var parts []fetchPart
	for i := range req.Topics {
		rt := &req.Topics[i]
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			fp := fetchPart{ti: i, req: rp}
			fp.p, fp.fixed = s.b.Partition(rt.Topic, rp.Partition)
			if fp.fixed == nil {
				fp.fixed = checkEpoch(fp.p, rp.CurrentLeaderEpoch)
			}
			parts = append(parts, fp)
		}
	}

	deadline := c.start.Add(time.Duration(req.MaxWaitMillis) * time.Millisecond)
	for {
		total, failed := s.readFetch(parts, req.MaxBytes)
		if total >= int(req.MinBytes) || failed || !time.Now().Before(deadline) {
			break
		}
		if !waitAnyHighWatermark(c.poll, deadline, parts) {
			break
		}
	}

	resp.Topics = make([]kmsg.FetchResponseTopic, len(req.Topics))
	for i := range req.Topics {
		resp.Topics[i] = kmsg.NewFetchResponseTopic()
		resp.Topics[i].Topic = req.Topics[i].Topic
		resp.Topics[i].Partitions = make([]kmsg.FetchResponseTopicPartition, 0, len(req.Topics[i].Partitions))
	}
	for i := range parts {
		fp := &parts[i]
		sp := kmsg.NewFetchResponseTopicPartition()
		sp.Partition = fp.req.Partition
		sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
		sp.PreferredReadReplica = -1
		sp.RecordBatches = fp.records
		if sp.RecordBatches == nil {
			// Empty, not null: some clients take a null record set for
			// a bad one.
			sp.RecordBatches = []byte{}
		}
		if fp.err != nil {
			sp.ErrorCode = s.code(fp.err)
		}
		if fp.hw >= 0 {
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = fp.hw, fp.hw, fp.start
		}
		resp.Topics[fp.ti].Partitions = append(resp.Topics[fp.ti].Partitions, sp)
	}
	return resp, nil
}

// fetchPart is one partition of a fetch.
type fetchPart struct {
	ti    int // index of its topic in the request
	req   *kmsg.FetchRequestTopicPartition
	p     Partition
	fixed error // lookup or epoch error

	// Of the last read.
	err       error
	hw, start int64
	records   []byte
}

// readFetch reads every partition once and returns the bytes gathered and
// whether a partition has an error.
func (s *Server) readFetch(parts []fetchPart, maxBytes int32) (total int, failed bool) {
	left := int(maxBytes)
	for i := range parts {
		fp := &parts[i]
		fp.err, fp.hw, fp.start, fp.records = fp.fixed, -1, -1, nil
		if fp.err != nil {
			failed = true
			continue
		}
		fp.hw, fp.start = fp.p.HighWatermark(), fp.p.LogStartOffset()
		off := fp.req.FetchOffset
		if off < fp.start || off > fp.hw {
			fp.err = kerr.OffsetOutOfRange
			failed = true
			continue
		}
		if off == fp.hw {
			continue
		}
		limit := min(int(fp.req.PartitionMaxBytes), left)
		if total > 0 && limit <= 0 {
			continue
		}
		data, err := fp.p.Read(off, max(limit, 1))
		if err != nil {
			fp.err = err
			failed = true
			continue
		}
		if total > 0 {
			data = trimBatches(data, limit)
		}
		fp.records = data
		total += len(data)
		left -= len(data)
	}
	return total, failed
}

// trimBatches cuts data after its last whole batch within limit bytes.
func trimBatches(data []byte, limit int) []byte {
	cut := 0
	for cut < len(data) {
		rest := data[cut:]
		if len(rest) < log.LogOverhead {
			break
		}
		n := int(int32(binary.BigEndian.Uint32(rest[8:]))) + log.LogOverhead
		if n <= log.LogOverhead || n > len(rest) || cut+n > limit {
			break
		}
		cut += n
	}
	return data[:cut]
}

// waitAnyHighWatermark waits until the high watermark of one of parts
// moves past what the last read saw, the deadline passes or ctx ends. It
// reports whether a high watermark moved.
func waitAnyHighWatermark(ctx context.Context, deadline time.Time, parts []fetchPart) bool {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var waiting []*fetchPart
	for i := range parts {
		if fp := &parts[i]; fp.err == nil && fp.p != nil {
			waiting = append(waiting, fp)
		}
	}
	switch len(waiting) {
	case 0:
		<-ctx.Done()
		return false
	case 1:
		fp := waiting[0]
		return fp.p.WaitHighWatermark(ctx, fp.hw) > fp.hw
	}
	moved := make(chan struct{})
	var (
		once     sync.Once
		wg       sync.WaitGroup
		panicked any
		pmu      sync.Mutex
	)
	for _, fp := range waiting {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if v := recover(); v != nil {
					pmu.Lock()
					panicked = v
					pmu.Unlock()
					cancel()
				}
			}()
			if fp.p.WaitHighWatermark(ctx, fp.hw) > fp.hw {
				once.Do(func() { close(moved) })
				cancel()
			}
		}()
	}
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
	select {
	case <-moved:
		return true
	default:
		return false
	}
}
