package replication

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

func randomAppendRequest(rng *rand.Rand) *raft.AppendEntriesRequest {
	blob := func(n int) []byte {
		if n == 0 {
			return nil
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	req := &raft.AppendEntriesRequest{
		RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: blob(1 + rng.IntN(20)), Addr: blob(rng.IntN(30))},
		Term:              rng.Uint64(),
		Leader:            blob(rng.IntN(3)),
		PrevLogEntry:      rng.Uint64(),
		PrevLogTerm:       rng.Uint64(),
		LeaderCommitIndex: rng.Uint64(),
	}
	for i := rng.IntN(6); i > 0; i-- {
		e := &raft.Log{Index: rng.Uint64(), Term: rng.Uint64(), Type: raft.LogType(rng.IntN(7)), Extensions: blob(rng.IntN(3))}
		switch rng.IntN(3) {
		case 0:
			e.Data = blob(rng.IntN(100))
		case 1:
			e.Data = blob(4<<10 + rng.IntN(300<<10)) // written from its own buffer
		}
		if rng.IntN(2) == 0 {
			e.AppendedAt = time.Unix(0, rng.Int64N(1<<62))
		}
		req.Entries = append(req.Entries, e)
	}
	return req
}

func sameBytes(a, b []byte) bool { return bytes.Equal(a, b) } // nil and empty alike

func sameAppendRequest(a, b *raft.AppendEntriesRequest) error {
	if a.ProtocolVersion != b.ProtocolVersion || !sameBytes(a.ID, b.ID) || !sameBytes(a.Addr, b.Addr) || a.Term != b.Term ||
		!sameBytes(a.Leader, b.Leader) || a.PrevLogEntry != b.PrevLogEntry || a.PrevLogTerm != b.PrevLogTerm ||
		a.LeaderCommitIndex != b.LeaderCommitIndex || len(a.Entries) != len(b.Entries) {
		return fmt.Errorf("headers differ: %+v / %+v", a, b)
	}
	for i := range a.Entries {
		x, y := a.Entries[i], b.Entries[i]
		if x.Index != y.Index || x.Term != y.Term || x.Type != y.Type || !sameBytes(x.Data, y.Data) ||
			!sameBytes(x.Extensions, y.Extensions) || !x.AppendedAt.Equal(y.AppendedAt) || x.AppendedAt.IsZero() != y.AppendedAt.IsZero() {
			return fmt.Errorf("entry %d differs", i)
		}
	}
	return nil
}

// With an arena, a request's entries up to a chunk are read one after the
// other into shared chunks, each capped at its length (appending to one
// cannot reach the next), a larger one into its own buffer, and release
// hands back exactly the chunks they were read into.
func TestAppendWireArena(t *testing.T) {
	needPoison(t)
	sizes := []int{100, 300 << 10, 800 << 10, 200, arenaChunkSize + 1}
	req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("a"), Addr: []byte("a")}, Term: 2}
	for i, n := range sizes {
		req.Entries = append(req.Entries, &raft.Log{Index: uint64(i + 1), Term: 2, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte('a' + i)}, n)})
	}
	var buf bytes.Buffer
	ww := wireWriter{w: bufio.NewWriter(&buf)}
	if err := ww.writeAppendRequest(req); err != nil {
		t.Fatal(err)
	}
	wr := wireReader{r: bufio.NewReader(&buf), arena: new(entryArena)}
	var got raft.AppendEntriesRequest
	if err := wr.readAppendRequest(&got); err != nil {
		t.Fatal(err)
	}
	if err := sameAppendRequest(req, &got); err != nil {
		t.Fatal(err)
	}
	at := func(i int) uintptr { return uintptr(unsafe.Pointer(&got.Entries[i].Data[0])) }
	for i, e := range got.Entries {
		if cap(e.Data) != len(e.Data) {
			t.Fatalf("entry %d: capacity %d past its %d bytes", i, cap(e.Data), len(e.Data))
		}
	}
	// 100 B and 300 KiB share the first chunk; 800 KiB does not fit
	// after them and starts the second, where 200 B follows it.
	if at(1) != at(0)+100 || at(3) != at(2)+800<<10 || at(2) == at(1)+300<<10 {
		t.Fatal("the entries are not laid out in the arena's chunks")
	}
	if n := len(wr.arena.chunks); n != 2 {
		t.Fatalf("%d chunks held, want 2", n)
	}
	wr.arena.release()
	for i, e := range got.Entries {
		poisoned := e.Data[0] == 0xdb && e.Data[len(e.Data)-1] == 0xdb
		if poisoned != (len(e.Data) <= arenaChunkSize) {
			t.Fatalf("entry %d of %d bytes: handed back with the chunks %v", i, len(e.Data), poisoned)
		}
	}
	if len(wr.arena.chunks) != 0 {
		t.Fatal("chunks still held after release")
	}
}

