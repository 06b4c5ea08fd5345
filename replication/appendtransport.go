package replication

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// appendTransport is a group's raft.Transport. AppendEntries, heartbeats
// and the replication pipeline travel on streams of their own, named
// group+appendStreamSuffix on the mux (direct connections while the
// peer's bound allows: Mux.DirectLayer), in the format of appendwire.go;
// every other RPC (votes, pre-votes, snapshots, TimeoutNow) goes through
// the wrapped raft.NetworkTransport on the group's own streams. So a
// follower reads each entry's bytes once into a buffer of their size,
// where msgpack would copy a 1 MiB batch several times while decoding it.
//
// A peer that answers that it hosts no such stream (a node that predates
// them) is sent its appends through the NetworkTransport, which also
// serves appends that such a peer sends here.
type appendTransport struct {
	raft.Transport
	prevote     raft.WithPreVote
	layer       *groupLayer
	timeout     time.Duration
	maxPool     int
	maxInFlight int
	logger      hclog.Logger

	consumeCh chan raft.RPC
	// forwarding starts forward, for a caller of Consumer; the guard
	// reads both channels itself (consumers).
	forwarding sync.Once

	// votes, when set, carries the group's votes, pre-votes and
	// TimeoutNow (votes.go).
	votes *votes
	group string

	// quiesce, when the node quiesces idle groups, answers on a quiesced
	// follower's behalf and is told what this replica answered as one.
	quiesce *groupQuiesce

	hbMu sync.Mutex
	hbFn func(raft.RPC)

	beating inFlight // heartbeats answered here on their way to followers

	// readersHeld counts the session streams served here that hold a
	// reader of readerPool: those amid a request.
	readersHeld atomic.Int64

	pool idlePool[*appendConn]

	mu       sync.Mutex
	accepted map[net.Conn]struct{}
	closed   bool

	shutdown  chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// appendStreamSuffix names a group's append streams on the mux. Kafka
// topic names cannot hold '/', so it never names another group.
const appendStreamSuffix = "/append"

// appendConn is one stream to a peer's append streams.
type appendConn struct {
	target raft.ServerAddress
	conn   net.Conn
	r      wireReader
	w      wireWriter
}

func newAppendConn(target raft.ServerAddress, c net.Conn) *appendConn {
	ac := &appendConn{
		target: target, conn: c,
		r: wireReader{r: bufio.NewReaderSize(c, appendResponseBuffer)},
	}
	if v, ok := c.(buffersWriter); ok {
		ac.w.vec = v
	} else {
		ac.w.conn = c // a session stream: a pooled writer per request
	}
	return ac
}

// appendBufferSize is the buffer of what carries requests (the writer
// of an append stream's sender, the reader of its server): a request's
// header and small entries gather in it, a larger entry is read
// into (and written from) its own buffer past it. Every group holds a few
// such streams per follower, busy or not: 16 KiB replicated 1 KiB batches
// as fast as 64 KiB did (BenchmarkReplicatedAppend, within the runs'
// spread), where 4 KiB lost a fifth on the multiplexed session.
const appendBufferSize = 16 << 10

// appendResponseBuffer is the buffer of what carries only responses: the
// reader of a stream's sender and the writer of its server. A response
// is some 70 bytes; a node of 3,000 replicas held 16 KiB readers on
// thousands of streams that read nothing else, a third of its heap.
const appendResponseBuffer = 512

// rpcError is an error a peer answered an RPC with.
type rpcError string

func (e rpcError) Error() string { return string(e) }

// newAppendTransport wraps inner, serving and sending appends on layer.
// maxInFlight bounds the pipelined requests to one follower, as
// raft.NetworkTransportConfig.MaxRPCsInFlight does (at least 2).
func newAppendTransport(inner raft.Transport, layer *groupLayer, timeout time.Duration, maxPool, maxInFlight int, logger hclog.Logger) *appendTransport {
	t := &appendTransport{
		Transport: inner, layer: layer, timeout: timeout, maxPool: maxPool, maxInFlight: max(maxInFlight, 2), logger: logger,
		consumeCh: make(chan raft.RPC),
		accepted:  map[net.Conn]struct{}{},
		shutdown:  make(chan struct{}),
	}
	t.prevote, _ = inner.(raft.WithPreVote)
	layer.Serve(t.accept)
	return t
}

// accept serves the stream c until it ends, unless the transport is
// closed.
func (t *appendTransport) accept(c net.Conn) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		c.Close()
		return
	}
	t.accepted[c] = struct{}{}
	t.wg.Add(1)
	t.mu.Unlock()
	t.serve(c)
}

