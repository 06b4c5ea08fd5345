package rpc

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fillErrorCodes gives every slice of structs reachable from v two
// entries and every int16 field named ErrorCode the next code of *next,
// and returns the codes set: the reference eachErrorCode is held to.
func fillErrorCodes(v reflect.Value, next *int16) []int16 {
	var set []int16
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			set = append(set, fillErrorCodes(v.Elem(), next)...)
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			f, sf := v.Field(i), v.Type().Field(i)
			if !sf.IsExported() {
				continue
			}
			if sf.Name == "ErrorCode" && f.Kind() == reflect.Int16 {
				*next++
				f.SetInt(int64(*next))
				set = append(set, *next)
				continue
			}
			set = append(set, fillErrorCodes(f, next)...)
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Struct {
			v.Set(reflect.MakeSlice(v.Type(), 2, 2))
			for i := 0; i < v.Len(); i++ {
				set = append(set, fillErrorCodes(v.Index(i), next)...)
			}
		}
	}
	return set
}

// TestEachErrorCode: for the response of every API the server serves,
// eachErrorCode finds every error code field there is.
func TestEachErrorCode(t *testing.T) {
	for key, h := range handlers {
		resp := kmsg.ResponseForKey(key)
		resp.SetVersion(h.max)
		var next int16
		want := fillErrorCodes(reflect.ValueOf(resp), &next)
		if len(want) == 0 {
			t.Fatalf("%s: the response has no error code field", kmsg.NameForKey(key))
		}
		var got []int16
		if !eachErrorCode(resp, func(code int16) { got = append(got, code) }) {
			t.Fatalf("%s: eachErrorCode does not know %T", kmsg.NameForKey(key), resp)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: eachErrorCode gave %v, the response holds %v", kmsg.NameForKey(key), got, want)
		}
		o := Observation{Response: resp}
		var each []int16
		o.EachError(func(code int16) { each = append(each, code) })
		slices.Sort(each)
		if !slices.Equal(each, want) {
			t.Fatalf("%s: EachError gave %v, want %v", kmsg.NameForKey(key), each, want)
		}
	}
	if eachErrorCode(kmsg.NewPtrSASLHandshakeResponse(), func(int16) {}) {
		t.Fatal("eachErrorCode claims a response no handler serves")
	}
}

// observed is what a test observer keeps of an Observation: the scalars and
// the error codes, not the messages.
type observed struct {
	key, version    int16
	reqBytes        int
	respBytes       int
	duration        time.Duration
	failed          bool
	hasReq, hasResp bool
	codes           []int16
}

type chanObserver chan observed

func (ch chanObserver) ObserveRequest(o Observation) {
	s := observed{key: o.Key, version: o.Version, reqBytes: o.RequestBytes, respBytes: o.ResponseBytes,
		duration: o.Duration, failed: o.Failed, hasReq: o.Request != nil, hasResp: o.Response != nil}
	o.EachError(func(code int16) { s.codes = append(s.codes, code) })
	ch <- s
}

func (ch chanObserver) next(t *testing.T) observed {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("no observation")
		return observed{}
	}
}

