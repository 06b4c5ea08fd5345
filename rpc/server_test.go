package rpc

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func apiVersionsReq(v int16) *kmsg.ApiVersionsRequest {
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(v)
	req.ClientSoftwareName = "raw-test"
	req.ClientSoftwareVersion = "1.0.0"
	return req
}

func checkApiKeys(t *testing.T, got []kmsg.ApiVersionsResponseApiKey) {
	t.Helper()
	want := apiKeys(true)
	same := func(a, b kmsg.ApiVersionsResponseApiKey) bool {
		return a.ApiKey == b.ApiKey && a.MinVersion == b.MinVersion && a.MaxVersion == b.MaxVersion
	}
	if !slices.EqualFunc(got, want, same) {
		t.Fatalf("api keys\n got %v\nwant %v", got, want)
	}
	if len(want) != len(handlers) {
		t.Fatalf("%d keys advertised, %d handlers", len(want), len(handlers))
	}
}

func TestApiVersions(t *testing.T) {
	_, addr := startServer(t, newMemBroker(t))
	r := dialRaw(t, addr)
	for v := int16(0); v <= 4; v++ {
		resp := r.roundTrip(apiVersionsReq(v)).(*kmsg.ApiVersionsResponse)
		if resp.ErrorCode != 0 {
			t.Fatalf("v%d: error %d", v, resp.ErrorCode)
		}
		checkApiKeys(t, resp.ApiKeys)
	}

	// Unsupported versions: a v0 answer with UNSUPPORTED_VERSION and the
	// ranges, on the same connection, which stays usable.
	for _, v := range []int16{5, 100} {
		req := apiVersionsReq(v)
		corr := r.write(req)
		resp := r.read(req, corr, 0).(*kmsg.ApiVersionsResponse)
		if resp.ErrorCode != kerr.UnsupportedVersion.Code {
			t.Fatalf("v%d: error %d, want UNSUPPORTED_VERSION", v, resp.ErrorCode)
		}
		checkApiKeys(t, resp.ApiKeys)
	}
	if resp := r.roundTrip(apiVersionsReq(3)).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 {
		t.Fatalf("after the downgrade: error %d", resp.ErrorCode)
	}

	// Bad client software names (v3+).
	req := apiVersionsReq(3)
	req.ClientSoftwareName = "-bad name"
	if resp := r.roundTrip(req).(*kmsg.ApiVersionsResponse); resp.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("bad software name: error %d, want INVALID_REQUEST", resp.ErrorCode)
	}
}

// TestHandlerTable checks the table against kmsg: every advertised version
// exists there.
func TestHandlerTable(t *testing.T) {
	for key, h := range handlers {
		req := kmsg.RequestForKey(key)
		if req == nil {
			t.Fatalf("key %d: kmsg has no request", key)
		}
		if h.min < 0 || h.min > h.max || h.max > req.MaxVersion() {
			t.Fatalf("%s: [%d, %d], kmsg max %d", kmsg.NameForKey(key), h.min, h.max, req.MaxVersion())
		}
	}
}

// errorCodes collects every error code of a response (eachErrorCode's
// walk: a response it does not know fails the test).
func errorCodes(t testing.TB, resp kmsg.Response) []int16 {
	t.Helper()
	var out []int16
	if !eachErrorCode(resp, func(c int16) { out = append(out, c) }) {
		t.Fatalf("no error-code walk for %T", resp)
	}
	return out
}

