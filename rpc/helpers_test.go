package rpc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/log/testkit"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// startServer serves b on 127.0.0.1:0 and returns the address; the server
// is closed at cleanup.
func startServer(t testing.TB, b Broker, opts ...Option) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if pb, ok := b.(interface{ setPort(int32) }); ok {
		pb.setPort(int32(ln.Addr().(*net.TCPAddr).Port))
	}
	s := NewServer(b, append([]Option{WithLogger(testkit.Logger(t, hclog.Off))}, opts...)...)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		select {
		case err := <-served:
			if !errors.Is(err, ErrServerClosed) {
				t.Errorf("serve returned %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
	return s, ln.Addr().String()
}

// testCtx is a context bounded by a generous deadline.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newClient is a kgo client for addr, closed at cleanup.
func newClient(t testing.TB, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// rawConn speaks the protocol by hand.
type rawConn struct {
	t    testing.TB
	nc   net.Conn
	br   *bufio.Reader
	corr int32
	fmt  *kmsg.RequestFormatter
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, br: bufio.NewReader(nc), fmt: kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw-test"))}
}

func (r *rawConn) deadline() {
	r.nc.SetDeadline(time.Now().Add(30 * time.Second))
}

// write sends req (at its set version) and returns its correlation id.
func (r *rawConn) write(req kmsg.Request) int32 {
	r.t.Helper()
	r.corr++
	r.deadline()
	if _, err := r.nc.Write(r.fmt.AppendRequest(nil, req, r.corr)); err != nil {
		r.t.Fatalf("write: %v", err)
	}
	return r.corr
}

// writeBytes sends raw bytes.
func (r *rawConn) writeBytes(p []byte) {
	r.t.Helper()
	r.deadline()
	if _, err := r.nc.Write(p); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// readFrame reads one response frame.
func (r *rawConn) readFrame() ([]byte, error) {
	r.deadline()
	var hdr [4]byte
	if _, err := io.ReadFull(r.br, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 4 || n > 256<<20 {
		return nil, fmt.Errorf("bad response size %d", n)
	}
	p := make([]byte, n)
	_, err := io.ReadFull(r.br, p)
	return p, err
}

// read reads the response to req, sent with correlation id corr, at
// version (the request's unless overridden, for ApiVersions downgrades).
func (r *rawConn) read(req kmsg.Request, corr int32, version int16) kmsg.Response {
	r.t.Helper()
	p, err := r.readFrame()
	if err != nil {
		r.t.Fatalf("%s v%d: read: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	if got := int32(binary.BigEndian.Uint32(p)); got != corr {
		r.t.Fatalf("%s v%d: correlation id %d, want %d", kmsg.NameForKey(req.Key()), req.GetVersion(), got, corr)
	}
	p = p[4:]
	resp := req.ResponseKind()
	resp.SetVersion(version)
	if resp.IsFlexible() && req.Key() != apiVersionsKey {
		if len(p) == 0 || p[0] != 0 {
			r.t.Fatalf("%s v%d: response header tags % x", kmsg.NameForKey(req.Key()), version, p[:min(len(p), 1)])
		}
		p = p[1:]
	}
	if err := resp.ReadFrom(p); err != nil {
		r.t.Fatalf("%s v%d: decode response: %v", kmsg.NameForKey(req.Key()), version, err)
	}
	return resp
}

// roundTrip sends req and reads its response.
func (r *rawConn) roundTrip(req kmsg.Request) kmsg.Response {
	r.t.Helper()
	return r.read(req, r.write(req), req.GetVersion())
}

// expectClosed waits for the server to close the connection.
func (r *rawConn) expectClosed() {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		_, err := r.br.ReadByte()
		if err == nil {
			continue // a response to an earlier request, or junk
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			r.t.Fatal("the server did not close the connection")
		}
		return
	}
}

// testBatch builds a RecordBatch v2 of n records with values
// prefix-0..prefix-(n-1), timestamps ts, ts+1...
func testBatch(n int, prefix string, ts int64) []byte {
	recs := make([]log.Record, n)
	for i := range recs {
		recs[i] = log.Record{Value: []byte(fmt.Sprintf("%s-%d", prefix, i)), Timestamp: ts + int64(i)}
	}
	return log.BuildBatch(nil, log.BatchOptions{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
}

// produceRaw appends one batch to topic/partition over r and returns the
// base offset.
func produceRaw(t testing.TB, r *rawConn, topic string, partition int32, batch []byte) int64 {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks = -1
	req.TimeoutMillis = 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = partition
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := r.roundTrip(req).(*kmsg.ProduceResponse)
	sp := resp.Topics[0].Partitions[0]
	if sp.ErrorCode != 0 {
		t.Fatalf("produce %s/%d: error %d", topic, partition, sp.ErrorCode)
	}
	return sp.BaseOffset
}

// waitFor waits for cond with a generous deadline.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, what, 30*time.Second, cond)
}