// consumers returns the two channels RPCs arrive on: those served here
// (append streams, votes) and those the NetworkTransport received. A
// reader of both needs no goroutine merging them (forward): a node holds
// thousands of replicas.
func (t *appendTransport) consumers() (served, inner <-chan raft.RPC) {
	return t.consumeCh, t.Transport.Consumer()
}

// forward passes on the RPCs the NetworkTransport received to consumeCh,
// for a caller of Consumer.
func (t *appendTransport) forward() {
	defer t.wg.Done()
	in := t.Transport.Consumer()
	for {
		select {
		case rpc := <-in:
			select {
			case t.consumeCh <- rpc:
			case <-t.shutdown:
				rpc.Respond(nil, raft.ErrTransportShutdown)
				return
			}
		case <-t.shutdown:
			return
		}
	}
}

// Consumer implements raft.Transport: every RPC on one channel, a
// goroutine passing on the NetworkTransport's (consumers avoids it).
func (t *appendTransport) Consumer() <-chan raft.RPC {
	t.forwarding.Do(func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.closed {
			return
		}
		t.wg.Add(1)
		go t.forward()
	})
	return t.consumeCh
}

// SetHeartbeatHandler implements raft.Transport.
func (t *appendTransport) SetHeartbeatHandler(fn func(raft.RPC)) {
	t.hbMu.Lock()
	t.hbFn = fn
	t.hbMu.Unlock()
	t.Transport.SetHeartbeatHandler(fn)
}

// serveVotes makes the node's vote streams carry the group's votes.
func (t *appendTransport) serveVotes(v *votes, group string) {
	t.votes, t.group = v, group
	v.register(group, t)
}

// voted sends a request on the vote streams: false when the peer does not
// serve them there.
func (t *appendTransport) voted(target raft.ServerAddress, kind byte, req, resp any) (bool, error) {
	if t.votes == nil {
		return false, nil
	}
	if t.quiesce != nil && t.quiesce.q.isGone(target) {
		// Refused here, as a dead peer would: a thousand campaigns after
		// a node's death each dialed it.
		return true, errPeerGone
	}
	err := t.votes.call(target, t.group, kind, req, resp, t.timeout)
	if errors.Is(err, errNoVoteStreams) {
		return false, nil
	}
	return true, err
}

// RequestVote implements raft.Transport.
func (t *appendTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if ok, err := t.voted(target, voteKindVote, args, resp); ok {
		return err
	}
	return t.Transport.RequestVote(id, target, args, resp)
}

// TimeoutNow implements raft.Transport.
func (t *appendTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	if ok, err := t.voted(target, voteKindTimeoutNow, args, resp); ok {
		return err
	}
	return t.Transport.TimeoutNow(id, target, args, resp)
}

// RequestPreVote implements raft.WithPreVote.
func (t *appendTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if t.prevote == nil {
		return errors.New("replication: transport without pre-vote")
	}
	if ok, err := t.voted(target, voteKindPreVote, args, resp); ok {
		return err
	}
	return t.prevote.RequestPreVote(id, target, args, resp)
}

func (t *appendTransport) getConn(target raft.ServerAddress) (*appendConn, error) {
	if t.quiesce != nil && t.quiesce.q.isGone(target) {
		// Refused here, as for votes: after a node's death each group
		// that had a follower there dialed it for every heartbeat and
		// append, thousands a second, until its backoff grew.
		return nil, errPeerGone
	}
	if c, err := t.pool.take(target); c != nil || err != nil {
		return c, err
	}
	c, err := t.layer.Dial(target, t.timeout)
	if err != nil {
		return nil, err
	}
	return newAppendConn(target, c), nil
}

func (t *appendTransport) returnConn(c *appendConn) {
	if !t.pool.keep(c.target, c, t.maxPool) {
		abort(c.conn)
	}
}

// idlePool keeps idle connections to each peer for the next request.
type idlePool[C comparable] struct {
	mu     sync.Mutex
	idle   map[raft.ServerAddress][]C
	closed bool
}

// take returns an idle connection to target, the zero C when there is
// none, or ErrTransportShutdown once the pool is closed.
func (p *idlePool[C]) take(target raft.ServerAddress) (C, error) {
	var none C
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return none, raft.ErrTransportShutdown
	}
	cs := p.idle[target]
	if len(cs) == 0 {
		return none, nil
	}
	p.idle[target] = cs[:len(cs)-1]
	return cs[len(cs)-1], nil
}