func produceRequest(topic string, acks int16, batch []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks = acks
	req.TimeoutMillis = 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	for p := int32(0); p < 2; p++ {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = p
		rp.Records = batch
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// TestObserver: each request served is observed once, after its response,
// with its sizes on the wire and its error codes.
func TestObserver(t *testing.T) {
	b := newMemBroker(t)
	if err := b.CreateTopic(testCtx(t), "", "obs", 2, 1, nil, false); err != nil {
		t.Fatal(err)
	}
	obs := make(chanObserver, 16)
	_, addr := startServer(t, b, WithObserver(obs))
	r := dialRaw(t, addr)

	// exchange sends req and returns the request and response sizes on
	// the wire.
	exchange := func(req kmsg.Request) (int, int) {
		t.Helper()
		r.corr++
		frame := r.fmt.AppendRequest(nil, req, r.corr)
		r.writeBytes(frame)
		p, err := r.readFrame()
		if err != nil {
			t.Fatal(err)
		}
		return len(frame), 4 + len(p)
	}
	check := func(what string, got, want observed) {
		t.Helper()
		if got.duration <= 0 {
			t.Fatalf("%s: duration %v", what, got.duration)
		}
		got.duration = 0
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: observed %+v, want %+v", what, got, want)
		}
	}

	batch := testBatch(3, "obs", time.Now().UnixMilli())
	qn, pn := exchange(produceRequest("obs", -1, batch))
	check("produce", obs.next(t), observed{key: 0, version: 9, reqBytes: qn, respBytes: pn, hasReq: true, hasResp: true})

	fetch := kmsg.NewPtrFetchRequest()
	fetch.SetVersion(12)
	fetch.MaxBytes, fetch.SessionEpoch = 1<<20, -1
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "obs"
	for _, p := range []int32{0, 1, 7} { // partition 7 does not exist
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.PartitionMaxBytes = p, 1<<20
		ft.Partitions = append(ft.Partitions, fp)
	}
	fetch.Topics = append(fetch.Topics, ft)
	qn, pn = exchange(fetch)
	if pn < 2*len(batch) {
		t.Fatalf("fetch response of %d bytes holds less than the two batches of %d", pn, len(batch))
	}
	unknown := kerr.UnknownTopicOrPartition.Code
	check("fetch", obs.next(t), observed{key: 1, version: 12, reqBytes: qn, respBytes: pn, failed: true, hasReq: true, hasResp: true, codes: []int16{unknown}})

	qn, pn = exchange(produceRequest("missing", -1, batch))
	check("produce to a missing topic", obs.next(t), observed{key: 0, version: 9, reqBytes: qn, respBytes: pn, failed: true, hasReq: true, hasResp: true, codes: []int16{unknown, unknown}})

	// An ApiVersions of a version not served is answered undecoded.
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(99)
	qn, pn = exchange(av)
	check("ApiVersions v99", obs.next(t), observed{key: apiVersionsKey, version: 99, reqBytes: qn, respBytes: pn, failed: true, hasResp: true, codes: []int16{kerr.UnsupportedVersion.Code}})

	// acks=0: observed with nothing answered. The Metadata after it is
	// answered once the Produce has been served (one connection's
	// requests are served in order).
	zero := produceRequest("obs", 0, batch)
	r.corr++
	zframe := r.fmt.AppendRequest(nil, zero, r.corr)
	r.writeBytes(zframe)
	check("acks=0 produce", obs.next(t), observed{key: 0, version: 9, reqBytes: len(zframe), hasReq: true})

	select {
	case s := <-obs:
		t.Fatalf("observed more than was served: %+v", s)
	default:
	}
}

type countingObserver struct{ requests, errors int }

func (c *countingObserver) ObserveRequest(o Observation) {
	c.requests++
	o.EachError(func(int16) { c.errors++ })
}

// TestObserveAllocs: telling the observer allocates nothing.
func TestObserveAllocs(t *testing.T) {
	resp := kmsg.NewPtrProduceResponse()
	resp.Topics = make([]kmsg.ProduceResponseTopic, 1)
	resp.Topics[0].Partitions = make([]kmsg.ProduceResponseTopicPartition, 4)
	resp.Topics[0].Partitions[2].ErrorCode = kerr.NotLeaderForPartition.Code
	co := &countingObserver{}
	s := &Server{observer: co}
	c := &call{start: time.Now(), key: 0, version: 9, served: true, req: kmsg.NewPtrProduceRequest(), resp: resp}
	allocs := testing.AllocsPerRun(1000, func() { s.observe(c, 100, 200) })
	if allocs != 0 {
		t.Fatalf("%v allocations per observation", allocs)
	}
	if co.requests == 0 || co.errors != co.requests {
		t.Fatalf("%d requests, %d errors observed", co.requests, co.errors)
	}
}

// panicObserver panics when it observes a Produce request.
type panicObserver struct{}

func (panicObserver) ObserveRequest(o Observation) {
	if o.Key == 0 {
		panic("observer boom")
	}
}

// TestObserverPanicClosesConnection: a panic while answering (here the
// observer's, on the goroutine that waited for the commit) closes the
// connection, not the node.
func TestObserverPanicClosesConnection(t *testing.T) {
	b := &gateBroker{memBroker: newMemBroker(t), gate: make(chan struct{})}
	close(b.gate)
	if err := b.CreateTopic(testCtx(t), "", "obs", 1, 1, nil, false); err != nil {
		t.Fatal(err)
	}
	_, addr := startServer(t, b, WithObserver(panicObserver{}))
	r := dialRaw(t, addr)
	r.write(produceOne("obs", 10000, "x"))
	r.expectClosed()
	expectGoodConn(t, addr)
}
