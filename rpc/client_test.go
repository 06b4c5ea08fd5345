package rpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// TestKgoProduceConsume produces 10k records with a default kgo producer
// (idempotent, acks=all, snappy) to 3 partitions and reads them all back
// with a kgo consumer, in order per partition; then again with small
// uncompressed batches and small fetches, so that many requests and
// several segments are involved.
func TestKgoProduceConsume(t *testing.T) {
	t.Run("default", func(t *testing.T) { testProduceConsume(t, 0, nil, nil) })
	t.Run("small", func(t *testing.T) {
		testProduceConsume(t, 200,
			[]kgo.Opt{kgo.ProducerBatchMaxBytes(8 << 10), kgo.ProducerBatchCompression(kgo.NoCompression())},
			[]kgo.Opt{kgo.FetchMaxBytes(20 << 10), kgo.FetchMaxPartitionBytes(10 << 10)})
	})
}

func testProduceConsume(t *testing.T, pad int, popts, copts []kgo.Opt) {
	const (
		topic = "orders"
		n     = 10000
	)
	padding := strings.Repeat("x", pad)
	b := newMemBroker(t)
	_, addr := startServer(t, b)
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, addr))
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, topic); err != nil {
		t.Fatal(err)
	}

	producer := newClient(t, addr, append([]kgo.Opt{kgo.DefaultProduceTopic(topic)}, popts...)...)
	errs := make(chan error, 1)
	for i := range n {
		rec := &kgo.Record{Key: []byte("key-" + strconv.Itoa(i)), Value: []byte(strconv.Itoa(i) + padding)}
		producer.Produce(ctx, rec, func(r *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- fmt.Errorf("record %s: %w", r.Value, err):
				default:
				}
			}
		})
	}
	if err := producer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}

	consumer := newClient(t, addr, append([]kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, copts...)...)
	last := map[int32]int{}       // partition → last value seen
	next := map[int32]int64{}     // partition → next offset
	seen := make(map[int]bool, n) // values
	for len(seen) < n {
		fs := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d: %v", len(seen), n, err)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetch %s/%d: %v", topic, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			v, err := strconv.Atoi(strings.TrimSuffix(string(r.Value), padding))
			if err != nil {
				t.Fatalf("value %q", r.Value)
			}
			if r.Offset != next[r.Partition] {
				t.Fatalf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition])
			}
			next[r.Partition]++
			if prev, ok := last[r.Partition]; ok && v <= prev {
				t.Fatalf("partition %d: value %d after %d", r.Partition, v, prev)
			}
			last[r.Partition] = v
			if seen[v] {
				t.Fatalf("value %d twice", v)
			}
			seen[v] = true
			if string(r.Key) != "key-"+strconv.Itoa(v) {
				t.Fatalf("record %d: key %q", v, r.Key)
			}
		})
	}
	if len(next) != 3 {
		t.Fatalf("records on %d partitions, want 3: %v", len(next), next)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil || o.Offset != next[o.Partition] {
			t.Fatalf("partition %d: end %d (%v), consumed up to %d", o.Partition, o.Offset, o.Err, next[o.Partition])
		}
	})
}

// TestKgoAutoCreate: a producer allowed to auto-create topics produces to
// a topic that does not exist yet.
func TestKgoAutoCreate(t *testing.T) {
	b := newMemBroker(t)
	_, addr := startServer(t, b)
	cl := newClient(t, addr, kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("fresh"))
	ctx := testCtx(t)
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("hello")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if infos := b.Topics([]string{"fresh"}); infos[0].Err != nil || len(infos[0].Partitions) != 1 {
		t.Fatalf("auto-created topic: %+v", infos[0])
	}

	// Without the permission, the topic is reported unknown.
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("absent")}}
	resp, err := md.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Topics[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("absent topic: error %d", resp.Topics[0].ErrorCode)
	}
	if infos := b.Topics([]string{"absent"}); infos[0].Err == nil {
		t.Fatal("absent was created")
	}
}

