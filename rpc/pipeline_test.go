package rpc

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// gateBroker's partitions are PipelinedPartitions whose appends are
// written at StartAppend and acknowledged only once the gate opens; it
// records the order of starts, acknowledgements and Metadata requests.
type gateBroker struct {
	*memBroker
	gate chan struct{}
	// ungated partitions are acknowledged at once, gate or not.
	ungated map[int32]bool

	mu     sync.Mutex
	events []string
}

func (b *gateBroker) event(e string) {
	b.mu.Lock()
	b.events = append(b.events, e)
	b.mu.Unlock()
}

func (b *gateBroker) count(prefix string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, e := range b.events {
		if len(e) >= len(prefix) && e[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

func (b *gateBroker) Topics(names []string) []TopicInfo {
	b.event("metadata")
	return b.memBroker.Topics(names)
}

func (b *gateBroker) Partition(topic string, partition int32) (Partition, error) {
	p, err := b.memBroker.part(topic, partition)
	if err != nil {
		return nil, err
	}
	return gatePart{memPart: p, b: b, ungated: b.ungated[partition]}, nil
}

type gatePart struct {
	*memPart
	b       *gateBroker
	ungated bool
}

func (p gatePart) StartAppend(ctx context.Context, batch []byte, acks int) (func() (int64, error), error) {
	off, err := p.memPart.Append(ctx, batch, acks)
	if err != nil {
		return nil, err
	}
	p.b.event(fmt.Sprintf("start %d", off))
	return func() (int64, error) {
		if !p.ungated {
			<-p.b.gate
		}
		p.b.event(fmt.Sprintf("ack %d", off))
		return off, nil
	}, nil
}

// startGated starts a server on a gateBroker (ungated: partitions
// acknowledged at once) with a topic of the partitions given, and a
// connection to it.
func startGated(t *testing.T, topic string, partitions int32, ungated map[int32]bool, opts ...Option) (*gateBroker, *rawConn) {
	t.Helper()
	b := &gateBroker{memBroker: newMemBroker(t), gate: make(chan struct{}), ungated: ungated}
	if err := b.CreateTopic(testCtx(t), "", topic, partitions, 1, nil, false); err != nil {
		t.Fatal(err)
	}
	_, addr := startServer(t, b, opts...)
	return b, dialRaw(t, addr)
}

// TestProducePipelined: Produce requests behind one whose appends wait
// for their commit are started before it is answered, in request order;
// a Metadata request behind them is served only once they are all
// answered; and every answer comes in request order.
func TestProducePipelined(t *testing.T) {
	b, r := startGated(t, "pipe", 1, nil, WithMaxInFlight(8))

	produce := func(i int) *kmsg.ProduceRequest { return produceOne("pipe", 10000, fmt.Sprintf("p%d", i)) }
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	reqs := []kmsg.Request{produce(0), produce(1), produce(2), md, produce(3)}
	corrs := make([]int32, len(reqs))
	for i, req := range reqs {
		corrs[i] = r.write(req)
	}
	// The three first are started while none is acknowledged.
	waitFor(t, "three produce requests started", func() bool { return b.count("start") == 3 })
	if n := b.count("ack"); n != 0 {
		t.Fatalf("%d acknowledged before the gate opened", n)
	}
	close(b.gate)
	for i, req := range reqs {
		resp := r.read(req, corrs[i], req.GetVersion())
		if pr, ok := resp.(*kmsg.ProduceResponse); ok {
			sp := pr.Topics[0].Partitions[0]
			want := int64(i)
			if i == 4 {
				want = 3
			}
			if sp.ErrorCode != 0 || sp.BaseOffset != want {
				t.Fatalf("request %d: error %d offset %d, want offset %d", i, sp.ErrorCode, sp.BaseOffset, want)
			}
		}
	}
	b.mu.Lock()
	events := slices.Clone(b.events)
	b.mu.Unlock()
	mdAt := slices.Index(events, "metadata")
	for _, e := range []string{"ack 0", "ack 1", "ack 2"} {
		if at := slices.Index(events, e); at < 0 || at > mdAt {
			t.Fatalf("events %q: Metadata served before %q", events, e)
		}
	}
	if at := slices.Index(events, "start 3"); at < mdAt {
		t.Fatalf("events %q: the Produce request behind Metadata started before it", events)
	}
}

// TestProducePipelinedPanic: a panic while a pipelined request waits for
// its commit closes the connection, not the node.
func TestProducePipelinedPanic(t *testing.T) {
	b := &panicWaitBroker{memBroker: newMemBroker(t)}
	if err := b.CreateTopic(testCtx(t), "", "pipe", 1, 1, nil, false); err != nil {
		t.Fatal(err)
	}
	_, addr := startServer(t, b)
	r := dialRaw(t, addr)
	req := produceOne("pipe", 10000, "x")
	r.write(req)
	r.expectClosed()
	expectGoodConn(t, addr)
}

type panicWaitBroker struct{ *memBroker }

func (b *panicWaitBroker) Partition(topic string, partition int32) (Partition, error) {
	p, err := b.memBroker.part(topic, partition)
	if err != nil {
		return nil, err
	}
	return panicWaitPart{p}, nil
}

type panicWaitPart struct{ *memPart }

func (p panicWaitPart) StartAppend(context.Context, []byte, int) (func() (int64, error), error) {
	return func() (int64, error) { panic("boom wait") }, nil
}

// TestProduceTimesOutWaitingForCommit: a Produce whose commit does not
// come within the request's timeout is answered REQUEST_TIMED_OUT then,
// and the connection goes on serving; the commit that comes later
// changes nothing in the answer already written.
func TestProduceTimesOutWaitingForCommit(t *testing.T) {
	b, r := startGated(t, "slow", 2, nil)
	req := produceOne("slow", 100, "p0", "p1")
	resp := r.read(req, r.write(req), req.GetVersion()).(*kmsg.ProduceResponse)
	for _, sp := range resp.Topics[0].Partitions {
		if sp.ErrorCode != kerr.RequestTimedOut.Code || sp.BaseOffset != -1 {
			t.Fatalf("partition %d: error %d offset %d, want REQUEST_TIMED_OUT", sp.Partition, sp.ErrorCode, sp.BaseOffset)
		}
	}
	close(b.gate) // the commits come after the answer
	waitFor(t, "the late commits", func() bool { return b.count("ack") == 2 })
	req.TimeoutMillis = 10000
	req.Topics[0].Partitions = req.Topics[0].Partitions[:1]
	req.Topics[0].Partitions[0].Records = testBatch(1, "again", time.Now().UnixMilli())
	resp = r.read(req, r.write(req), req.GetVersion()).(*kmsg.ProduceResponse)
	if sp := resp.Topics[0].Partitions[0]; sp.ErrorCode != 0 || sp.BaseOffset != 1 {
		t.Fatalf("after the timeout: error %d offset %d, want offset 1", sp.ErrorCode, sp.BaseOffset)
	}
}

// TestProduceTimeoutAnswersEachPartition: of a Produce's two partitions,
// the first does not commit within the request's timeout and the second
// commits at once; the answer, at the timeout, times the first out and
// gives the second its offset, as Kafka answers each partition's own
// outcome.
func TestProduceTimeoutAnswersEachPartition(t *testing.T) {
	b, r := startGated(t, "mixed", 2, map[int32]bool{1: true})
	req := produceOne("mixed", 200, "stalls", "commits")
	resp := r.read(req, r.write(req), req.GetVersion()).(*kmsg.ProduceResponse)
	parts := resp.Topics[0].Partitions
	if sp := parts[0]; sp.ErrorCode != kerr.RequestTimedOut.Code || sp.BaseOffset != -1 {
		t.Fatalf("partition 0: error %d offset %d, want REQUEST_TIMED_OUT", sp.ErrorCode, sp.BaseOffset)
	}
	if sp := parts[1]; sp.ErrorCode != 0 || sp.BaseOffset != 0 {
		t.Fatalf("partition 1: error %d offset %d, want offset 0", sp.ErrorCode, sp.BaseOffset)
	}
	close(b.gate)
}

// TestTimedOutProduceHoldsItsSlot: a Produce answered REQUEST_TIMED_OUT
// still counts against the connection's MaxInFlight until its commit
// wait ends, so a connection whose appends keep timing out stops being
// read instead of piling up waits: with two in flight allowed, a
// Metadata request behind two timed-out Produce requests is served only
// once the commit of one comes.
func TestTimedOutProduceHoldsItsSlot(t *testing.T) {
	b, r := startGated(t, "stuck", 1, nil, WithMaxInFlight(2))
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	reqs := []kmsg.Request{produceOne("stuck", 100, "a"), produceOne("stuck", 100, "b"), md}
	corrs := make([]int32, len(reqs))
	for i, req := range reqs {
		corrs[i] = r.write(req)
	}
	for i, req := range reqs[:2] {
		sp := r.read(req, corrs[i], req.GetVersion()).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
		if sp.ErrorCode != kerr.RequestTimedOut.Code {
			t.Fatalf("request %d: error %d, want REQUEST_TIMED_OUT", i, sp.ErrorCode)
		}
	}
	close(b.gate)
	r.read(md, corrs[2], md.GetVersion())
	b.mu.Lock()
	events := slices.Clone(b.events)
	b.mu.Unlock()
	// The first wait to end makes room for it.
	mdAt := slices.Index(events, "metadata")
	if a, b := slices.Index(events, "ack 0"), slices.Index(events, "ack 1"); (a < 0 || a > mdAt) && (b < 0 || b > mdAt) {
		t.Fatalf("events %q: Metadata served before a timed-out append's wait ended", events)
	}
}

// TestTimedOutProduceLetsTheNextIn: once a timed-out Produce is
// answered, a Metadata request behind it is served at once (with room in
// flight), though the Produce's commit wait still runs.
func TestTimedOutProduceLetsTheNextIn(t *testing.T) {
	b, r := startGated(t, "stuck", 1, nil)
	defer close(b.gate)
	req := produceOne("stuck", 100, "a")
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	corr, mdCorr := r.write(req), r.write(md)
	if sp := r.read(req, corr, req.GetVersion()).(*kmsg.ProduceResponse).Topics[0].Partitions[0]; sp.ErrorCode != kerr.RequestTimedOut.Code {
		t.Fatalf("error %d, want REQUEST_TIMED_OUT", sp.ErrorCode)
	}
	r.read(md, mdCorr, md.GetVersion()) // the gate is still closed
	if n := b.count("ack"); n != 0 {
		t.Fatalf("%d acknowledged with the gate closed", n)
	}
}

// produceOne is an acks=all Produce v9 request to topic with the timeout
// given, carrying a batch of one record whose value is values[i] to
// partition i.
func produceOne(topic string, timeoutMs int32, values ...string) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks, req.TimeoutMillis = -1, timeoutMs
	var parts []kmsg.ProduceRequestTopicPartition
	for i, v := range values {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = int32(i)
		rp.Records = testBatch(1, v, time.Now().UnixMilli())
		parts = append(parts, rp)
	}
	req.Topics = []kmsg.ProduceRequestTopic{{Topic: topic, Partitions: parts}}
	return req
}