// Requests and responses read back as written, several on one stream, and
// a stream cut anywhere inside a message is an unexpected EOF, never a
// message.
func TestAppendWireRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var buf bytes.Buffer
	ww := wireWriter{w: bufio.NewWriterSize(&buf, 4<<10)}
	var reqs []*raft.AppendEntriesRequest
	for i := 0; i < 50; i++ {
		req := randomAppendRequest(rng)
		reqs = append(reqs, req)
		if err := ww.writeAppendRequest(req); err != nil {
			t.Fatal(err)
		}
	}
	stream := append([]byte(nil), buf.Bytes()...)
	wr := wireReader{r: bufio.NewReader(bytes.NewReader(stream))}
	for i, want := range reqs {
		var got raft.AppendEntriesRequest
		if err := wr.readAppendRequest(&got); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if err := sameAppendRequest(want, &got); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if err := wr.readAppendRequest(&raft.AppendEntriesRequest{}); err != io.EOF {
		t.Fatalf("after the last request: %v, want io.EOF", err)
	}
	// The first request cut at every length short of its end.
	buf.Reset()
	if err := ww.writeAppendRequest(reqs[1]); err != nil {
		t.Fatal(err)
	}
	one := append([]byte(nil), buf.Bytes()...)
	for cut := 1; cut < len(one); cut += 1 + cut/50 {
		wr := wireReader{r: bufio.NewReader(bytes.NewReader(one[:cut]))}
		if err := wr.readAppendRequest(&raft.AppendEntriesRequest{}); err != io.ErrUnexpectedEOF {
			t.Fatalf("request cut at %d of %d bytes: %v", cut, len(one), err)
		}
	}

	resps := []struct {
		r   *raft.AppendEntriesResponse
		err error
	}{
		{&raft.AppendEntriesResponse{RPCHeader: raft.RPCHeader{ProtocolVersion: 3, ID: []byte("n2"), Addr: []byte("127.0.0.1:1")}, Term: 9, LastLog: 1 << 40, Success: true}, nil},
		{&raft.AppendEntriesResponse{Term: 10, NoRetryBackoff: true}, nil},
		{&raft.AppendEntriesResponse{Term: 11, LastLog: 5}, errors.New("no such configuration")},
		{nil, errors.New("shutting down")},
	}
	buf.Reset()
	for _, r := range resps {
		if err := ww.writeAppendResponse(r.r, r.err); err != nil {
			t.Fatal(err)
		}
	}
	wr = wireReader{r: bufio.NewReader(bytes.NewReader(buf.Bytes()))}
	for i, r := range resps {
		var got raft.AppendEntriesResponse
		err := wr.readAppendResponse(&got)
		want := r.r
		if want == nil {
			want = &raft.AppendEntriesResponse{}
		}
		var answered rpcError
		switch {
		case r.err == nil && err != nil:
			t.Fatalf("response %d: %v", i, err)
		case r.err != nil && (!errors.As(err, &answered) || err.Error() != r.err.Error()):
			t.Fatalf("response %d: error %v, want the answered %q", i, err, r.err)
		}
		if got.ProtocolVersion != want.ProtocolVersion || !sameBytes(got.ID, want.ID) || !sameBytes(got.Addr, want.Addr) ||
			got.Term != want.Term || got.LastLog != want.LastLog || got.Success != want.Success || got.NoRetryBackoff != want.NoRetryBackoff {
			t.Fatalf("response %d: got %+v want %+v", i, got, want)
		}
	}
}