// keep keeps c for the next request to target unless limit are kept
// already or the pool is closed; false: the caller closes it.
func (p *idlePool[C]) keep(target raft.ServerAddress, c C, limit int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle[target]) >= limit {
		return false
	}
	if p.idle == nil {
		p.idle = map[raft.ServerAddress][]C{}
	}
	p.idle[target] = append(p.idle[target], c)
	return true
}

// close closes the pool and returns what it kept, for the caller to close.
func (p *idlePool[C]) close() []C {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var out []C
	for _, cs := range p.idle {
		out = append(out, cs...)
	}
	p.idle = nil
	return out
}

// AppendEntries implements raft.Transport.
func (t *appendTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if t.quiesce != nil && t.quiesce.mayAnswer(id, target, args, resp) {
		return nil
	}
	if t.quiesce != nil && t.quiesce.answerHeartbeat(id, target, args, resp) {
		t.heartbeatBehind(id, target, *args)
		return nil
	}
	return t.sendAppend(id, target, args, resp)
}

// heartbeatBehind sends a heartbeat answered here to the follower, in
// the background, unless the last one to it is still on its way.
func (t *appendTransport) heartbeatBehind(id raft.ServerID, target raft.ServerAddress, args raft.AppendEntriesRequest) {
	if !t.beating.start(target) {
		return
	}
	// Not under t.wg: Close must not wait for a request to a starved
	// peer; once closed, the transport dials nothing more.
	go func() {
		defer t.beating.done(target)
		var resp raft.AppendEntriesResponse
		if err := t.sendAppend(id, target, &args, &resp); err != nil {
			t.logger.Debug("heartbeat failed", "peer", target, "error", err)
		}
	}()
}

// campaign makes the replica campaign at once, as a TimeoutNow from its
// leader at leader would (raft skips the pre-vote and voters grant it
// though they knew a leader), through the vote guard, which refuses it
// for a gated replica. Only a replica that follows or campaigns may be
// told: a leader would step down.
func (t *appendTransport) campaign(leader raft.ServerAddress) error {
	respCh := make(chan raft.RPCResponse, 1)
	rpc := raft.RPC{Command: &raft.TimeoutNowRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, Addr: []byte(leader)},
	}, RespChan: respCh}
	timer := time.NewTimer(t.timeout)
	defer timer.Stop()
	select {
	case t.consumeCh <- rpc:
	case <-t.shutdown:
		return raft.ErrTransportShutdown
	case <-timer.C:
		return errors.New("replication: raft took no campaign request")
	}
	select {
	case resp := <-respCh:
		return resp.Error
	case <-t.shutdown:
		return raft.ErrTransportShutdown
	case <-timer.C:
		return errors.New("replication: raft answered no campaign request")
	}
}

// inFlight is the peers a request is on its way to, where one at a time
// is enough (a heartbeat, a pre-vote).
type inFlight struct {
	mu sync.Mutex
	to map[raft.ServerAddress]bool
}

// start marks a request on its way to target; false when one already is.
func (f *inFlight) start(target raft.ServerAddress) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.to[target] {
		return false
	}
	if f.to == nil {
		f.to = map[raft.ServerAddress]bool{}
	}
	f.to[target] = true
	return true
}

// done marks the request to target answered or failed.
func (f *inFlight) done(target raft.ServerAddress) {
	f.mu.Lock()
	delete(f.to, target)
	f.mu.Unlock()
}

// sendAppend sends an append to the follower at target and reads its
// answer.
func (t *appendTransport) sendAppend(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	c, err := t.getConn(target)
	if errors.Is(err, ErrGroupNotHosted) {
		return t.Transport.AppendEntries(id, target, args, resp)
	}
	if err != nil {
		return err
	}
	if t.timeout > 0 {
		c.conn.SetDeadline(time.Now().Add(t.timeout))
	}
	if err := c.w.writeAppendRequest(args); err != nil {
		abort(c.conn)
		return err
	}
	err = c.r.readAppendResponse(resp)
	var answered rpcError
	if err != nil && !errors.As(err, &answered) {
		abort(c.conn)
		return err
	}
	t.returnConn(c)
	return err
}

// AppendEntriesPipeline implements raft.Transport.
func (t *appendTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	c, err := t.getConn(target)
	if errors.Is(err, ErrGroupNotHosted) {
		return t.Transport.AppendEntriesPipeline(id, target)
	}
	if err != nil {
		return nil, err
	}
	p := &appendPipeline{
		t: t, c: c, id: id,
		// As in raft.NetworkTransport: one request is written while the
		// decoder waits for the answer to the one before, so a buffer of
		// maxInFlight-2 lets maxInFlight be in flight.
		inprogress: make(chan *appendFuture, t.maxInFlight-2),
		// Room for every answer in flight and more: raft stops reading
		// answers when one fails, and its sender may still write a
		// request or two before it sees that (see AppendEntries).
		done:     make(chan raft.AppendFuture, t.maxInFlight+pipelineSlack),
		shutdown: make(chan struct{}),
	}
	go p.decode()
	return p, nil
}