func TestKadmTopics(t *testing.T) {
	b := newMemBroker(t)
	_, addr := startServer(t, b)
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, addr))

	created, err := adm.CreateTopics(ctx, 2, 1, map[string]*string{"retention.ms": kmsg.StringPtr("1000")}, "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		r, err := created.On(name, nil)
		if err != nil || r.Err != nil {
			t.Fatalf("create %s: %v %v", name, err, r.Err)
		}
		if r.NumPartitions != 2 || r.ReplicationFactor != 1 || r.ID == [16]byte{} {
			t.Fatalf("create %s: %+v", name, r)
		}
	}
	// Errors from the broker.
	bad, err := adm.CreateTopics(ctx, 1, 1, nil, "a", "bad name", "")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]error{"a": kerr.TopicAlreadyExists, "bad name": kerr.InvalidTopicException} {
		if r, _ := bad.On(name, nil); !errors.Is(r.Err, want) {
			t.Fatalf("create %q: %v, want %v", name, r.Err, want)
		}
	}
	if r, _ := adm.CreateTopic(ctx, 1, 3, nil, "c"); !errors.Is(r.Err, kerr.InvalidReplicationFactor) {
		t.Fatalf("replication 3: %v", r.Err)
	}
	if r, err := adm.ValidateCreateTopics(ctx, 1, 1, nil, "v"); err != nil || r["v"].Err != nil {
		t.Fatalf("validate only: %v %v", err, r["v"].Err)
	}
	if infos := b.Topics([]string{"v"}); infos[0].Err == nil {
		t.Fatal("validate only created the topic")
	}

	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(topics) != 2 || len(topics["a"].Partitions) != 2 || topics["a"].ID == [16]byte{} {
		t.Fatalf("list: %+v", topics)
	}
	for _, p := range topics["a"].Partitions {
		if p.Leader != 1 || p.LeaderEpoch != 1 || len(p.Replicas) != 1 || len(p.ISR) != 1 || p.Err != nil {
			t.Fatalf("partition: %+v", p)
		}
	}
	md, err := adm.Metadata(ctx, "a", "missing")
	if err != nil {
		t.Fatal(err)
	}
	if md.Cluster != "mem-cluster" || md.Controller != 1 || len(md.Brokers) != 1 || md.Brokers[0].Port != b.port.Load() {
		t.Fatalf("metadata: %+v", md)
	}
	if !errors.Is(md.Topics["missing"].Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("missing topic: %v", md.Topics["missing"].Err)
	}

	// Partitions.
	grown, err := adm.CreatePartitions(ctx, 3, "a")
	if err != nil || grown["a"].Err != nil {
		t.Fatalf("create partitions: %v %v", err, grown["a"].Err)
	}
	if infos := b.Topics([]string{"a"}); len(infos[0].Partitions) != 5 {
		t.Fatalf("a has %d partitions", len(infos[0].Partitions))
	}
	if r, _ := adm.UpdatePartitions(ctx, 1, "a"); !errors.Is(r["a"].Err, kerr.InvalidPartitions) {
		t.Fatalf("shrink: %v", r["a"].Err)
	}

	// Configs.
	cfgs, err := adm.DescribeTopicConfigs(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cfgs.On("a", nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("describe: %v %v", err, rc.Err)
	}
	find := func(cs []kadm.Config, key string) kadm.Config {
		for _, c := range cs {
			if c.Key == key {
				return c
			}
		}
		t.Fatalf("no config %s in %+v", key, cs)
		return kadm.Config{}
	}
	if c := find(rc.Configs, "retention.ms"); c.MaybeValue() != "1000" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
		t.Fatalf("retention.ms: %+v", c)
	}
	if c := find(rc.Configs, "cleanup.policy"); c.MaybeValue() != "delete" || c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Fatalf("cleanup.policy: %+v", c)
	}
	alt, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "retention.bytes", Value: kmsg.StringPtr("4096")},
		{Op: kadm.DeleteConfig, Name: "retention.ms"},
	}, "a")
	if err != nil || alt[0].Err != nil {
		t.Fatalf("alter: %v %+v", err, alt)
	}
	cfgs, _ = adm.DescribeTopicConfigs(ctx, "a")
	rc, _ = cfgs.On("a", nil)
	if c := find(rc.Configs, "retention.bytes"); c.MaybeValue() != "4096" {
		t.Fatalf("retention.bytes: %+v", c)
	}
	if c := find(rc.Configs, "retention.ms"); c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Fatalf("retention.ms after delete: %+v", c)
	}
	if alt, _ := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "nope", Value: kmsg.StringPtr("1")}}, "a"); !errors.Is(alt[0].Err, kerr.InvalidConfig) {
		t.Fatalf("unknown config: %+v", alt)
	}
	if cfgs, err := adm.DescribeTopicConfigs(ctx, "missing"); err == nil {
		if rc, _ := cfgs.On("missing", nil); !errors.Is(rc.Err, kerr.UnknownTopicOrPartition) {
			t.Fatalf("missing topic configs: %+v", rc)
		}
	}
	bcfgs, err := adm.DescribeBrokerConfigs(ctx, 1)
	if err != nil || len(bcfgs) != 1 || bcfgs[0].Err != nil || len(bcfgs[0].Configs) != 0 {
		t.Fatalf("broker configs: %v %+v", err, bcfgs)
	}

	// Delete.
	del, err := adm.DeleteTopics(ctx, "b", "missing")
	if err != nil {
		t.Fatal(err)
	}
	if del["b"].Err != nil || !errors.Is(del["missing"].Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("delete: %+v", del)
	}
	if infos := b.Topics([]string{"b"}); infos[0].Err == nil {
		t.Fatal("b still exists")
	}

	// DeleteTopics v6 by id.
	id := b.Topics([]string{"a"})[0].ID
	dreq := kmsg.NewPtrDeleteTopicsRequest()
	dreq.SetVersion(6)
	dreq.TimeoutMillis = 5000
	dreq.Topics = []kmsg.DeleteTopicsRequestTopic{{TopicID: id}, {TopicID: [16]byte{1}}}
	dresp, err := dreq.RequestWith(ctx, newClient(t, addr, kgo.MaxVersions(kversionsFor(20, 6))))
	if err != nil {
		t.Fatal(err)
	}
	if dresp.Topics[0].ErrorCode != 0 || dresp.Topics[0].Topic == nil || *dresp.Topics[0].Topic != "a" || dresp.Topics[1].ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("delete by id: %+v", dresp.Topics)
	}
}