// minimalRequest builds a small valid request of key at version v against
// the topic "all" (1 partition); tag makes created names unique.
func minimalRequest(t *testing.T, key, v int16) kmsg.Request {
	const topic = "all"
	req := kmsg.RequestForKey(key)
	req.SetVersion(v)
	switch r := req.(type) {
	case *kmsg.ProduceRequest:
		r.Acks = -1
		r.TimeoutMillis = 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = testBatch(2, fmt.Sprintf("produce-v%d", v), time.Now().UnixMilli())
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
	case *kmsg.FetchRequest:
		r.MaxWaitMillis = 0
		r.MaxBytes = 1 << 20
		r.SessionEpoch = -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes = 1 << 20
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
	case *kmsg.ListOffsetsRequest:
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		for _, ts := range []int64{-2, -1, 0} {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Timestamp = ts
			rt.Partitions = append(rt.Partitions, rp)
		}
		if v >= 7 {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Timestamp = -3
			rt.Partitions = append(rt.Partitions, rp)
		}
		r.Topics = append(r.Topics, rt)
	case *kmsg.MetadataRequest:
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(topic)
		r.Topics = append(r.Topics, mt)
	case *kmsg.ApiVersionsRequest:
		r.ClientSoftwareName, r.ClientSoftwareVersion = "raw-test", "1.0"
	case *kmsg.CreateTopicsRequest:
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic = fmt.Sprintf("created-v%d", v)
		rt.NumPartitions, rt.ReplicationFactor = 1, 1
		r.Topics = append(r.Topics, rt)
		r.TimeoutMillis = 5000
	case *kmsg.DeleteTopicsRequest:
		name := fmt.Sprintf("created-v%d", v)
		if v >= 6 {
			// The last version deletes the topics of the versions
			// CreateTopics has and DeleteTopics does not.
			for cv := v; cv <= handlers[19].max; cv++ {
				rt := kmsg.NewDeleteTopicsRequestTopic()
				rt.Topic = kmsg.StringPtr(fmt.Sprintf("created-v%d", cv))
				r.Topics = append(r.Topics, rt)
			}
		} else {
			r.TopicNames = append(r.TopicNames, name)
		}
		r.TimeoutMillis = 5000
	case *kmsg.DeleteRecordsRequest:
		rt := kmsg.NewDeleteRecordsRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewDeleteRecordsRequestTopicPartition()
		rp.Offset = 0
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
		r.TimeoutMillis = 5000
	case *kmsg.InitProducerIDRequest:
		r.TransactionTimeoutMillis = 1000
	case *kmsg.OffsetForLeaderEpochRequest:
		r.ReplicaID = -1
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.LeaderEpoch = 1
		rp.CurrentLeaderEpoch = -1
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
	case *kmsg.DescribeConfigsRequest:
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, topic
		r.Resources = append(r.Resources, rr)
		rb := kmsg.NewDescribeConfigsRequestResource()
		rb.ResourceType, rb.ResourceName = kmsg.ConfigResourceTypeBroker, "1"
		r.Resources = append(r.Resources, rb)
		r.IncludeSynonyms = true
	case *kmsg.CreatePartitionsRequest:
		rt := kmsg.NewCreatePartitionsRequestTopic()
		rt.Topic = "grow"
		rt.Count = int32(v) + 2
		r.Topics = append(r.Topics, rt)
		r.TimeoutMillis = 5000
	case *kmsg.IncrementalAlterConfigsRequest:
		rr := kmsg.NewIncrementalAlterConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, topic
		rc := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		rc.Name, rc.Op, rc.Value = "retention.ms", kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr(fmt.Sprint(1000+int(v)))
		rr.Configs = append(rr.Configs, rc)
		r.Resources = append(r.Resources, rr)
	case *kmsg.DescribeClusterRequest:
		r.EndpointType = 1
	case *kmsg.AlterPartitionAssignmentsRequest, *kmsg.ListPartitionReassignmentsRequest:
		// No partitions: the memory broker moves no replicas.
	default:
		t.Fatalf("no minimal request for %s", kmsg.NameForKey(key))
	}
	return req
}

// TestEveryAdvertisedVersion sends one raw request at every advertised
// (key, version) and decodes the answer with kmsg.
func TestEveryAdvertisedVersion(t *testing.T) {
	b := newMemBroker(t)
	ctx := testCtx(t)
	if err := b.CreateTopic(ctx, "", "all", 1, 1, nil, false); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTopic(ctx, "", "grow", 1, 1, nil, false); err != nil {
		t.Fatal(err)
	}
	_, addr := startServer(t, b)
	r := dialRaw(t, addr)
	fx := newGroupFixture(t, addr)

	// CreateTopics before DeleteTopics (which deletes what it created).
	keys := make([]int16, 0, len(handlers))
	for k := range handlers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	served := 0
	for _, key := range keys {
		h := handlers[key]
		for v := h.min; v <= h.max; v++ {
			req := fx.request(t, key, v)
			if req == nil {
				req = minimalRequest(t, key, v)
			}
			resp := r.roundTrip(req)
			if resp.GetVersion() != v {
				t.Fatalf("%s v%d: response version %d", kmsg.NameForKey(key), v, resp.GetVersion())
			}
			for _, code := range errorCodes(t, resp) {
				if code != 0 {
					t.Fatalf("%s v%d: error %v in %+v", kmsg.NameForKey(key), v, kerr.ErrorForCode(code), resp)
				}
			}
			served++
		}
	}
	t.Logf("%d (key, version) pairs served", served)

	// What the requests did is visible.
	infos := b.Topics([]string{"grow"})
	if got, want := len(infos[0].Partitions), int(handlers[37].max)+2; got != want {
		t.Fatalf("grow has %d partitions, want %d", got, want)
	}
	for v := handlers[19].min; v <= handlers[19].max; v++ {
		if infos := b.Topics([]string{fmt.Sprintf("created-v%d", v)}); infos[0].Err == nil {
			t.Fatalf("created-v%d still exists", v)
		}
	}
	p, _ := b.Partition("all", 0)
	if want := int64(2 * (handlers[0].max - handlers[0].min + 1)); p.HighWatermark() != want {
		t.Fatalf("high watermark %d, want %d", p.HighWatermark(), want)
	}
	fx.check(t, b)
}