// serve answers the requests of one stream, one at a time, as
// raft.NetworkTransport does: heartbeats through the heartbeat handler,
// the rest through the consumer channel.
func (t *appendTransport) serve(c net.Conn) {
	defer t.wg.Done()
	defer func() {
		c.Close()
		t.mu.Lock()
		delete(t.accepted, c)
		t.mu.Unlock()
	}()
	r := wireReader{arena: new(entryArena)}
	// A session stream waits for its next request holding no buffer
	// (readerPool); a direct connection, of which a node holds a bounded
	// number, keeps one, sparing a read per request.
	lazy := sessionStream(c)
	var head requestHead
	if !lazy {
		r.r = bufio.NewReaderSize(c, appendBufferSize)
	}
	defer func() {
		if lazy && r.r != nil {
			t.putReader(r.r)
		}
	}()
	w := wireWriter{w: bufio.NewWriterSize(c, appendResponseBuffer)}
	respCh := make(chan raft.RPCResponse, 1)
	for {
		if lazy && r.r == nil {
			if err := head.wait(c); err != nil {
				t.readFailed(err)
				return
			}
			r.r = readerPool.Get().(*bufio.Reader)
			r.r.Reset(&head)
			t.readersHeld.Add(1)
		}
		req := new(raft.AppendEntriesRequest)
		if err := r.readAppendRequest(req); err != nil {
			r.arena.release() // Raft never saw this request
			t.readFailed(err)
			return
		}
		rpc := raft.RPC{Command: req, RespChan: respCh}
		leader := req.Addr
		if len(leader) == 0 {
			leader = req.Leader
		}
		heartbeat := len(leader) > 0 && isHeartbeat(req)
		var hb func(raft.RPC)
		if heartbeat {
			t.hbMu.Lock()
			hb = t.hbFn
			t.hbMu.Unlock()
		}
		if hb != nil {
			hb(rpc)
		} else {
			select {
			case t.consumeCh <- rpc:
			case <-t.shutdown:
				return
			}
		}
		var resp raft.RPCResponse
		select {
		case resp = <-respCh:
		case <-t.shutdown:
			return // Raft may still hold the entries: the arena's chunks are left to the collector
		}
		r.arena.release() // answered: Raft is done with the entries
		out, _ := resp.Response.(*raft.AppendEntriesResponse)
		if out == nil && resp.Error == nil {
			resp.Error = errors.New("replication: no append response")
		}
		if err := w.writeAppendResponse(out, resp.Error); err != nil {
			return
		}
		if t.quiesce != nil && resp.Error == nil {
			t.quiesce.served(leader, req, out, heartbeat)
		}
		if lazy && r.r.Buffered() == 0 {
			t.putReader(r.r)
			r.r = nil
		}
	}
}

// readFailed logs a failed read of an append stream unless the stream
// ended as streams end (EOF, closed) or the transport is closing.
func (t *appendTransport) readFailed(err error) {
	select {
	case <-t.shutdown:
	default:
		if err != io.EOF && !errors.Is(err, net.ErrClosed) {
			t.logger.Warn("reading an append request failed", "error", err)
		}
	}
}

// putReader hands a session stream's reader back to readerPool.
func (t *appendTransport) putReader(r *bufio.Reader) {
	r.Reset(nil)
	readerPool.Put(r)
	t.readersHeld.Add(-1)
}

// requestHead waits for the first bytes of a request on a stream (wait),
// then, as the reader of a pooled bufio.Reader, yields them and the rest
// of the stream: the stream's next bytes, the whole of a small request,
// are read into a small array of its own.
type requestHead struct {
	c        io.Reader
	b        [128]byte
	off, end int
}