// Malformed requests are refused with an error, and lengths that lie
// cost no more memory than the bytes sent.
func TestAppendWireMalformed(t *testing.T) {
	var buf bytes.Buffer
	ww := wireWriter{w: bufio.NewWriter(&buf)}
	if err := ww.writeAppendRequest(&raft.AppendEntriesRequest{Term: 1, Entries: []*raft.Log{{Index: 1, Data: []byte("x")}}}); err != nil {
		t.Fatal(err)
	}
	good := append([]byte(nil), buf.Bytes()...)
	read := func(b []byte) error {
		wr := wireReader{r: bufio.NewReader(bytes.NewReader(b))}
		return wr.readAppendRequest(&raft.AppendEntriesRequest{})
	}
	bad := append([]byte(nil), good...)
	bad[0] = 9
	if err := read(bad); !errors.Is(err, errWireFormat) {
		t.Fatalf("unknown kind: %v", err)
	}
	bad = append([]byte(nil), good...)
	copy(bad[41:], []byte{0xff, 0xff, 0xff, 0xff})
	if err := read(bad); !errors.Is(err, errWireFormat) {
		t.Fatalf("too many entries: %v", err)
	}
	// An entry claiming 200 MB, with 10 bytes behind the claim.
	head := good[:45+2+2+2+25+4]
	lie := append(append([]byte(nil), head...), 0x0b, 0xeb, 0xc2, 0x00)
	lie = append(lie, make([]byte, 10)...)
	var before, after runtimeMem
	before.read()
	if err := read(lie); err != io.ErrUnexpectedEOF {
		t.Fatalf("a length past the bytes sent: %v", err)
	}
	after.read()
	if grew := after.total - before.total; grew > 64<<20 {
		t.Fatalf("a 200 MB claim allocated %d bytes", grew)
	}
	lie = append(append([]byte(nil), head...), 0x7f, 0xff, 0xff, 0xff)
	if err := read(lie); !errors.Is(err, errWireFormat) {
		t.Fatalf("a length past the bound: %v", err)
	}
}

// FuzzAppendWire: any input either fails to read or reads as a request
// that, written again, reads back the same.
func FuzzAppendWire(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 4; i++ {
		var buf bytes.Buffer
		ww := wireWriter{w: bufio.NewWriter(&buf)}
		req := randomAppendRequest(rng)
		for _, e := range req.Entries {
			if len(e.Data) > 64 {
				e.Data = e.Data[:64]
			}
		}
		if err := ww.writeAppendRequest(req); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		wr := wireReader{r: bufio.NewReader(bytes.NewReader(in))}
		var req raft.AppendEntriesRequest
		if err := wr.readAppendRequest(&req); err != nil {
			return
		}
		var buf bytes.Buffer
		ww := wireWriter{w: bufio.NewWriter(&buf)}
		if err := ww.writeAppendRequest(&req); err != nil {
			t.Fatal(err)
		}
		wr = wireReader{r: bufio.NewReader(&buf)}
		var again raft.AppendEntriesRequest
		if err := wr.readAppendRequest(&again); err != nil {
			t.Fatal(err)
		}
		if err := sameAppendRequest(&req, &again); err != nil {
			t.Fatal(err)
		}
	})
}

// transportPair is two muxes with a group's append transport on each.
type transportPair struct {
	muxes [2]*Mux
	trans [2]raft.Transport
}

func newTransportPair(t *testing.T, group string, fastOnB bool) *transportPair {
	t.Helper()
	p := &transportPair{}
	copy(p.muxes[:], newTestMuxes(t, len(p.muxes)))
	for i, m := range p.muxes {
		layer, err := m.Layer(group)
		if err != nil {
			t.Fatal(err)
		}
		inner := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: layer, MaxPool: 2, Timeout: 5 * time.Second, Logger: hclog.NewNullLogger()})
		if i == 1 && !fastOnB {
			// A peer without append streams: the NetworkTransport alone.
			p.trans[i] = inner
			t.Cleanup(func() { inner.Close() })
			continue
		}
		fast, err := m.layer(group+appendStreamSuffix, false, false)
		if err != nil {
			t.Fatal(err)
		}
		tr := newAppendTransport(inner, fast, 5*time.Second, 2, 4, hclog.NewNullLogger())
		t.Cleanup(func() { tr.Close() })
		p.trans[i] = tr
	}
	return p
}