// expectGoodConn checks a new connection is served.
func expectGoodConn(t *testing.T, addr string) {
	t.Helper()
	r := dialRaw(t, addr)
	if resp := r.roundTrip(apiVersionsReq(3)).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 {
		t.Fatalf("error %d", resp.ErrorCode)
	}
}

func TestBadInput(t *testing.T) {
	_, addr := startServer(t, newMemBroker(t), WithMaxRequestBytes(1<<20))
	header := func(key, version int16) []byte {
		p := binary.BigEndian.AppendUint16(nil, uint16(key))
		p = binary.BigEndian.AppendUint16(p, uint16(version))
		p = binary.BigEndian.AppendUint32(p, 7)
		p = binary.BigEndian.AppendUint16(p, 3)
		return append(p, "bad"...)
	}
	frame := func(body []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	cases := map[string][]byte{
		"size 0x7fffffff":    {0x7f, 0xff, 0xff, 0xff, 0, 0},
		"size 0":             {0, 0, 0, 0},
		"negative size":      {0xff, 0xff, 0xff, 0xfe, 0, 0},
		"over the max":       binary.BigEndian.AppendUint32(nil, 1<<20+1),
		"short header":       frame([]byte{0, 3, 0}),
		"bad client id":      frame([]byte{0, 3, 0, 1, 0, 0, 0, 1, 0x7f, 0xff}),
		"unknown api key":    frame(header(999, 0)),
		"unsupported key":    frame(header(24, 0)), // AddPartitionsToTxn: kmsg knows it, we do not serve it
		"unsupported fetch":  frame(header(1, 13)),
		"garbage metadata":   frame(append(header(3, 1), 0x7f, 0xff, 0xff, 0xff, 1, 2, 3)),
		"garbage produce":    frame(append(header(0, 7), 0xde, 0xad, 0xbe, 0xef)),
		"garbage flex tags":  frame(append(header(3, 9), 0xff, 0xff, 0xff, 0xff, 0xff)),
		"truncated produce":  frame(append(header(0, 3), 0xff, 0xff)),
		"garbage apiversion": frame(append(header(18, 3), 0x05)),
	}
	for name, input := range cases {
		t.Run(name, func(t *testing.T) {
			r := dialRaw(t, addr)
			r.writeBytes(input)
			r.expectClosed()
			expectGoodConn(t, addr)
		})
	}

	// A good request before the bad one is still answered.
	r := dialRaw(t, addr)
	req := apiVersionsReq(3)
	corr := r.write(req)
	r.writeBytes(frame(header(999, 0)))
	r.read(req, corr, 3)
	r.expectClosed()
	expectGoodConn(t, addr)
}

func TestMaxConnections(t *testing.T) {
	s, addr := startServer(t, newMemBroker(t), WithMaxConnections(1))
	first := dialRaw(t, addr)
	first.roundTrip(apiVersionsReq(3))
	second := dialRaw(t, addr)
	second.expectClosed()
	first.roundTrip(apiVersionsReq(3))
	first.nc.Close()
	waitFor(t, "the first connection to go", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.conns) == 0
	})
	expectGoodConn(t, addr)
}

