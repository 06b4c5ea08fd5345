package node_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlog/raftlog/cluster/clustertest"
	"github.com/raftlog/raftlog/cluster/node"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/replication"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaProxy sits between clients and one node's Kafka listener, reads
// the frames both ways, and can cut a connection right after the node
// answered a Produce request, before the answer reaches the client: the
// batch is in the log and the client never hears so.
type kafkaProxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	mu       sync.Mutex
	every    int // cut every n-th Produce response (0: none)
	left     int // cuts still to make
	produces int
	cuts     int
	onCut    func(p *kafkaProxy)

	refuse atomic.Bool // close new connections at once
}

func newKafkaProxy(t *testing.T, target string) *kafkaProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &kafkaProxy{t: t, ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go p.accept()
	return p
}

func (p *kafkaProxy) addr() string { return p.ln.Addr().String() }

// cutEvery makes the proxy cut every n-th Produce response, total times
// at most, counting cuts from zero again.
func (p *kafkaProxy) cutEvery(n, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.every, p.left, p.produces, p.cuts = n, total, 0, 0
}

func (p *kafkaProxy) cutCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// shouldCut counts a Produce response and says whether to drop it.
func (p *kafkaProxy) shouldCut() (bool, func(*kafkaProxy)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.produces++
	if p.every == 0 || p.left == 0 || p.produces%p.every != 0 {
		return false, nil
	}
	p.left--
	p.cuts++
	return true, p.onCut
}

func (p *kafkaProxy) accept() {
	for {
		cc, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refuse.Load() {
			cc.Close()
			continue
		}
		sc, err := net.Dial("tcp", p.target)
		if err != nil {
			cc.Close()
			continue
		}
		go p.pipe(cc, sc)
	}
}

// readFrame reads one size-prefixed Kafka frame whole.
func readKafkaFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > 64<<20 {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	buf := make([]byte, 4+n)
	copy(buf, hdr[:])
	_, err := io.ReadFull(r, buf[4:])
	return buf, err
}

func (p *kafkaProxy) pipe(cc, sc net.Conn) {
	var mu sync.Mutex
	keys := map[int32]int16{} // correlation id → api key of requests in flight
	closeBoth := func() { cc.Close(); sc.Close() }
	go func() {
		defer closeBoth()
		for {
			f, err := readKafkaFrame(cc)
			if err != nil || len(f) < 12 {
				return
			}
			mu.Lock()
			keys[int32(binary.BigEndian.Uint32(f[8:12]))] = int16(binary.BigEndian.Uint16(f[4:6]))
			mu.Unlock()
			if _, err := sc.Write(f); err != nil {
				return
			}
		}
	}()
	defer closeBoth()
	for {
		f, err := readKafkaFrame(sc)
		if err != nil || len(f) < 8 {
			return
		}
		corr := int32(binary.BigEndian.Uint32(f[4:8]))
		mu.Lock()
		key, ok := keys[corr]
		delete(keys, corr)
		mu.Unlock()
		if ok && key == 0 {
			if cut, onCut := p.shouldCut(); cut {
				closeBoth()
				if onCut != nil {
					onCut(p)
				}
				return
			}
		}
		if _, err := cc.Write(f); err != nil {
			return
		}
	}
}

// proxiedCluster starts n nodes, each advertising a proxy in front of its
// Kafka listener.
func proxiedCluster(t *testing.T, n int) (*clustertest.Cluster, []*kafkaProxy) {
	proxies := make([]*kafkaProxy, n)
	c := clustertest.StartWith(t, n, func(i int, cfg *node.Config) {
		proxies[i] = newKafkaProxy(t, cfg.KafkaAddr)
		cfg.Cluster.AdvertisedKafkaAddr = proxies[i].addr()
	})
	return c, proxies
}

// produceAll produces n records valued prefix-%05d, at most a few
// unacknowledged at a time (so several small batches are in flight, each
// its own request) and fails the test on any error.
func produceAll(t *testing.T, cl *kgo.Client, prefix string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var firstErr atomic.Value
	window := make(chan struct{}, 4)
	for i := 0; i < n; i++ {
		wg.Add(1)
		window <- struct{}{}
		cl.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("%s-%05d", prefix, i))}, func(r *kgo.Record, err error) {
			defer wg.Done()
			<-window
			if err != nil {
				firstErr.CompareAndSwap(nil, fmt.Errorf("%s: %w", r.Value, err))
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		t.Fatal(err)
	}
}

