package rpc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlog/raftlog/replication/acceptretry"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Defaults of the Server options.
const (
	// DefaultMaxRequestBytes bounds one request (Kafka's
	// socket.request.max.bytes).
	DefaultMaxRequestBytes = 100 << 20
	// DefaultMaxConnections bounds the open client connections.
	DefaultMaxConnections = 10000
	// DefaultMaxInFlight bounds the requests read from one connection
	// whose work is not over: not answered yet, or answered at their
	// deadline while their append's outcome is still awaited.
	DefaultMaxInFlight = 32
)

// ErrServerClosed is returned by Serve once Close was called.
var ErrServerClosed = errors.New("rpc: server closed")

// defaultTimeout bounds a request that carries no usable timeout of its own.
const defaultTimeout = 30 * time.Second

// Option configures a Server.
type Option func(*Server)

// WithLogger sets the logger (default: hclog.Default named "kafka").
func WithLogger(l hclog.Logger) Option {
	return func(s *Server) {
		if l != nil {
			s.logger = l
		}
	}
}

// WithMaxRequestBytes bounds the size of one request; a client announcing
// a larger one is disconnected. n <= 0 keeps the default (100 MiB).
func WithMaxRequestBytes(n int) Option {
	return func(s *Server) {
		if n > 0 {
			s.maxRequestBytes = n
		}
	}
}

// WithMaxConnections bounds the open connections; connections past it are
// closed as soon as they are accepted. n <= 0 keeps the default (10000).
func WithMaxConnections(n int) Option {
	return func(s *Server) {
		if n > 0 {
			s.maxConns = n
		}
	}
}

// WithMaxInFlight bounds the requests of one connection that were read and
// whose work is not over (not answered yet, or answered REQUEST_TIMED_OUT
// while their append's outcome is still awaited); the server stops
// reading the connection while it is reached. n <= 0 keeps the default
// (32).
func WithMaxInFlight(n int) Option {
	return func(s *Server) {
		if n > 0 {
			s.maxInFlight = n
		}
	}
}

// Server serves the Kafka protocol against a Broker.
//
// Each connection has a goroutine that reads its requests, up to
// MaxInFlight in flight, and serves them in order; the responses are
// written in the same order, each by the goroutine that finishes it or
// one before it (see serveConn). Requests are served
// one at a time, each answered before the next is served (as Kafka does
// per connection; a long-poll Fetch therefore delays the requests behind
// it on the same connection only), with one exception: Produce requests
// are pipelined. A Produce request's appends are started in order, and while
// they commit the next Produce requests are started too, so a producer's
// in-flight requests share Raft's replication rounds; any other request
// waits until every request before it is answered. Connections are
// independent.
type Server struct {
	b               Broker
	logger          hclog.Logger
	maxRequestBytes int
	maxConns        int
	maxInFlight     int
	observer        Observer // nil: none

	// gb is b as a GroupBroker, nil when b is not one: then the group
	// APIs are neither advertised nor served.
	gb       GroupBroker
	groups   *coordinator
	groupCfg GroupConfig

	// ctx ends when the server closes; every request's context derives
	// from it.
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	retaining bool           // the offset retention loop runs
	wg        sync.WaitGroup // connection goroutines and the offset retention loop
}