// answer serves n RPCs of c as a follower would: an append succeeds when
// its PrevLogEntry is even, and is answered with an error when it is 7.
func answer(c <-chan raft.RPC, n int, got chan<- *raft.AppendEntriesRequest) {
	for i := 0; i < n; i++ {
		rpc := <-c
		req := rpc.Command.(*raft.AppendEntriesRequest)
		// The entries are valid until the answer (a follower's stream
		// reuses their buffers): the test compares a copy.
		cp := *req
		cp.Entries = nil
		for _, e := range req.Entries {
			ce := *e
			ce.Data, ce.Extensions = bytes.Clone(e.Data), bytes.Clone(e.Extensions)
			cp.Entries = append(cp.Entries, &ce)
		}
		got <- &cp
		var err error
		if req.PrevLogEntry == 7 {
			err = errors.New("refused seven")
		}
		rpc.Respond(&raft.AppendEntriesResponse{RPCHeader: raft.RPCHeader{ID: []byte("b")}, Term: req.Term, LastLog: req.PrevLogEntry + uint64(len(req.Entries)), Success: req.PrevLogEntry%2 == 0}, err)
	}
}

func TestAppendTransportRPCs(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("peer-has-append-streams=%v", fast), func(t *testing.T) {
			p := newTransportPair(t, "g", fast)
			a, b := p.trans[0], p.trans[1]
			target := p.muxes[1].Addr()
			got := make(chan *raft.AppendEntriesRequest, 100)
			var hbMu sync.Mutex
			var heartbeats int
			b.SetHeartbeatHandler(func(rpc raft.RPC) {
				hbMu.Lock()
				heartbeats++
				hbMu.Unlock()
				rpc.Respond(&raft.AppendEntriesResponse{Term: rpc.Command.(*raft.AppendEntriesRequest).Term, Success: true}, nil)
			})
			go answer(b.Consumer(), 3+1+20, got)

			rng := rand.New(rand.NewPCG(5, 6))
			// Synchronous appends: a success, a refusal, an error answer.
			for _, prev := range []uint64{2, 3, 7} {
				req := randomAppendRequest(rng)
				req.PrevLogEntry, req.LeaderCommitIndex = prev, 1
				var resp raft.AppendEntriesResponse
				err := a.AppendEntries("b", target, req, &resp)
				if prev == 7 {
					if err == nil || err.Error() != "refused seven" {
						t.Fatalf("error answer: %v", err)
					}
				} else if err != nil {
					t.Fatal(err)
				}
				if resp.Success != (prev%2 == 0) || resp.Term != req.Term || resp.LastLog != prev+uint64(len(req.Entries)) {
					t.Fatalf("prev %d: response %+v", prev, resp)
				}
				if err := sameAppendRequest(req, <-got); err != nil {
					t.Fatal(err)
				}
			}
			// A heartbeat takes the fast path, not the consumer.
			hb := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("a"), Addr: []byte("a-addr")}, Term: 4}
			var hresp raft.AppendEntriesResponse
			if err := a.AppendEntries("b", target, hb, &hresp); err != nil || !hresp.Success || hresp.Term != 4 {
				t.Fatalf("heartbeat: %+v %v", hresp, err)
			}
			hbMu.Lock()
			if heartbeats != 1 {
				t.Fatalf("%d heartbeats handled", heartbeats)
			}
			hbMu.Unlock()
			// One that looks like a heartbeat but carries an entry is an
			// append, for the consumer.
			hbLike := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("a"), Addr: []byte("a-addr")}, Term: 4,
				Entries: []*raft.Log{{Index: 1, Term: 4, Type: raft.LogCommand, Data: []byte("x")}}}
			if err := a.AppendEntries("b", target, hbLike, new(raft.AppendEntriesResponse)); err != nil {
				t.Fatal(err)
			}
			if err := sameAppendRequest(hbLike, <-got); err != nil {
				t.Fatal(err)
			}
			hbMu.Lock()
			if heartbeats != 1 {
				t.Fatalf("an append with an entry went to the heartbeat handler")
			}
			hbMu.Unlock()

			// A pipeline: 20 requests, the answers in order.
			pl, err := a.AppendEntriesPipeline("b", target)
			if err != nil {
				t.Fatal(err)
			}
			var (
				mu   sync.Mutex
				sent []*raft.AppendEntriesRequest
			)
			done := make(chan error, 1)
			go func() {
				for i := 0; i < 20; i++ {
					f := <-pl.Consumer()
					if err := f.Error(); err != nil {
						done <- err
						return
					}
					mu.Lock()
					want := sent[i]
					mu.Unlock()
					if f.Request() != want || f.Response().LastLog != want.PrevLogEntry+uint64(len(want.Entries)) {
						done <- fmt.Errorf("future %d out of order", i)
						return
					}
				}
				done <- nil
			}()
			for i := 0; i < 20; i++ {
				req := randomAppendRequest(rng)
				req.PrevLogEntry = uint64(2 * (i + 10))
				mu.Lock()
				sent = append(sent, req)
				mu.Unlock()
				if _, err := pl.AppendEntries(req, new(raft.AppendEntriesResponse)); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < 20; i++ {
				mu.Lock()
				want := sent[i]
				mu.Unlock()
				if err := sameAppendRequest(want, <-got); err != nil {
					t.Fatalf("pipelined request %d: %v", i, err)
				}
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if fast {
				// Its streams, on the session, idle now with their
				// pipeline still open, hold no reader.
				bt := b.(*appendTransport)
				waitFor(t, "the served streams to give their readers back", 10*time.Second, func() bool {
					return bt.readersHeld.Load() == 0
				})
			}
			pl.Close()
			if _, err := pl.AppendEntries(randomAppendRequest(rng), new(raft.AppendEntriesResponse)); err == nil {
				t.Fatal("an append on a closed pipeline succeeded")
			}
		})
	}
}