// occurrences counts each value with the prefix in the single partition
// of topic, as a consumer sees the records (every one of the n must
// arrive) and as the leader's log holds them (every batch up to its high
// watermark, decoded), and reports whether the log has them in
// production order.
func occurrences(t *testing.T, c *clustertest.Cluster, topic, prefix string, n int) (counts map[string]int, ordered bool) {
	t.Helper()
	cons := c.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for len(seen) < n {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("a consumer read %d of the %d acknowledged records", len(seen), n)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if v := string(r.Value); strings.HasPrefix(v, prefix) {
				seen[v] = true
			}
		})
	}
	var rep *replication.Replica
	for i, nd := range c.Nodes {
		if c.Down(i) {
			continue
		}
		if r, err := nd.LeaderPartition(topic, 0); err == nil {
			rep = r
		}
	}
	if rep == nil {
		t.Fatalf("no leader of %s-0", topic)
	}
	counts, ordered = map[string]int{}, true
	last := ""
	for off, hw := rep.Log().StartOffset(), rep.HighWatermark(); off < hw; {
		p, err := rep.ReadRecords(off, 1<<20)
		if err != nil || len(p) == 0 {
			t.Fatalf("read %s-0 at %d (hw %d): %d bytes, %v", topic, off, hw, len(p), err)
		}
		log.Batches(p, func(b log.Batch) bool {
			off = b.NextOffset()
			recs, _, ok := log.DecodeRecords(b)
			if !ok {
				t.Fatalf("batch at %d does not decode", b.BaseOffset())
			}
			for _, r := range recs {
				if v := string(r.Value); strings.HasPrefix(v, prefix) {
					counts[v]++
					ordered = ordered && v > last
					last = v
				}
			}
			return true
		})
	}
	return counts, ordered
}

// TestIdempotentRetryAfterLostAck: the connection is cut after the leader
// appended a batch and before its answer reaches the producer. The
// idempotent producer retries and the log holds every record once, in
// order; the same cuts with idempotence off duplicate records, which shows
// the cuts fall after the append.
func TestIdempotentRetryAfterLostAck(t *testing.T) {
	c, proxies := proxiedCluster(t, 3)
	const n, cuts = 400, 12
	for _, mode := range []struct {
		topic      string
		idempotent bool
	}{{"lostack", true}, {"lostack-plain", false}} {
		t.Run(mode.topic, func(t *testing.T) {
			c.CreateTopic(mode.topic, 1, 3)
			for _, p := range proxies {
				p.cutEvery(3, cuts)
			}
			opts := []kgo.Opt{kgo.DefaultProduceTopic(mode.topic), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordRetries(1 << 20), kgo.RecordDeliveryTimeout(80 * time.Second)}
			if !mode.idempotent {
				opts = append(opts, kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(1))
			}
			prod := c.Client(opts...)
			produceAll(t, prod, mode.topic, n)
			total := 0
			for _, p := range proxies {
				total += p.cutCount()
			}
			if total == 0 {
				t.Fatal("no Produce answer was cut")
			}
			counts, ordered := occurrences(t, c, mode.topic, mode.topic, n)
			dups := 0
			for i := 0; i < n; i++ {
				v := fmt.Sprintf("%s-%05d", mode.topic, i)
				switch k := counts[v]; {
				case k == 0:
					t.Fatalf("acknowledged record %s missing", v)
				case k > 1:
					dups += k - 1
				}
			}
			t.Logf("%d answers cut, %d duplicates", total, dups)
			if mode.idempotent && (dups > 0 || !ordered) {
				t.Fatalf("idempotent producer: %d duplicates, in order %v", dups, ordered)
			}
			if !mode.idempotent && dups == 0 {
				t.Fatalf("with idempotence off, %d cut answers duplicated nothing: the cuts did not fall after the append", total)
			}
		})
	}
}

// TestIdempotentRetryAcrossFailover: the leader's answer to a Produce is
// cut, and before the producer can retry, the leader's node dies. The
// retry goes to the new leader, which rebuilt the producer state from its
// replica of the log, and is answered as a duplicate: every record once.
func TestIdempotentRetryAcrossFailover(t *testing.T) {
	c, proxies := proxiedCluster(t, 3)
	c.CreateTopic("lostfo", 1, 3)
	leader := -1
	for i, nd := range c.Nodes {
		if _, err := nd.LeaderPartition("lostfo", 0); err == nil {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no leader of lostfo-0")
	}
	cutDone := make(chan struct{})
	lp := proxies[leader]
	lp.mu.Lock()
	lp.onCut = func(p *kafkaProxy) {
		// No retry may reach this node again: it is about to die.
		p.refuse.Store(true)
		close(cutDone)
	}
	lp.mu.Unlock()
	lp.cutEvery(5, 1)
	for i, p := range proxies {
		if i != leader {
			p.cutEvery(4, 4)
		}
	}
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		select {
		case <-cutDone:
		case <-time.After(60 * time.Second):
			return
		}
		c.Kill(leader)
	}()
	const n = 400
	prod := c.Client(kgo.DefaultProduceTopic("lostfo"), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordRetries(1<<20), kgo.RecordDeliveryTimeout(80*time.Second))
	produceAll(t, prod, "lostfo", n)
	<-killed
	if lp.cutCount() != 1 {
		t.Fatalf("the leader's answer was not cut (%d cuts)", lp.cutCount())
	}
	counts, ordered := occurrences(t, c, "lostfo", "lostfo", n)
	for i := 0; i < n; i++ {
		if v := fmt.Sprintf("lostfo-%05d", i); counts[v] != 1 {
			t.Fatalf("record %s is in the log %d times", v, counts[v])
		}
	}
	if !ordered {
		t.Fatal("records out of production order")
	}
	cuts := 0
	for _, p := range proxies {
		cuts += p.cutCount()
	}
	t.Logf("%d answers cut, the leader's node killed after the first", cuts)
}