// NewServer returns a server for b; call Serve to accept connections.
func NewServer(b Broker, opts ...Option) *Server {
	s := &Server{
		b:               b,
		logger:          hclog.Default().Named("kafka"),
		maxRequestBytes: DefaultMaxRequestBytes,
		maxConns:        DefaultMaxConnections,
		maxInFlight:     DefaultMaxInFlight,
		listeners:       make(map[net.Listener]struct{}),
		conns:           make(map[net.Conn]struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	if gb, ok := b.(GroupBroker); ok {
		s.gb = gb
		s.groups = newCoordinator(s.groupCfg, realClock{}, s.logger.Named("groups"))
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// Serve accepts connections on ln until ln fails or the server is closed
// (then it returns ErrServerClosed). It may be called for several
// listeners; Close closes them all.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	if s.groups != nil && !s.retaining && s.groups.cfg.OffsetsRetention > 0 {
		s.retaining = true
		s.wg.Add(1)
		go s.retainOffsets()
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()

	var backoff acceptretry.Backoff
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isClosed() {
				return ErrServerClosed
			}
			if backoff.Retry(err, s.ctx.Done()) {
				s.logger.Warn("accept failed; retried", "error", err, "after", backoff.Delay())
				continue
			}
			if s.isClosed() {
				return ErrServerClosed
			}
			return err
		}
		backoff.Reset()
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return ErrServerClosed
		}
		if len(s.conns) >= s.maxConns {
			s.mu.Unlock()
			s.logger.Warn("too many connections; closing a new one", "remote", nc.RemoteAddr().String(), "max", s.maxConns)
			nc.Close()
			continue
		}
		s.conns[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(nc)
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close closes the listeners and every connection, ends the requests
// being served, and waits for the connection goroutines to return.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	var err error
	for ln := range s.listeners {
		if cerr := ln.Close(); cerr != nil && err == nil && !errors.Is(cerr, net.ErrClosed) {
			err = cerr
		}
	}
	for nc := range s.conns {
		nc.Close()
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	if s.groups != nil {
		s.groups.reset()
	}
	return err
}

// call is what a handler knows of the request it serves.
type call struct {
	// ctx ends when the server closes: the context of work that must not
	// be abandoned because the client went away (appends).
	ctx context.Context
	// poll ends too when the client disconnects: the context of waits
	// done only for the client (Fetch long poll).
	poll     context.Context
	clientID string
	// host is the client's address as Kafka shows it ("/127.0.0.1").
	host string
	// start is when the request was read; long polls count from it.
	start time.Time

	// What the observer is told: set by handle once the request is known
	// to be served.
	key, version int16
	served       bool
	req          kmsg.Request
	resp         kmsg.Response

	// corr is the request's correlation id. wait, set by a handler that
	// started its work and left it running, finishes the work and c.resp;
	// the response is encoded and written once it returns.
	corr int32
	wait func()
	// expire, set with wait by a handler whose work has a deadline,
	// settles c.resp at once (what is not done times out): the
	// connection calls it when deadline passes before wait returns, and
	// answers then. wait leaves c.resp alone once expire has run.
	expire   func()
	deadline time.Time
}

// serveConn serves one connection. This goroutine reads the requests and
// serves them in order, a Produce request at once (its appends started
// in the order they came), anything else on a goroutine of its own so
// that this one reads on and sees the client leave (unless the client
// sends another request behind it: that one waits its turn unread
// further, and a long poll then ends at its own deadline). The responses
// are written in the same order by whichever goroutine finishes the
// oldest request not yet answered (conn.finish): the reader for a
// request served at once, the goroutine that served a request that is
// not a Produce, the one that waited for a Produce's commit, or the
// timer of its deadline. So a produce crosses no goroutine of the
// connection's on its way in or out beyond the one waiting for its
// commit.
func (s *Server) serveConn(nc net.Conn) {
	remote := nc.RemoteAddr().String()
	host := remote
	if ta, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		host = "/" + ta.IP.String()
	}
	poll, cancelPoll := context.WithCancel(s.ctx)
	cn := &conn{s: s, nc: nc, remote: remote}
	cn.cond = sync.NewCond(&cn.mu)
	// A server closing closes the connection: what is still awaited is
	// not answered.
	stopOnClose := context.AfterFunc(s.ctx, cn.fail)
	defer func() {
		if v := recover(); v != nil {
			s.logger.Error("panic serving a connection; closing it", "remote", remote, "panic", v)
			cn.fail()
		}
		cancelPoll() // the client is gone (or sent garbage): end its long polls
		cn.waitEmpty()
		cn.serving.Wait() // a request served beside the reader ends with poll or the server
		stopOnClose()
		nc.Close()
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
		s.wg.Done()
	}()

	br := bufio.NewReaderSize(nc, 64<<10)
	for {
		if !cn.waitRoom(s.maxInFlight) {
			return
		}
		body, err := readFrame(br, s.maxRequestBytes)
		if err != nil {
			switch {
			case errors.Is(err, errFrameSize):
				s.logger.Info("closing connection", "remote", remote, "error", err)
			case !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed):
				s.logger.Debug("closing connection", "remote", remote, "error", err)
			}
			// The requests already read are still answered (deferred
			// waitEmpty); then the connection closes.
			return
		}
		c := &call{ctx: s.ctx, poll: poll, host: host, start: time.Now()}
		p := &pending{c: c, size: 4 + len(body), exclusive: !isProduce(body)}
		// Only Produce requests overlap; anything else is served after
		// every request before it is answered, and everything after it
		// waits for its answer, as Kafka serves a connection.
		dst, ok := cn.turn(p.exclusive)
		if !ok {
			return
		}
		if !p.exclusive {
			resp, err := s.handle(c, body, dst)
			if err != nil {
				s.logger.Info("closing connection", "remote", remote, "client_id", c.clientID, "error", err)
				return
			}
			cn.enqueue(p)
			cn.settle(p, resp, dst)
			continue
		}
		cn.enqueue(p)
		cn.serving.Add(1)
		go func() {
			defer cn.serving.Done()
			cn.protect(p, func() {
				resp, err := s.handle(c, body, dst)
				if err != nil {
					s.logger.Info("closing connection", "remote", remote, "client_id", c.clientID, "error", err)
					p.failed.Store(true)
					return
				}
				cn.settle(p, resp, dst)
			})
			if p.failed.Load() {
				cn.finish(p) // the connection closes once the requests before it are answered
			}
		}()
	}
}

// conn is a connection's queue of requests read and not answered yet.
type conn struct {
	s      *Server
	nc     net.Conn
	remote string

	// serving counts the goroutines serving a request that is not a
	// Produce; the connection's goroutine waits for them before it ends,
	// so Server.Close returns once no handler runs.
	serving sync.WaitGroup

	mu   sync.Mutex
	cond *sync.Cond // broadcast when the queue or inflight shrinks and when dead is set
	// queue holds the requests read and not answered yet, in order.
	queue []*pending
	// inflight counts the requests read whose work is not over: those
	// queued, and those answered at their deadline whose wait still
	// runs (a Produce whose commit had not come). MaxInFlight bounds it,
	// so a connection whose appends keep timing out stops being read
	// rather than pile up waits and their request buffers.
	inflight int
	// spare is the last response's buffer, reused for the next; nil
	// while a request being served holds it.
	spare []byte
	// dead: a write failed, a request failed or the server closed; the
	// connection is closed and nothing more is written.
	dead bool
}

// pending is a request read from a connection and not answered yet.
type pending struct {
	c    *call
	size int    // the request's bytes, size prefix included
	resp []byte // the encoded response of a request answered at once
	// exclusive: not a Produce request; served alone.
	exclusive bool
	// ready: c.wait has returned or c.expire has run (at once when there
	// is no c.wait); answered: written (or dropped); waiting: c.wait
	// still runs. Under conn.mu.
	ready, answered, waiting bool
	// failed: serving the request panicked or failed; the connection
	// closes when it reaches the head of the queue (at once when a wait
	// panics after its answer was written).
	failed atomic.Bool
}

// waitRoom waits until fewer than max requests are in flight; false when
// the connection is dead.
func (cn *conn) waitRoom(max int) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for !cn.dead && cn.inflight >= max {
		cn.cond.Wait()
	}
	return !cn.dead
}