// wait blocks until the stream's next bytes arrive, and holds them.
func (f *requestHead) wait(c io.Reader) error {
	f.c, f.off, f.end = c, 0, 0
	for {
		n, err := c.Read(f.b[:])
		if n > 0 {
			f.end = n
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (f *requestHead) Read(p []byte) (int, error) {
	if f.off < f.end {
		n := copy(p, f.b[f.off:f.end])
		f.off += n
		return n, nil
	}
	return f.c.Read(p)
}

// Close implements raft.WithClose: it closes the streams, stops serving
// and closes the wrapped transport.
func (t *appendTransport) Close() error {
	t.closeOnce.Do(func() {
		if t.votes != nil {
			t.votes.unregister(t.group, t)
		}
		close(t.shutdown)
		t.layer.Close()
		t.mu.Lock()
		t.closed = true
		var conns []net.Conn
		for c := range t.accepted {
			conns = append(conns, c)
		}
		t.mu.Unlock()
		for _, c := range t.pool.close() {
			conns = append(conns, c.conn)
		}
		for _, c := range conns {
			abort(c)
		}
	})
	t.wg.Wait()
	if c, ok := t.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

// abort closes c and wakes its blocked reads and writes at once: closing
// a yamux stream closes only its sending side, and a read waits for the
// peer to close its own.
func abort(c net.Conn) {
	c.SetDeadline(time.Now())
	c.Close()
}

// pipelineSlack is how many answers beyond those in flight the decoder can
// complete without raft reading them.
const pipelineSlack = 4

var errPipelineStalled = errors.New("replication: append pipeline stalled: its answers are not read")

// appendPipeline is raft.AppendPipeline on one append stream.
type appendPipeline struct {
	t          *appendTransport
	c          *appendConn
	id         raft.ServerID
	inprogress chan *appendFuture
	done       chan raft.AppendFuture
	shutdown   chan struct{}
	closeOnce  sync.Once
}

// AppendEntries implements raft.AppendPipeline: it writes the request and
// hands it to the decoder, which blocks when maxInFlight are in flight.
func (p *appendPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	f := &appendFuture{start: time.Now(), args: args, resp: resp, done: make(chan struct{})}
	if q := p.t.quiesce; q != nil && q.mayAnswer(p.id, p.c.target, args, resp) {
		// Answered here, but in its turn among the requests in flight.
		f.local = true
	} else {
		if p.t.timeout > 0 {
			p.c.conn.SetWriteDeadline(time.Now().Add(p.t.timeout))
		}
		if err := p.c.w.writeAppendRequest(args); err != nil {
			abort(p.c.conn)
			return nil, err
		}
	}
	var stall <-chan time.Time
	if p.t.timeout > 0 {
		t := time.NewTimer(p.t.timeout)
		defer t.Stop()
		stall = t.C
	}
	select {
	case p.inprogress <- f:
		return f, nil
	case <-p.shutdown:
		return nil, raft.ErrPipelineShutdown
	case <-stall:
		// The decoder holds an answer nobody takes: raft's reader of the
		// answers stopped (an answer failed) while its sender, not having
		// seen that yet, went on writing. Without this bound both sides
		// wait for each other forever and the follower is never sent
		// anything again (raft.NetworkTransport's pipeline has the same
		// hole); with it, raft leaves the pipeline and starts over.
		abort(p.c.conn)
		return nil, errPipelineStalled
	}
}

// decode reads the answers in order and completes their futures. After a
// failed read every later future fails too (the stream is closed), and
// raft, seeing an unsuccessful response, leaves the pipeline.
func (p *appendPipeline) decode() {
	for {
		select {
		case f := <-p.inprogress:
			var err error
			if !f.local {
				if p.t.timeout > 0 {
					p.c.conn.SetReadDeadline(time.Now().Add(p.t.timeout))
				}
				err = p.c.r.readAppendResponse(f.resp)
				var answered rpcError
				if err != nil && !errors.As(err, &answered) {
					abort(p.c.conn)
				}
			}
			f.err = err
			close(f.done)
			select {
			case p.done <- f:
			case <-p.shutdown:
				return
			}
		case <-p.shutdown:
			return
		}
	}
}

// Consumer implements raft.AppendPipeline.
func (p *appendPipeline) Consumer() <-chan raft.AppendFuture { return p.done }

// Close implements raft.AppendPipeline: the stream is closed, not pooled
// (its answers may still be in flight).
func (p *appendPipeline) Close() error {
	p.closeOnce.Do(func() {
		close(p.shutdown)
		abort(p.c.conn)
	})
	return nil
}

// appendFuture is raft.AppendFuture.
type appendFuture struct {
	start time.Time
	args  *raft.AppendEntriesRequest
	resp  *raft.AppendEntriesResponse
	done  chan struct{}
	err   error
	local bool // answered by quiescence, not read from the stream
}

func (f *appendFuture) Error() error                          { <-f.done; return f.err }
func (f *appendFuture) Start() time.Time                      { return f.start }
func (f *appendFuture) Request() *raft.AppendEntriesRequest   { return f.args }
func (f *appendFuture) Response() *raft.AppendEntriesResponse { return f.resp }