// A transport closes while a peer's stream waits for an answer, another
// waits for the next request and a pipeline is open; a closed transport
// refuses appends.
func TestAppendTransportClose(t *testing.T) {
	p := newTransportPair(t, "g", true)
	a, b := p.trans[0], p.trans[1].(*appendTransport)
	target := p.muxes[1].Addr()
	// An idle stream: answered once, kept in a's pool, b's side waiting to
	// read the next request (closing a yamux stream does not end that
	// read: the peer has to close its side too).
	pl, err := a.AppendEntriesPipeline("b", target)
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	go answer(b.Consumer(), 1, make(chan *raft.AppendEntriesRequest, 1))
	if err := a.AppendEntries("b", target, &raft.AppendEntriesRequest{Term: 1, PrevLogEntry: 2, LeaderCommitIndex: 1}, new(raft.AppendEntriesResponse)); err != nil {
		t.Fatal(err)
	}
	if _, err := pl.AppendEntries(&raft.AppendEntriesRequest{Term: 1, PrevLogEntry: 1}, new(raft.AppendEntriesResponse)); err != nil {
		t.Fatal(err)
	}
	// b never answers; closing it must not wait for raft.
	waitFor(t, "the request to arrive", 10*time.Second, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.accepted) == 2
	})
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close hangs")
	}
	f := <-pl.Consumer()
	if f.Error() == nil || f.Response().Success {
		t.Fatalf("the pending append completed: %+v", f.Response())
	}
	if err := b.AppendEntries("a", p.muxes[0].Addr(), &raft.AppendEntriesRequest{Term: 1}, new(raft.AppendEntriesResponse)); err == nil {
		t.Fatal("a closed transport sent an append")
	}
}

type runtimeMem struct{ total uint64 }