// turn waits until a request may be served: a Produce request once no
// request other than Produce is queued, any other (exclusive) once the
// queue is empty. It returns the spare response buffer when the queue is
// empty (nothing is being written then), and false when the connection
// is dead.
func (cn *conn) turn(exclusive bool) ([]byte, bool) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for !cn.dead && len(cn.queue) > 0 && (exclusive || cn.queue[0].exclusive) {
		cn.cond.Wait()
	}
	if cn.dead {
		return nil, false
	}
	var dst []byte
	if len(cn.queue) == 0 {
		dst, cn.spare = cn.spare, nil
	}
	return dst[:0:cap(dst)], true
}

func (cn *conn) enqueue(p *pending) {
	cn.mu.Lock()
	cn.queue = append(cn.queue, p)
	cn.inflight++
	cn.mu.Unlock()
}

// done counts p out of the requests in flight once it is both answered
// and waited for. Under cn.mu.
func (cn *conn) done(p *pending) {
	if p.answered && !p.waiting {
		cn.inflight--
		cn.cond.Broadcast()
	}
}

// settle follows up a served request p (queued) whose response handle
// returned: answered now, or once its c.wait returns or its deadline
// passes. dst is the buffer handle was given, kept for the next
// response when resp does not use it.
func (cn *conn) settle(p *pending, resp, dst []byte) {
	c := p.c
	if c.wait == nil {
		p.resp = resp
		if resp == nil {
			cn.putSpare(dst)
		}
		cn.finish(p)
		return
	}
	cn.putSpare(dst)
	cn.mu.Lock()
	p.waiting = true
	cn.mu.Unlock()
	var expiry *time.Timer
	if c.expire != nil && !c.deadline.IsZero() {
		expiry = time.AfterFunc(time.Until(c.deadline), func() {
			cn.protect(p, c.expire)
			cn.finish(p)
		})
	}
	go func() {
		cn.protect(p, c.wait)
		if expiry != nil {
			expiry.Stop()
		}
		cn.finish(p)
		cn.mu.Lock()
		defer cn.mu.Unlock()
		p.waiting = false
		if p.failed.Load() && p.answered {
			cn.failLocked() // the wait panicked after the deadline's answer
		}
		cn.done(p)
	}()
}

