package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
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
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if gb, ok := b.(GroupBroker); ok {
		s.gb = gb
		s.groups = newCoordinator(s.groupCfg, realClock{}, s.logger.Named("groups"))
		s.groups.ctx, s.groups.store = s.ctx, gb
	}
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

// requester names the client for Broker.CreateTopic: its client id and
// host (without the port, which a retry on a new connection changes).
func (c *call) requester() string { return c.clientID + "@" + c.host }

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

// timeoutCtx bounds parent by a request's timeout (defaultTimeout when the
// request has none).
func timeoutCtx(parent context.Context, ms int32) (context.Context, context.CancelFunc) {
	d := time.Duration(ms) * time.Millisecond
	if ms <= 0 {
		d = defaultTimeout
	}
	return context.WithTimeout(parent, d)
}
