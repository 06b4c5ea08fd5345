package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The linearizability workload: one partition of its own topic used as a
// register. A write produces a value (acks=all) and is told its offset; a
// read asks the partition's leader for its high watermark and fetches the
// last record below it. porcupine then checks that some order of the
// operations, each taking effect between its call and its return, explains
// every answer: offsets grow with that order, and a read returns the last
// value written before it. A write that failed may or may not have taken
// effect (it is left open to the end of the history); a read that failed
// had no effect and is dropped.

const linTopic = "jepsen-lin"

// linInput is an operation's argument; linOutput its answer.
type linInput struct {
	Write bool
	Value string
}

type linOutput struct {
	Unknown bool   // a write whose outcome is not known
	Offset  int64  // the write's offset, or the read record's
	Value   string // the read value
}

// linState is the register: the last value and its offset (-1: unknown,
// after a write whose offset was never learned).
type linState struct {
	Offset int64
	Value  string
}

// linModel is the register's sequential specification. The partition
// starts with the harness's warm-up record, at an offset the model does
// not know.
var linModel = porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{linState{Offset: -1, Value: "warmup"}} },
	Step: func(state, input, output interface{}) []interface{} {
		s, in, out := state.(linState), input.(linInput), output.(linOutput)
		if in.Write {
			if out.Unknown {
				// It did not happen, or it did at an offset never told.
				return []interface{}{s, linState{Offset: -1, Value: in.Value}}
			}
			if s.Offset >= 0 && out.Offset <= s.Offset {
				return nil
			}
			return []interface{}{linState{Offset: out.Offset, Value: in.Value}}
		}
		if out.Value != s.Value || (s.Offset >= 0 && out.Offset != s.Offset) {
			return nil
		}
		return []interface{}{s}
	},
	DescribeOperation: func(input, output interface{}) string {
		in, out := input.(linInput), output.(linOutput)
		switch {
		case in.Write && out.Unknown:
			return fmt.Sprintf("write(%s) → ?", in.Value)
		case in.Write:
			return fmt.Sprintf("write(%s) → @%d", in.Value, out.Offset)
		}
		return fmt.Sprintf("read() → %s@%d", out.Value, out.Offset)
	},
	DescribeState: func(state interface{}) string {
		s := state.(linState)
		return fmt.Sprintf("%s@%d", s.Value, s.Offset)
	},
}

// linHistory collects operations from several clients.
type linHistory struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
}

func (h *linHistory) now() int64 { return int64(time.Since(h.start)) }

func (h *linHistory) add(op porcupine.Operation) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// history returns the operations, open writes left open to the end.
func (h *linHistory) history() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := append([]porcupine.Operation(nil), h.ops...)
	for i := range out {
		if out[i].Return < 0 {
			out[i].Return = math.MaxInt64
		}
	}
	return out
}

// linClient runs register operations until stop is closed.
func linClient(id int, bootstrap []string, h *linHistory, seed uint64, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(seed, uint64(id)))
	prod, err := kgo.NewClient(kgo.SeedBrokers(bootstrap...), kgo.DefaultProduceTopic(linTopic),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordDeliveryTimeout(5*time.Second),
		kgo.RequestTimeoutOverhead(3*time.Second))
	if err != nil {
		return
	}
	defer prod.Close()
	rd, err := kgo.NewClient(kgo.SeedBrokers(bootstrap...), kgo.RequestTimeoutOverhead(3*time.Second))
	if err != nil {
		return
	}
	defer rd.Close()
	for n := 1; ; n++ {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(5+rng.IntN(20)) * time.Millisecond): // the client's think time
		}
		if rng.IntN(2) == 0 {
			v := fmt.Sprintf("L%d-%d", id, n)
			call := h.now()
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
			r, err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).First()
			cancel()
			op := porcupine.Operation{ClientId: id, Input: linInput{Write: true, Value: v}, Call: call}
			if err != nil {
				op.Output, op.Return = linOutput{Unknown: true}, -1
			} else {
				op.Output, op.Return = linOutput{Offset: r.Offset}, h.now()
			}
			h.add(op)
			continue
		}
		call := h.now()
		off, val, err := readLast(rd)
		if err != nil {
			rd.ForceMetadataRefresh()
			continue // a failed read took no effect
		}
		h.add(porcupine.Operation{ClientId: id, Input: linInput{}, Call: call, Output: linOutput{Offset: off, Value: val}, Return: h.now()})
	}
}