// protect runs fn, part of serving p; a panic in it fails p (and so the
// connection) instead of the process.
func (cn *conn) protect(p *pending, fn func()) {
	defer func() {
		if v := recover(); v != nil {
			cn.s.logger.Error("panic serving a request; closing the connection", "remote", cn.remote, "panic", v)
			p.failed.Store(true)
		}
	}()
	fn()
}

func (cn *conn) putSpare(b []byte) {
	if b == nil {
		return
	}
	cn.mu.Lock()
	if cn.spare == nil {
		cn.spare = b
	}
	cn.mu.Unlock()
}

// finish marks p ready (once; later calls do nothing) and writes the
// responses at the head of the queue that are ready, in order.
func (cn *conn) finish(p *pending) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if p.ready {
		return
	}
	p.ready = true
	popped := false
	for !cn.dead && len(cn.queue) > 0 && cn.queue[0].ready {
		head := cn.queue[0]
		cn.queue[0] = nil
		cn.queue = cn.queue[1:]
		popped = true
		if !cn.replySafely(head) {
			cn.failLocked()
		}
		head.answered = true
		cn.done(head)
	}
	if popped {
		cn.cond.Broadcast()
	}
}

// replySafely is reply, false when it panics (an encoding or the
// observer): the connection closes, the process goes on.
func (cn *conn) replySafely(p *pending) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			cn.s.logger.Error("panic answering a request; closing the connection", "remote", cn.remote, "panic", v)
			ok = false
		}
	}()
	return cn.reply(p)
}

// reply writes p's response (if any); false when the connection must
// close. Under cn.mu.
func (cn *conn) reply(p *pending) bool {
	if p.failed.Load() {
		return false
	}
	resp := p.resp
	if p.c.wait != nil && p.c.resp != nil {
		buf := cn.spare
		cn.spare = nil
		resp = appendResponse(buf[:0], p.c.corr, p.c.resp)
	}
	var werr error
	if resp != nil {
		_, werr = cn.nc.Write(resp)
	}
	if cn.s.observer != nil && p.c.served {
		cn.s.observe(p.c, p.size, len(resp))
	}
	if werr != nil {
		cn.s.logger.Debug("write failed; closing connection", "remote", cn.remote, "error", werr)
		return false
	}
	if resp != nil && cap(resp) <= 1<<20 { // a large fetch response's buffer is not pinned
		cn.spare = resp[:0]
	}
	return true
}

// fail closes the connection; nothing more is written.
func (cn *conn) fail() {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	cn.failLocked()
}

func (cn *conn) failLocked() {
	if !cn.dead {
		cn.dead = true
		cn.nc.Close()
	}
	cn.cond.Broadcast()
}

// waitEmpty waits until every queued request is answered or the
// connection is dead.
func (cn *conn) waitEmpty() {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for !cn.dead && len(cn.queue) > 0 {
		cn.cond.Wait()
	}
}

// isProduce reports whether the request frame body is a Produce request.
func isProduce(body []byte) bool {
	return len(body) >= 2 && binary.BigEndian.Uint16(body) == 0
}

var errFrameSize = errors.New("request size out of range")

// readFrame reads one size-prefixed request. A large request's buffer
// grows as its bytes arrive, so a client announcing a large size and
// sending nothing does not make the server allocate it.
func readFrame(r io.Reader, maxBytes int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int64(int32(binary.BigEndian.Uint32(hdr[:])))
	if n <= 0 || n > int64(maxBytes) {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", errFrameSize, n, maxBytes)
	}
	// Up to 8 MiB the whole frame is allocated at once and read once; a
	// larger claimed size grows by doubling as bytes arrive, so a peer
	// cannot make the node allocate what it never sends.
	const chunk = 8 << 20
	buf := make([]byte, min(n, chunk))
	for have := 0; ; {
		m, err := io.ReadFull(r, buf[have:])
		have += m
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if int64(have) == n {
			return buf, nil
		}
		grown := make([]byte, min(n, int64(2*len(buf))))
		copy(grown, buf)
		buf = grown
	}
}