func TestKadmOffsets(t *testing.T) {
	const topic = "offs"
	b := newMemBroker(t)
	_, addr := startServer(t, b)
	ctx := testCtx(t)
	cl := newClient(t, addr, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		t.Fatal(err)
	}

	// Partition 0: 10 records at t0..t0+9 (epoch 1), then 5 at t1.. in
	// epoch 2. Partition 1 stays empty.
	t0 := time.Now().Add(-time.Hour).UnixMilli()
	for i := range 10 {
		rec := &kgo.Record{Value: []byte("a"), Timestamp: time.UnixMilli(t0 + int64(i))}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	b.bumpEpoch(t, topic, 0)
	t1 := t0 + 1000
	for i := range 5 {
		rec := &kgo.Record{Value: []byte("b"), Timestamp: time.UnixMilli(t1 + int64(i))}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	check := func(what string, lo kadm.ListedOffsets, err error, want map[int32]int64) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for p, off := range want {
			o, ok := lo.Lookup(topic, p)
			if !ok || o.Err != nil || o.Offset != off {
				t.Fatalf("%s: partition %d: %+v, want offset %d", what, p, o, off)
			}
		}
	}
	start, err := adm.ListStartOffsets(ctx, topic)
	check("start", start, err, map[int32]int64{0: 0, 1: 0})
	end, err := adm.ListEndOffsets(ctx, topic)
	check("end", end, err, map[int32]int64{0: 15, 1: 0})
	if o, _ := end.Lookup(topic, 0); o.LeaderEpoch != 2 {
		t.Fatalf("end leader epoch %d", o.LeaderEpoch)
	}
	after, err := adm.ListOffsetsAfterMilli(ctx, t0+3, topic)
	check("after t0+3", after, err, map[int32]int64{0: 3, 1: 0})
	if o, _ := after.Lookup(topic, 0); o.Timestamp != t0+3 {
		t.Fatalf("after t0+3: timestamp %d", o.Timestamp)
	}
	after, err = adm.ListOffsetsAfterMilli(ctx, t1+2, topic)
	check("after t1+2", after, err, map[int32]int64{0: 12})
	after, err = adm.ListOffsetsAfterMilli(ctx, time.Now().Add(time.Hour).UnixMilli(), topic)
	check("after the future", after, err, map[int32]int64{0: 15, 1: 0})
	maxTs, err := adm.ListMaxTimestampOffsets(ctx, topic)
	check("max timestamp", maxTs, err, map[int32]int64{0: 14})

	// OffsetForLeaderEpoch: epoch 1 ends where epoch 2 starts.
	var req kadm.OffsetForLeaderEpochRequest
	req.Add(topic, 0, 1)
	req.Add(topic, 1, 1)
	epochs, err := adm.OffsetForLeaderEpoch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p     int32
		end   int64
		epoch int32
	}{{0, 10, 1}, {1, 0, 1}} {
		e := epochs[topic][tc.p]
		if e.Err != nil || e.EndOffset != tc.end || e.LeaderEpoch != tc.epoch {
			t.Fatalf("partition %d: %+v, want end %d epoch %d", tc.p, e, tc.end, tc.epoch)
		}
	}
	req = nil
	req.Add(topic, 0, 2)
	epochs, _ = adm.OffsetForLeaderEpoch(ctx, req)
	if e := epochs[topic][0]; e.Err != nil || e.EndOffset != 15 || e.LeaderEpoch != 2 {
		t.Fatalf("epoch 2: %+v", e)
	}

	// DeleteRecords moves the start; reads below it are out of range.
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: topic, Partition: 0, At: 7})
	del, err := adm.DeleteRecords(ctx, os)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := del.Lookup(topic, 0); r.Err != nil || r.LowWatermark != 7 {
		t.Fatalf("delete records: %+v", r)
	}
	start, err = adm.ListStartOffsets(ctx, topic)
	check("start after delete", start, err, map[int32]int64{0: 7})
	os = nil
	os.Add(kadm.Offset{Topic: topic, Partition: 0, At: 100})
	del, _ = adm.DeleteRecords(ctx, os)
	if r, _ := del.Lookup(topic, 0); !errors.Is(r.Err, kerr.OffsetOutOfRange) {
		t.Fatalf("delete past the end: %+v", r)
	}

	raw := dialRaw(t, addr)
	freq := minimalRequest(t, 1, 12).(*kmsg.FetchRequest)
	freq.Topics[0].Topic = topic
	freq.Topics[0].Partitions[0].FetchOffset = 3
	fresp := raw.roundTrip(freq).(*kmsg.FetchResponse)
	if sp := fresp.Topics[0].Partitions[0]; sp.ErrorCode != kerr.OffsetOutOfRange.Code || sp.LogStartOffset != 7 {
		t.Fatalf("fetch below the start: %+v", sp)
	}
	freq.Topics[0].Partitions[0].FetchOffset = 16
	fresp = raw.roundTrip(freq).(*kmsg.FetchResponse)
	if sp := fresp.Topics[0].Partitions[0]; sp.ErrorCode != kerr.OffsetOutOfRange.Code {
		t.Fatalf("fetch past the end: %+v", sp)
	}
	// Fenced and unknown leader epochs.
	for epoch, want := range map[int32]int16{1: kerr.FencedLeaderEpoch.Code, 3: kerr.UnknownLeaderEpoch.Code, 2: 0} {
		freq.Topics[0].Partitions[0].FetchOffset = 7
		freq.Topics[0].Partitions[0].CurrentLeaderEpoch = epoch
		fresp = raw.roundTrip(freq).(*kmsg.FetchResponse)
		if sp := fresp.Topics[0].Partitions[0]; sp.ErrorCode != want {
			t.Fatalf("fetch at epoch %d: %+v", epoch, sp)
		}
	}
}