func (m *runtimeMem) read() {
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	m.total = s.TotalAlloc
}

// A pipeline whose answers nobody reads (raft stops reading when one
// fails, and its sender may still be writing) does not block its sender
// forever: past the transport's timeout the send fails and raft leaves the
// pipeline.
func TestAppendPipelineStallsOut(t *testing.T) {
	p := newTransportPair(t, "g", true)
	a := p.trans[0].(*appendTransport)
	a.timeout = 300 * time.Millisecond
	go answer(p.trans[1].Consumer(), 1000, make(chan *raft.AppendEntriesRequest, 1000))
	pl, err := a.AppendEntriesPipeline("b", p.muxes[1].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	done := make(chan error, 1)
	go func() {
		for i := 0; i < 100; i++ {
			if _, err := pl.AppendEntries(&raft.AppendEntriesRequest{Term: 1, PrevLogEntry: uint64(2 * i)}, new(raft.AppendEntriesResponse)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errPipelineStalled) {
			t.Fatalf("sending into a pipeline nobody reads: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the sender blocks forever")
	}
}

// vecRecorder is a buffersWriter that records each call's buffers.
type vecRecorder struct {
	buf   bytes.Buffer
	calls [][][]byte
}

func (v *vecRecorder) writeBuffers(b *net.Buffers) (int64, error) {
	v.calls = append(v.calls, append([][]byte(nil), *b...))
	return b.WriteTo(&v.buf)
}

// On a stream that takes several buffers at once, a request is the same
// bytes as through the buffered writer, handed over in one call, with the
// large entries' bytes passed from Raft's buffers (not copied) and not
// held after the call.
func TestAppendWireVectored(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var plain bytes.Buffer
	pw := wireWriter{w: bufio.NewWriterSize(&plain, 4<<10)}
	rec := &vecRecorder{}
	vw := wireWriter{vec: rec}
	for i := 0; i < 200; i++ {
		req := randomAppendRequest(rng)
		if err := pw.writeAppendRequest(req); err != nil {
			t.Fatal(err)
		}
		if err := vw.writeAppendRequest(req); err != nil {
			t.Fatal(err)
		}
		if len(rec.calls) != i+1 {
			t.Fatalf("request %d: %d calls, want 1", i, len(rec.calls)-i)
		}
		large := 0
		for _, e := range req.Entries {
			if len(e.Data) > 4<<10 {
				large++
				passed := false
				for _, b := range rec.calls[i] {
					if len(b) == len(e.Data) && &b[0] == &e.Data[0] {
						passed = true
					}
				}
				if !passed {
					t.Fatalf("request %d: entry %d's bytes were copied", i, e.Index)
				}
			}
		}
		if n := len(rec.calls[i]); n < large || n > 2*large+1 {
			t.Fatalf("request %d: %d buffers for %d large entries", i, n, large)
		}
		for _, b := range vw.out[:cap(vw.out)] {
			if b != nil {
				t.Fatalf("request %d: a buffer is still held after the write", i)
			}
		}
		if !bytes.Equal(plain.Bytes(), rec.buf.Bytes()) {
			t.Fatalf("request %d: the two writers' bytes differ", i)
		}
	}
	wr := wireReader{r: bufio.NewReader(&rec.buf)}
	var got raft.AppendEntriesRequest
	if err := wr.readAppendRequest(&got); err != nil {
		t.Fatal(err)
	}
}

// TestFirstByte: the byte a session stream's server waited for comes
// first, then the rest of the stream, through a pooled reader.
func TestFirstByte(t *testing.T) {
	var f requestHead
	if err := f.wait(strings.NewReader("abcdef")); err != nil {
		t.Fatal(err)
	}
	br := readerPool.Get().(*bufio.Reader)
	defer readerPool.Put(br)
	br.Reset(&f)
	got, err := io.ReadAll(br)
	if err != nil || string(got) != "abcdef" {
		t.Fatalf("read %q, %v", got, err)
	}
	if err := f.wait(strings.NewReader("")); err != io.EOF {
		t.Fatalf("wait at the end: %v, want EOF", err)
	}
}