// handle serves one request (its size prefix removed) and appends the
// response, with its size prefix and header, to dst. It returns nil when
// no response is due (acks=0 Produce) and an error when the connection
// must be closed: an unknown API key, an unsupported version of anything
// but ApiVersions, a request that does not decode.
func (s *Server) handle(c *call, req []byte, dst []byte) ([]byte, error) {
	r := reader{src: req}
	key, version, corr := r.int16(), r.int16(), r.int32()
	clientID, _ := r.nullableString()
	if r.bad {
		return nil, fmt.Errorf("short request header (%d bytes)", len(req))
	}
	if clientID != nil {
		c.clientID = *clientID
	}
	h, ok := handlers[key]
	if !ok || h.group && s.groups == nil {
		return nil, fmt.Errorf("unknown api key %d (version %d)", key, version)
	}
	c.key, c.version = key, version
	if version < h.min || version > h.max {
		if key == apiVersionsKey {
			// As Kafka: a v0 answer any client can read, carrying the
			// versions we do serve so the client can pick one.
			resp := kmsg.NewPtrApiVersionsResponse()
			resp.Version = 0
			resp.ErrorCode = kerr.UnsupportedVersion.Code
			resp.ApiKeys = s.apiKeys()
			c.served, c.resp = true, resp
			return appendResponse(dst, corr, resp), nil
		}
		return nil, fmt.Errorf("%s version %d not in [%d, %d]", kmsg.NameForKey(key), version, h.min, h.max)
	}
	kreq := kmsg.RequestForKey(key)
	if kreq == nil {
		return nil, fmt.Errorf("api key %d has no request type", key)
	}
	kreq.SetVersion(version)
	if kreq.IsFlexible() {
		kmsg.SkipTags(&r)
		if r.bad {
			return nil, fmt.Errorf("%s v%d: bad request header tags", kmsg.NameForKey(key), version)
		}
	}
	if err := kreq.ReadFrom(r.src); err != nil {
		return nil, fmt.Errorf("%s v%d: decode: %w", kmsg.NameForKey(key), version, err)
	}
	if s.logger.IsTrace() {
		s.logger.Trace("request", "api", kmsg.NameForKey(key), "version", version, "correlation_id", corr, "client_id", c.clientID)
	}
	resp, err := h.serve(s, c, kreq)
	if err != nil {
		return nil, fmt.Errorf("%s v%d: %w", kmsg.NameForKey(key), version, err)
	}
	c.served, c.req, c.corr = true, kreq, corr
	if resp == nil {
		return nil, nil
	}
	c.resp = resp
	if c.wait != nil {
		return nil, nil // encoded once c.wait returns
	}
	return appendResponse(dst, corr, resp), nil
}

// appendResponse appends the size prefix, the response header (the
// correlation id, and an empty tag section for flexible versions except
// ApiVersions, whose response header is always v0) and the response body.
func appendResponse(dst []byte, corr int32, resp kmsg.Response) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(corr))
	if resp.IsFlexible() && resp.Key() != apiVersionsKey {
		dst = append(dst, 0)
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// reader reads the request header. It implements kmsg.TagReader (with Ok,
// so kmsg.SkipTags stops on exhausted input).
type reader struct {
	src []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || n < 0 || n > len(r.src) {
		r.bad = true
		return nil
	}
	p := r.src[:n]
	r.src = r.src[n:]
	return p
}

func (r *reader) int16() int16 {
	if p := r.take(2); p != nil {
		return int16(binary.BigEndian.Uint16(p))
	}
	return 0
}

func (r *reader) int32() int32 {
	if p := r.take(4); p != nil {
		return int32(binary.BigEndian.Uint32(p))
	}
	return 0
}

// nullableString reads an int16-length string; length -1 is null.
func (r *reader) nullableString() (*string, bool) {
	n := r.int16()
	if r.bad {
		return nil, false
	}
	if n == -1 {
		return nil, true
	}
	p := r.take(int(n))
	if r.bad {
		return nil, false
	}
	str := string(p)
	return &str, true
}

// Uvarint reads an unsigned varint of at most 32 bits.
func (r *reader) Uvarint() uint32 {
	if r.bad {
		return 0
	}
	v, n := binary.Uvarint(r.src)
	if n <= 0 || v > 1<<32-1 {
		r.bad = true
		return 0
	}
	r.src = r.src[n:]
	return uint32(v)
}

// Span returns the next n bytes.
func (r *reader) Span(n int) []byte { return r.take(n) }

// Ok reports whether every read so far succeeded.
func (r *reader) Ok() bool { return !r.bad }

// timeoutCtx bounds parent by a request's timeout (defaultTimeout when the
// request has none).
func timeoutCtx(parent context.Context, ms int32) (context.Context, context.CancelFunc) {
	d := time.Duration(ms) * time.Millisecond
	if ms <= 0 {
		d = defaultTimeout
	}
	return context.WithTimeout(parent, d)
}