func TestDescribeCluster(t *testing.T) {
	b := newMemBroker(t)
	_, addr := startServer(t, b)
	ctx := testCtx(t)
	cl := newClient(t, addr)
	for _, v := range []int16{0, 1} {
		req := kmsg.NewPtrDescribeClusterRequest()
		req.SetVersion(v)
		resp, err := req.RequestWith(ctx, newClient(t, addr, kgo.MaxVersions(kversionsFor(60, v))))
		if err != nil {
			t.Fatal(err)
		}
		if resp.ErrorCode != 0 || resp.ClusterID != "mem-cluster" || resp.ControllerID != 1 || len(resp.Brokers) != 1 || resp.Brokers[0].Port != b.port.Load() {
			t.Fatalf("v%d: %+v", v, resp)
		}
	}
	req := kmsg.NewPtrDescribeClusterRequest()
	req.EndpointType = 2
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != kerr.UnsupportedEndpointType.Code {
		t.Fatalf("controllers endpoint: %+v", resp)
	}
}

// TestProduceErrors covers the produce checks over a raw connection.
func TestProduceErrors(t *testing.T) {
	b := newMemBroker(t)
	if err := b.CreateTopic(testCtx(t), "", "p", 1, 1, nil, false); err != nil {
		t.Fatal(err)
	}
	_, addr := startServer(t, b)
	r := dialRaw(t, addr)
	good := testBatch(3, "good", time.Now().UnixMilli())
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)-1] ^= 0xff
	magic1 := append([]byte(nil), good...)
	magic1[16] = 1
	txn := testBatch(1, "txn", time.Now().UnixMilli())
	txn[22] |= 0x10 // attributes low byte: transactional (breaks the CRC: checked after)
	fixCRC(txn)
	control := testBatch(1, "ctl", time.Now().UnixMilli())
	control[22] |= 0x20
	fixCRC(control)

	send := func(records []byte, partition int32, acks int16, txnID *string) kmsg.ProduceResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(11)
		req.Acks, req.TimeoutMillis, req.TransactionID = acks, 5000, txnID
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = partition, records
		req.Topics = []kmsg.ProduceRequestTopic{{Topic: "p", Partitions: []kmsg.ProduceRequestTopicPartition{rp}}}
		return r.roundTrip(req).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
	}
	two := append(append([]byte(nil), good...), testBatch(2, "second", time.Now().UnixMilli())...)
	if sp := send(two, 0, -1, nil); sp.ErrorCode != 0 || sp.BaseOffset != 0 || sp.LogStartOffset != 0 || sp.LogAppendTime != -1 {
		t.Fatalf("two batches: %+v", sp)
	}
	p, _ := b.Partition("p", 0)
	if p.HighWatermark() != 5 {
		t.Fatalf("high watermark %d after two batches", p.HighWatermark())
	}
	for name, tc := range map[string]struct {
		records   []byte
		partition int32
		acks      int16
		txnID     *string
		code      int16
	}{
		"corrupt":          {corrupt, 0, -1, nil, kerr.CorruptMessage.Code},
		"magic 1":          {magic1, 0, -1, nil, kerr.CorruptMessage.Code},
		"empty":            {nil, 0, -1, nil, kerr.CorruptMessage.Code},
		"truncated":        {good[:len(good)-1], 0, -1, nil, kerr.CorruptMessage.Code},
		"good then bad":    {append(append([]byte(nil), good...), corrupt...), 0, -1, nil, kerr.CorruptMessage.Code},
		"transactional":    {txn, 0, -1, nil, kerr.InvalidTxnState.Code},
		"transactional id": {good, 0, -1, kmsg.StringPtr("tx"), kerr.InvalidTxnState.Code},
		"control":          {control, 0, -1, nil, kerr.InvalidRecord.Code},
		"unknown":          {good, 9, -1, nil, kerr.UnknownTopicOrPartition.Code},
		"bad acks":         {good, 0, 2, nil, kerr.InvalidRequiredAcks.Code},
	} {
		if sp := send(tc.records, tc.partition, tc.acks, tc.txnID); sp.ErrorCode != tc.code || sp.BaseOffset != -1 {
			t.Fatalf("%s: %+v, want error %d", name, sp, tc.code)
		}
	}
	if p.HighWatermark() != 5 {
		t.Fatalf("high watermark %d after failed produces", p.HighWatermark())
	}

	// Too large for the log (message.max.bytes).
	big := testBatch(1, string(make([]byte, 2<<20)), time.Now().UnixMilli())
	if sp := send(big, 0, -1, nil); sp.ErrorCode != kerr.MessageTooLarge.Code {
		t.Fatalf("too large: %+v", sp)
	}

	// acks=0: no answer (the next request's answer comes first); a
	// failure closes the connection.
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks, req.TimeoutMillis = 0, 5000
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = testBatch(1, "fire", time.Now().UnixMilli())
	req.Topics = []kmsg.ProduceRequestTopic{{Topic: "p", Partitions: []kmsg.ProduceRequestTopicPartition{rp}}}
	r.write(req)
	r.roundTrip(apiVersionsReq(3))
	if p.HighWatermark() != 6 {
		t.Fatalf("high watermark %d after acks=0", p.HighWatermark())
	}
	req.Topics[0].Partitions[0].Partition = 9
	r.write(req)
	r.expectClosed()
}

// fixCRC recomputes a batch's CRC-32C after its attributes changed.
func fixCRC(b []byte) {
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
}

// kversionsFor pins one key's max version (other keys at kgo's max).
func kversionsFor(key, max int16) *kversion.Versions {
	v := kversion.Tip()
	v.SetMaxKeyVersion(key, max)
	return v
}