// TestPipelining sends several requests before reading any answer: the
// answers come in request order, a long poll first included.
func TestPipelining(t *testing.T) {
	b := newMemBroker(t)
	if err := b.CreateTopic(testCtx(t), "", "pipe", 1, 1, nil, false); err != nil {
		t.Fatal(err)
	}
	_, addr := startServer(t, b, WithMaxInFlight(4))
	r := dialRaw(t, addr)

	poll := minimalRequest(t, 1, 12).(*kmsg.FetchRequest)
	poll.Topics[0].Topic = "pipe"
	poll.MaxWaitMillis, poll.MinBytes = 200, 1
	reqs := []kmsg.Request{poll}
	for i := range 15 {
		reqs = append(reqs, apiVersionsReq(int16(i%5)))
		md := kmsg.NewPtrMetadataRequest()
		md.SetVersion(int16(i % 13))
		reqs = append(reqs, md)
	}
	corrs := make([]int32, len(reqs))
	for i, req := range reqs {
		corrs[i] = r.write(req)
	}
	for i, req := range reqs {
		r.read(req, corrs[i], req.GetVersion())
	}
}

// TestFetchLongPoll: a fetch waiting on an empty partition returns once a
// record is produced from another connection.
func TestFetchLongPoll(t *testing.T) {
	b := newMemBroker(t)
	if err := b.CreateTopic(testCtx(t), "", "poll", 2, 1, nil, false); err != nil {
		t.Fatal(err)
	}
	_, addr := startServer(t, b)
	consumer := dialRaw(t, addr)
	producer := dialRaw(t, addr)

	for _, partitions := range [][]int32{{0}, {0, 1}} {
		req := kmsg.NewPtrFetchRequest()
		req.SetVersion(12)
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 5000, 1, 1<<20
		req.SessionID, req.SessionEpoch = 0, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "poll"
		want := int64(-1)
		for _, p := range partitions {
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition = p
			pp, _ := b.Partition("poll", p)
			rp.FetchOffset = pp.HighWatermark()
			rp.PartitionMaxBytes = 1 << 20
			rt.Partitions = append(rt.Partitions, rp)
			if p == partitions[len(partitions)-1] {
				want = rp.FetchOffset
			}
		}
		req.Topics = append(req.Topics, rt)
		corr := consumer.write(req)

		// The fetch waits (its partitions are empty); then a record
		// arrives on the last partition.
		last := partitions[len(partitions)-1]
		done := make(chan kmsg.Response, 1)
		go func() { done <- consumer.read(req, corr, 12) }()
		base := produceRaw(t, producer, "poll", last, testBatch(1, "wake", time.Now().UnixMilli()))
		if base != want {
			t.Fatalf("produced at %d, want %d", base, want)
		}
		var resp *kmsg.FetchResponse
		select {
		case kr := <-done:
			resp = kr.(*kmsg.FetchResponse)
		case <-time.After(30 * time.Second):
			t.Fatal("the long poll did not return")
		}
		got := 0
		for _, st := range resp.Topics {
			for _, sp := range st.Partitions {
				if sp.ErrorCode != 0 {
					t.Fatalf("partition %d: error %d", sp.Partition, sp.ErrorCode)
				}
				got += len(sp.RecordBatches)
				if sp.Partition == last && len(sp.RecordBatches) == 0 {
					// Whether the record came before the first
					// read or woke the wait, it is in the answer.
					t.Fatalf("partition %d: no records (hw %d)", sp.Partition, sp.HighWatermark)
				}
			}
		}
		if got == 0 {
			t.Fatal("long poll returned no data")
		}
	}
}

// TestFetchWaitEndsAtDeadline: a long poll with nothing to wake it returns
// empty once MaxWait passes.
func TestFetchWaitEndsAtDeadline(t *testing.T) {
	b := newMemBroker(t)
	if err := b.CreateTopic(testCtx(t), "", "idle", 1, 1, nil, false); err != nil {
		t.Fatal(err)
	}
	_, addr := startServer(t, b)
	r := dialRaw(t, addr)
	req := minimalRequest(t, 1, 12).(*kmsg.FetchRequest)
	req.Topics[0].Topic = "idle"
	req.MaxWaitMillis, req.MinBytes = 50, 1
	start := time.Now()
	resp := r.roundTrip(req).(*kmsg.FetchResponse)
	if len(resp.Topics[0].Partitions[0].RecordBatches) != 0 {
		t.Fatal("records from an empty partition")
	}
	if time.Since(start) < 50*time.Millisecond {
		t.Fatalf("returned after %v, before MaxWait", time.Since(start))
	}
}