// readLast asks the partition's leader for its high watermark, then for
// the last record below it.
func readLast(cl *kgo.Client) (int64, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	leader, _, err := cl.PartitionLeader(linTopic, 0)
	if err != nil {
		return 0, "", err
	}
	b := cl.Broker(int(leader))
	lo := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = linTopic
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = -1
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	resp, err := b.Request(ctx, lo)
	if err != nil {
		return 0, "", err
	}
	lr := resp.(*kmsg.ListOffsetsResponse)
	if len(lr.Topics) != 1 || len(lr.Topics[0].Partitions) != 1 {
		return 0, "", fmt.Errorf("list offsets: malformed answer")
	}
	p := lr.Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		return 0, "", fmt.Errorf("list offsets: error %d", p.ErrorCode)
	}
	hw := p.Offset
	for back := int64(16); ; back *= 4 {
		from := max(0, hw-back)
		off, val, found, err := fetchLast(ctx, b, from, hw)
		if err != nil || found {
			return off, val, err
		}
		if from == 0 {
			return 0, "", fmt.Errorf("no record below %d", hw)
		}
	}
}

// fetchLast fetches [from, hw) and returns its last record.
func fetchLast(ctx context.Context, b *kgo.Broker, from, hw int64) (int64, string, bool, error) {
	f := kmsg.NewPtrFetchRequest()
	f.MaxWaitMillis, f.MinBytes, f.MaxBytes = 0, 0, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = linTopic
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.FetchOffset, fp.PartitionMaxBytes, fp.LogStartOffset, fp.CurrentLeaderEpoch = from, 1<<20, -1, -1
	ft.Partitions = append(ft.Partitions, fp)
	f.Topics = append(f.Topics, ft)
	f.SetVersion(11)
	resp, err := b.Request(ctx, f)
	if err != nil {
		return 0, "", false, err
	}
	fr := resp.(*kmsg.FetchResponse)
	if fr.ErrorCode != 0 || len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 1 {
		return 0, "", false, fmt.Errorf("fetch: error %d", fr.ErrorCode)
	}
	part := fr.Topics[0].Partitions[0]
	if part.ErrorCode != 0 {
		return 0, "", false, fmt.Errorf("fetch: error %d", part.ErrorCode)
	}
	var lastOff int64
	var lastVal string
	found := false
	for raw := part.RecordBatches; len(raw) >= 12; {
		n := int(binary.BigEndian.Uint32(raw[8:12])) + 12
		if n > len(raw) {
			break // a partial batch at the end of the answer
		}
		var batch kmsg.RecordBatch
		if err := batch.ReadFrom(raw[:n]); err != nil {
			return 0, "", false, fmt.Errorf("fetch: %w", err)
		}
		raw = raw[n:]
		if batch.Attributes&0x07 != 0 {
			return 0, "", false, fmt.Errorf("fetch: compressed batch")
		}
		recs := batch.Records
		for i := int32(0); i < batch.NumRecords && len(recs) > 0; i++ {
			var r kmsg.Record
			if err := r.ReadFrom(recs); err != nil {
				break
			}
			recs = recs[int(r.Length)+varintLen(r.Length):]
			off := batch.FirstOffset + int64(r.OffsetDelta)
			if off < hw && batch.Attributes&0x20 == 0 {
				lastOff, lastVal, found = off, string(r.Value), true
			}
		}
	}
	return lastOff, lastVal, found, nil
}

// varintLen is the size of v as a zigzag varint.
func varintLen(v int32) int {
	u := uint32(v<<1) ^ uint32(v>>31)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

// checkLinearizable runs porcupine over the history; a timeout is not an
// anomaly but is reported as an unfinished check. On a violation it
// writes porcupine's visualization to vizPath.
func checkLinearizable(ops []porcupine.Operation, timeout time.Duration, vizPath string) (porcupine.CheckResult, error) {
	model := linModel.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	if res == porcupine.Illegal && vizPath != "" {
		return res, porcupine.VisualizePath(model, info, vizPath)
	}
	return res, nil
}