// startIdlePoll starts a server and a connection to it that waits in a
// fetch of an idle partition for a minute.
func startIdlePoll(t *testing.T) (*Server, *rawConn) {
	t.Helper()
	b := newMemBroker(t)
	if err := b.CreateTopic(testCtx(t), "", "idle", 1, 1, nil, false); err != nil {
		t.Fatal(err)
	}
	s, addr := startServer(t, b)
	r := dialRaw(t, addr)
	req := minimalRequest(t, 1, 12).(*kmsg.FetchRequest)
	req.Topics[0].Topic = "idle"
	req.MaxWaitMillis, req.MinBytes = 60000, 1
	r.write(req)
	waitFor(t, "the connection to be served", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.conns) == 1
	})
	return s, r
}

// TestCloseEndsLongPoll: Close returns while a fetch waits, and the
// connection is closed.
func TestCloseEndsLongPoll(t *testing.T) {
	s, r := startIdlePoll(t)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close blocked on a long poll")
	}
	r.expectClosed()
}

// TestClientLeavingEndsLongPoll: a fetch waits for a minute on an idle
// partition; its client goes away, and the server ends the wait and the
// connection long before the minute is out (a Produce would have been
// served by the connection's reader; a fetch is served beside it, so the
// reader sees the client leave).
func TestClientLeavingEndsLongPoll(t *testing.T) {
	s, r := startIdlePoll(t)
	r.nc.Close()
	waitFor(t, "the connection to go", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.conns) == 0
	})
}

// TestFetchSessions: kgo-style session requests are answered sessionless.
func TestFetchSessions(t *testing.T) {
	b := newMemBroker(t)
	if err := b.CreateTopic(testCtx(t), "", "s", 1, 1, nil, false); err != nil {
		t.Fatal(err)
	}
	_, addr := startServer(t, b)
	r := dialRaw(t, addr)
	for _, tc := range []struct {
		id, epoch int32
		code      int16
	}{
		{0, 0, 0}, {0, -1, 0}, {7, 0, 0}, {7, -1, 0},
		{7, 3, kerr.FetchSessionIDNotFound.Code}, {0, 1, kerr.FetchSessionIDNotFound.Code},
		{0, -2, kerr.InvalidFetchSessionEpoch.Code},
	} {
		req := minimalRequest(t, 1, 12).(*kmsg.FetchRequest)
		req.Topics[0].Topic = "s"
		req.SessionID, req.SessionEpoch = tc.id, tc.epoch
		resp := r.roundTrip(req).(*kmsg.FetchResponse)
		if resp.ErrorCode != tc.code || resp.SessionID != 0 {
			t.Fatalf("session %d epoch %d: error %d session %d, want error %d session 0", tc.id, tc.epoch, resp.ErrorCode, resp.SessionID, tc.code)
		}
	}
}

// panicBroker panics on the topic "boom".
type panicBroker struct{ *memBroker }

func (b panicBroker) Topics(names []string) []TopicInfo {
	if slices.Contains(names, "boom") {
		panic("boom topics")
	}
	return b.memBroker.Topics(names)
}

func (b panicBroker) Partition(topic string, partition int32) (Partition, error) {
	if topic == "boom" {
		panic("boom partition")
	}
	return b.memBroker.Partition(topic, partition)
}

// TestPanicClosesConnection: a handler's panic (in the connection's
// goroutine or in one a request started) closes that connection only.
func TestPanicClosesConnection(t *testing.T) {
	b := newMemBroker(t)
	if err := b.CreateTopic(testCtx(t), "", "ok", 1, 1, nil, false); err != nil {
		t.Fatal(err)
	}
	_, addr := startServer(t, panicBroker{b})
	other := dialRaw(t, addr)
	other.roundTrip(apiVersionsReq(3))

	r := dialRaw(t, addr)
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("boom")}}
	r.write(md)
	r.expectClosed()

	// Produce to two partitions: the panic is in a per-partition goroutine.
	r = dialRaw(t, addr)
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks, req.TimeoutMillis = -1, 5000
	rec := kmsg.NewProduceRequestTopicPartition()
	rec.Records = testBatch(1, "x", time.Now().UnixMilli())
	req.Topics = []kmsg.ProduceRequestTopic{
		{Topic: "ok", Partitions: []kmsg.ProduceRequestTopicPartition{rec}},
		{Topic: "boom", Partitions: []kmsg.ProduceRequestTopicPartition{rec}},
	}
	r.write(req)
	r.expectClosed()

	other.roundTrip(apiVersionsReq(3))
	expectGoodConn(t, addr)
}
