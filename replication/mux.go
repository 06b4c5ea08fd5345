package replication

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/yamux"
	"github.com/raftlog/raftlog/replication/acceptretry"
)

// Mux is the node-wide Raft transport. Every Raft group on a node shares
// one listener, and a node holds one TCP connection to each peer it talks
// to (a yamux session) whatever the number of groups: each group's
// raft.NetworkTransport opens streams on it, each stream starting with a
// handshake that names the group. So the cost in connections does not grow
// with partitions × peers.
//
// Stream handshake (frozen):
//
//	dialer → 4 bytes  magic "RLMX"
//	         uvarint  length of the group name, then the name
//	← acceptor 1 byte: 1 the group is hosted here and takes the stream,
//	         0 it is not (the stream is then closed)
//
// The answer makes Dial fail at once for a group the peer does not host
// (yet): without it the dialer would only learn by writing, and a large
// write (an InstallSnapshot of many MB) into a stream nobody reads blocks
// until the transport's deadline, scaled by the snapshot size to minutes.
//
// Direct connections: a group registered with DirectLayer (a partition's
// append streams, which carry every batch to every follower) dials a TCP
// connection of its own per stream instead, up to a bound per peer
// (WithDirectLimit); past it, and to a peer that does not take them, its
// streams go on the session as any other. A direct connection starts with
// the magic "RLMD" and 8 bytes of flags (zero; with the magic, at least a
// yamux frame header, so that a node that predates direct connections
// reads a bad frame at once and closes the connection, and the dialer
// sends the stream on the session instead), then the stream handshake
// above without its magic.
// On the session, every frame passes two more goroutines (yamux's send and
// receive loops) and two more copies on its way; a direct connection is
// written from the caller's buffers and read into the reader's.
type Mux struct {
	ln     net.Listener
	addr   raft.ServerAddress
	logger hclog.Logger
	dial   DialFunc

	mu       sync.Mutex
	sessions map[raft.ServerAddress]*dialedSession
	dialing  map[raft.ServerAddress]*dialCall
	groups   map[string]*groupLayer
	closed   bool
	conns    map[net.Conn]struct{} // accepted connections and dialed direct ones, closed with the mux

	directLimit int
	// closeTimeout is how long a stream closed here waits for its peer to
	// close its side before it is reset (yamux's StreamCloseTimeout).
	closeTimeout time.Duration
	// stalls measures this process's stalls, which the liveness checks
	// of sessions and quiescence links leave out of a peer's silence.
	stalls   *stallClock
	direct   map[raft.ServerAddress]int       // direct connections dialed to each peer and open
	noDirect map[raft.ServerAddress]time.Time // peers that refused one, until when not to try again

	stop chan struct{} // closed by Close

	votes *votes // every group's votes (votes.go)
	// logs bounds what the node's replicas log (logbudget.go).
	logs *logBudget

	wg sync.WaitGroup
}

// DialFunc opens a connection to a peer's Raft address.
type DialFunc func(addr string, timeout time.Duration) (net.Conn, error)

type dialCall struct {
	done chan struct{}
	s    *dialedSession
	err  error
}

// dialedSession is a session this node dialed, with its open streams.
type dialedSession struct {
	*yamux.Session
	streams *streamSet
}

// Close closes the session, its streams ended first.
func (d *dialedSession) Close() error { return closeSession(d.Session, d.streams) }

var (
	muxMagic    = [4]byte{'R', 'L', 'M', 'X'}
	directMagic = [4]byte{'R', 'L', 'M', 'D'}
)

// MuxOption configures NewMux.
type MuxOption func(*Mux)

// WithDialer replaces net.DialTimeout (tests inject faults here).
func WithDialer(d DialFunc) MuxOption { return func(m *Mux) { m.dial = d } }

// WithMuxLogger sets the logger.
func WithMuxLogger(l hclog.Logger) MuxOption { return func(m *Mux) { m.logger = l } }

// WithDirectLimit bounds the direct connections dialed to one peer
// (default DefaultDirectLimit; 0 or less: none, every stream on the
// session).
func WithDirectLimit(n int) MuxOption { return func(m *Mux) { m.directLimit = n } }

// DefaultDirectLimit is the direct connections a node dials to one peer
// at most: enough for the append streams of the partitions it leads with
// replicas there on most nodes (each holds one per follower while it
// leads, more while several requests are in flight outside the
// pipeline), few enough that a node's connections stay bounded whatever
// the number of partitions.
const DefaultDirectLimit = 128

// noDirectRetry is how long a peer that refused a direct connection (a
// node that predates them) is sent every stream on the session before
// one is tried again.
const noDirectRetry = time.Minute

// ErrMuxClosed is returned once the mux is closed.
var ErrMuxClosed = errors.New("replication: transport closed")

const (
	handshakeTimeout = 5 * time.Second
	maxGroupName     = 1024
	// peekTimeout bounds the wait for a new connection's first bytes:
	// two of yamux's keep-alive intervals and a handshake's.
	peekTimeout = 2*5*time.Second + handshakeTimeout
)

// NewMux serves Raft traffic on ln. advertise is the address peers dial
// ("" for ln's address).
func NewMux(ln net.Listener, advertise string, opts ...MuxOption) *Mux {
	if advertise == "" {
		advertise = ln.Addr().String()
	}
	m := &Mux{
		ln: ln, addr: raft.ServerAddress(advertise), logger: hclog.NewNullLogger(),
		dial: func(addr string, timeout time.Duration) (net.Conn, error) {
			return net.DialTimeout("tcp", addr, timeout)
		},
		sessions: map[raft.ServerAddress]*dialedSession{},
		dialing:  map[raft.ServerAddress]*dialCall{},
		groups:   map[string]*groupLayer{},
		conns:    map[net.Conn]struct{}{},

		directLimit:  DefaultDirectLimit,
		closeTimeout: streamCloseTimeout,
		stalls:       newStallClock(stallPeriod),
		direct:       map[raft.ServerAddress]int{},
		noDirect:     map[raft.ServerAddress]time.Time{},
		stop:         make(chan struct{}),
	}
	for _, o := range opts {
		o(m)
	}
	m.logs = newLogBudget(m.logger, m.stop)
	m.votes, _ = newVotes(m) // a new mux registers its first stream name
	m.wg.Add(2)
	go m.acceptLoop()
	go func() {
		defer m.wg.Done()
		m.stalls.run(m.stop)
	}()
	return m
}

// Addr is the address peers reach this node's Raft traffic at.
func (m *Mux) Addr() raft.ServerAddress { return m.addr }

// streamCloseTimeout is a closed stream's wait for its peer's close
// before it is reset, which fails the peer's writes: a peer still writing
// into a stream nobody reads (a closed replica's) would otherwise block
// on the window until its own deadline.
const streamCloseTimeout = 5 * time.Second

func yamuxConfig(l hclog.Logger, closeTimeout time.Duration) *yamux.Config {
	c := yamux.DefaultConfig()
	c.LogOutput = nil
	c.Logger = l.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	// Mux.keepAlive pings instead, excusing this node's own stalls.
	c.EnableKeepAlive = false
	c.ConnectionWriteTimeout = pingTimeout
	// Streams opened by a peer wait here until the accept loop takes
	// them, or are reset: a node's thousands of groups may open that
	// many at once (elections after a takeover) while it is starved.
	c.AcceptBacklog = 4096
	c.MaxStreamWindowSize = 1 << 20
	c.StreamCloseTimeout = closeTimeout
	return c
}

func (m *Mux) acceptLoop() {
	defer m.wg.Done()
	var backoff acceptretry.Backoff
	for {
		c, err := m.ln.Accept()
		if err != nil {
			m.mu.Lock()
			closed := m.closed
			m.mu.Unlock()
			if closed {
				return
			}
			if backoff.Retry(err, m.stop) {
				m.logger.Warn("raft accept failed; retried", "error", err, "after", backoff.Delay())
				continue
			}
			m.logger.Error("raft accept failed; no more peers are accepted", "error", err)
			return
		}
		backoff.Reset()
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			c.Close()
			return
		}
		m.conns[c] = struct{}{}
		m.mu.Unlock()
		m.wg.Add(1)
		go m.serveConn(c)
	}
}

func (m *Mux) serveConn(c net.Conn) {
	defer m.wg.Done()
	forget := func() {
		m.mu.Lock()
		delete(m.conns, c)
		m.mu.Unlock()
	}
	// A session's first frame, or a direct connection's magic. A session
	// opens a stream at once (Dial) and pings every 5 s, so a connection
	// silent for longer is dead or not a peer's.
	c.SetReadDeadline(time.Now().Add(peekTimeout))
	br := bufio.NewReader(c)
	var magic [4]byte
	if _, err := io.ReadFull(br, magic[:]); err != nil {
		c.Close()
		forget()
		return
	}
	if magic == directMagic {
		c.SetReadDeadline(time.Now().Add(handshakeTimeout))
		var flags [8]byte
		if _, err := io.ReadFull(br, flags[:]); err != nil || flags != [8]byte{} {
			c.Close()
			forget()
			return
		}
		// Not under m.wg, as a session's streams: a group that neither
		// accepts nor closes must not hold up the mux's Close.
		go m.route(c, br, forget)
		return
	}
	c.SetReadDeadline(time.Time{})
	defer func() {
		c.Close()
		forget()
	}()
	ss := new(streamSet)
	s, err := yamux.Server(endingConn{Conn: &peekedConn{Conn: c, peeked: magic[:], br: br}, ss: ss}, yamuxConfig(m.logger, m.closeTimeout))
	if err != nil {
		return
	}
	defer closeSession(s, ss)
	m.watchSession(s, ss)
	for {
		st, err := s.AcceptStream()
		if err != nil {
			return
		}
		go m.routeStream(st, ss)
	}
}

// keepAliveInterval is how often a session's peer is pinged; pingTimeout
// is how long a pong, or a frame's turn to be sent, is waited for
// (yamux's ConnectionWriteTimeout).
const (
	keepAliveInterval = 5 * time.Second
	pingTimeout       = 10 * time.Second
)

// keepAlive pings s's peer every keepAliveInterval until s ends, and
// closes s, every stream on it with it, when two pings in a row go
// unanswered while this node ran. yamux's own keepalive closes a session
// at the first late pong, which on a starved node (its reader not
// scheduled) or behind a long send queue (a pong waits its turn behind
// thousands of groups' frames) cut live peers off and set off elections
// of every group between them.
func (m *Mux) keepAlive(s *yamux.Session, ss *streamSet) {
	t := time.NewTicker(keepAliveInterval)
	defer t.Stop()
	missed := 0
	for {
		select {
		case <-s.CloseChan():
			return
		case <-t.C:
		}
		at := time.Now().UnixNano()
		from := m.stalls.stalled(at)
		_, err := s.Ping()
		switch {
		case err == nil:
			missed = 0
		case errors.Is(err, yamux.ErrTimeout):
			if m.stalls.ran(at, from, time.Now().UnixNano()) < pingTimeout/2 {
				continue // this node stalled for most of the wait
			}
			if missed++; missed >= 2 {
				m.logger.Warn("peer answered no keepalive ping twice: closing its session", "peer", s.RemoteAddr())
				closeSession(s, ss)
				return
			}
		default:
			return // the session ended
		}
	}
}

// streamSet is the open streams of one yamux session. yamux v0.1.2's
// Stream.Read and Write spin, without yielding, while the session is shut
// down and the stream not yet closed; Session.Close closes its streams
// one by one under their locks, which thousands of spinning readers (a
// node's append streams from a peer that died) then contend for: two
// nodes of 10,000 partitions spun at full CPU for minutes after the third
// was killed. end gives every stream a deadline in the past, which wakes
// its reader with a timeout. It runs before the session shuts down: on
// the first error of the session's connection (endingConn), which is
// what shuts a session down when its peer dies, and before this node
// closes a session (closeSession); then no reader is left to spin. Run
// only once the session had shut down (the watcher, for what else closes
// it), it came too late: its goroutine waited its turn behind the
// spinning readers, each spinning its full time slice, tens of seconds.
// A deadline set on a stream after its set ended (a request's timeout,
// the end of a handshake's) is put in the past too (trackedStream): a
// read under it spun until it passed, and two such readers are enough
// to take both cores of a node.
type streamSet struct {
	mu sync.Mutex
	m  map[*yamux.Stream]struct{}
	// ended is set, under mu, before end walks the streams; read without
	// mu by setDeadline, which every request of every group on the
	// session runs (a lock of the session's there would be one every
	// group waits on).
	ended atomic.Bool
}

// watchSession keeps session s alive (keepAlive) and ends its stream set
// ss the moment s is shut down, if nothing did before.
func (m *Mux) watchSession(s *yamux.Session, ss *streamSet) {
	go func() {
		<-s.CloseChan()
		ss.end()
	}()
	go m.keepAlive(s, ss)
}

// closeSession closes s, whose stream set is ss, its streams ended first.
func closeSession(s *yamux.Session, ss *streamSet) error {
	ss.end()
	return s.Close()
}

// endingConn is a session's connection: its first failed read or write
// ends the session's streams before yamux learns of it and shuts the
// session down.
type endingConn struct {
	net.Conn
	ss *streamSet
}

func (c endingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.ss.end()
	}
	return n, err
}

func (c endingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		c.ss.end()
	}
	return n, err
}

// add records st; false when the session already ended.
func (ss *streamSet) add(st *yamux.Stream) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended.Load() {
		return false
	}
	if ss.m == nil {
		ss.m = map[*yamux.Stream]struct{}{}
	}
	ss.m[st] = struct{}{}
	return true
}

func (ss *streamSet) remove(st *yamux.Stream) {
	ss.mu.Lock()
	delete(ss.m, st)
	ss.mu.Unlock()
}

// pastDeadline is the deadline of an ended set's streams.
var pastDeadline = time.Unix(1, 0)

// end makes every stream's reads and writes fail at once: its session
// ended.
func (ss *streamSet) end() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended.Load() {
		return
	}
	ss.ended.Store(true)
	for st := range ss.m {
		st.SetDeadline(pastDeadline)
	}
	ss.m = nil
}

// setDeadline sets one of st's deadlines (set) to t, or to the past once
// the set ended: a deadline set after the end, as each request's
// timeout is, would otherwise let a read spin until it passed. Without
// a lock: set first, then look at ended; end stores ended before it
// puts every stream's deadlines in the past, so either end's deadline
// comes after this one or this call sees ended and puts it back.
func (ss *streamSet) setDeadline(set func(time.Time) error, t time.Time) error {
	if ss.ended.Load() {
		return set(pastDeadline)
	}
	err := set(t)
	if ss.ended.Load() {
		return set(pastDeadline)
	}
	return err
}

// trackedStream is a stream of a session (dialed or accepted): Close
// forgets it in the session's streamSet, and its deadlines stay in the
// past once the set ended.
type trackedStream struct {
	*yamux.Stream
	ss *streamSet
}

func (t trackedStream) Close() error {
	t.ss.remove(t.Stream)
	return t.Stream.Close()
}

func (t trackedStream) SetDeadline(d time.Time) error {
	return t.ss.setDeadline(t.Stream.SetDeadline, d)
}

func (t trackedStream) SetReadDeadline(d time.Time) error {
	return t.ss.setDeadline(t.Stream.SetReadDeadline, d)
}

func (t trackedStream) SetWriteDeadline(d time.Time) error {
	return t.ss.setDeadline(t.Stream.SetWriteDeadline, d)
}

// peekedConn is a connection whose first bytes were read to tell a
// session from a direct connection: its reads return them, then what br
// read ahead, then read the connection itself.
type peekedConn struct {
	net.Conn
	peeked []byte
	br     *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) {
	if len(c.peeked) > 0 {
		n := copy(p, c.peeked)
		c.peeked = c.peeked[n:]
		return n, nil
	}
	if c.br != nil {
		if c.br.Buffered() > 0 {
			return c.br.Read(p)
		}
		c.br = nil
	}
	return c.Conn.Read(p)
}

// routeStream reads a session stream's magic and routes it.
func (m *Mux) routeStream(st *yamux.Stream, ss *streamSet) {
	if !ss.add(st) {
		st.Close()
		return
	}
	c := trackedStream{Stream: st, ss: ss}
	c.SetReadDeadline(time.Now().Add(handshakeTimeout))
	br := bufio.NewReader(c)
	var magic [4]byte
	if _, err := io.ReadFull(br, magic[:]); err != nil || magic != muxMagic {
		c.Close()
		return
	}
	m.route(c, br, nil)
}

// route reads the rest of the handshake of c (a session stream or a direct
// connection, its magic read from br) and hands it to its group. onClose,
// if not nil, is called once when c is closed.
func (m *Mux) route(c net.Conn, br *bufio.Reader, onClose func()) {
	fail := func() {
		c.Close()
		if onClose != nil {
			onClose()
		}
	}
	c.SetReadDeadline(time.Now().Add(handshakeTimeout))
	n, err := binary.ReadUvarint(br)
	if err != nil || n > maxGroupName {
		fail()
		return
	}
	name := make([]byte, n)
	if _, err := io.ReadFull(br, name); err != nil {
		fail()
		return
	}
	c.SetReadDeadline(time.Time{})
	m.mu.Lock()
	g := m.groups[string(name)]
	m.mu.Unlock()
	c.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	if g == nil {
		c.Write([]byte{0}) // not (yet) hosted here: the peer retries
		fail()
		return
	}
	if _, err := c.Write([]byte{1}); err != nil {
		fail()
		return
	}
	c.SetWriteDeadline(time.Time{})
	conn := &bufferedConn{Conn: c, r: br, g: g, onClose: onClose}
	if !g.track(conn) {
		conn.Close()
		return
	}
	select {
	case g.accept <- conn:
	case <-g.served:
		g.handler(conn)
	case <-g.closed:
		conn.Close()
	}
}

// bufferedConn is an accepted stream of a group.
type bufferedConn struct {
	net.Conn
	r       *bufio.Reader
	g       *groupLayer
	onClose func()
	once    sync.Once
}

// Read reads what the handshake's reader read ahead, then the stream
// itself: the reader goes once it is drained (a node holds thousands of
// streams, most idle).
func (c *bufferedConn) Read(p []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(p)
		}
		c.r = nil
	}
	return c.Conn.Read(p)
}

// sessionStream reports whether c is a stream accepted on a session
// (not a direct connection).
func sessionStream(c net.Conn) bool {
	bc, ok := c.(*bufferedConn)
	if !ok {
		return false
	}
	_, ok = bc.Conn.(trackedStream)
	return ok
}

func (c *bufferedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.g.untrack(c)
		if c.onClose != nil {
			c.onClose()
		}
	})
	return err
}

// session returns the session to addr, dialing it once for all callers.
func (m *Mux) session(addr raft.ServerAddress, timeout time.Duration) (*dialedSession, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrMuxClosed
	}
	if s := m.sessions[addr]; s != nil && !s.IsClosed() {
		m.mu.Unlock()
		return s, nil
	}
	if call := m.dialing[addr]; call != nil {
		m.mu.Unlock()
		<-call.done
		return call.s, call.err
	}
	call := &dialCall{done: make(chan struct{})}
	m.dialing[addr] = call
	m.mu.Unlock()

	c, err := m.dial(string(addr), timeout)
	if err == nil {
		var s *yamux.Session
		ss := new(streamSet)
		if s, err = yamux.Client(endingConn{Conn: c, ss: ss}, yamuxConfig(m.logger, m.closeTimeout)); err != nil {
			c.Close()
		} else {
			m.watchSession(s, ss)
			call.s = &dialedSession{Session: s, streams: ss}
		}
	}
	call.err = err
	m.mu.Lock()
	delete(m.dialing, addr)
	if err == nil {
		if m.closed {
			call.s.Close()
			call.s, call.err = nil, ErrMuxClosed
		} else {
			m.sessions[addr] = call.s
		}
	}
	m.mu.Unlock()
	close(call.done)
	return call.s, call.err
}

// Dial opens a stream to group on the node at addr, on the session.
func (m *Mux) Dial(group string, addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	s, err := m.session(addr, timeout)
	if err != nil {
		return nil, err
	}
	st, err := s.OpenStream()
	if err != nil {
		s.Close()
		return nil, err
	}
	if !s.streams.add(st) {
		st.Close()
		return nil, yamux.ErrSessionShutdown
	}
	c := trackedStream{Stream: st, ss: s.streams}
	if err := handshake(c, muxMagic, group, addr); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// handshake names group to the acceptor of c and reads its answer.
func handshake(c net.Conn, magic [4]byte, group string, addr raft.ServerAddress) error {
	hs := append([]byte(nil), magic[:]...)
	if magic == directMagic {
		hs = append(hs, make([]byte, 8)...) // flags
	}
	hs = binary.AppendUvarint(hs, uint64(len(group)))
	hs = append(hs, group...)
	c.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	if _, err := c.Write(hs); err != nil {
		return err
	}
	c.SetWriteDeadline(time.Time{})
	var ok [1]byte
	c.SetReadDeadline(time.Now().Add(handshakeTimeout))
	if _, err := io.ReadFull(c, ok[:]); err != nil {
		return err
	}
	if ok[0] != 1 {
		return fmt.Errorf("%w: group %q at %s", ErrGroupNotHosted, group, addr)
	}
	c.SetReadDeadline(time.Time{})
	return nil
}

// errDirectRefused is dialDirect's error when the peer closed the
// connection without answering the handshake.
var errDirectRefused = errors.New("replication: direct connection closed unanswered")

// dialDirect opens a direct connection to group on the node at addr, or
// returns nil and no error when the stream should go on the session
// instead: this node holds its bound of them to the peer, or the peer
// refused one a short while ago. A control link's (unbounded) is
// neither bound nor counted.
func (m *Mux) dialDirect(group string, addr raft.ServerAddress, timeout time.Duration, unbounded bool) (net.Conn, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrMuxClosed
	}
	if (!unbounded && m.direct[addr] >= m.directLimit) || time.Now().Before(m.noDirect[addr]) {
		m.mu.Unlock()
		return nil, nil
	}
	if !unbounded {
		m.direct[addr]++
	}
	m.mu.Unlock()
	release := func() {
		if unbounded {
			return
		}
		m.mu.Lock()
		if m.direct[addr]--; m.direct[addr] <= 0 {
			delete(m.direct, addr)
		}
		m.mu.Unlock()
	}
	c, err := m.dial(string(addr), timeout)
	if err != nil {
		release()
		return nil, err
	}
	dc := &directConn{Conn: c}
	dc.onClose = func() {
		m.mu.Lock()
		delete(m.conns, dc)
		m.mu.Unlock()
		release()
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		dc.Close()
		return nil, ErrMuxClosed
	}
	m.conns[dc] = struct{}{}
	m.mu.Unlock()
	if err := handshake(dc, directMagic, group, addr); err != nil {
		dc.Close()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			return nil, fmt.Errorf("%w: %s: %v", errDirectRefused, addr, err)
		}
		return nil, err
	}
	return dc, nil
}

// dialFallback sends on the session a stream whose direct connection
// the peer closed unanswered. If the session takes it, the peer is up and
// predates direct connections (it read the magic as a session's bad
// frame), and its streams go on the session for a while; if not, the
// peer was going down (a node closing its connections at shutdown also
// closes them unanswered), and nothing is concluded.
func (m *Mux) dialFallback(group string, addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	st, err := m.Dial(group, addr, timeout)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.noDirect[addr] = time.Now().Add(noDirectRetry)
	m.mu.Unlock()
	m.logger.Info("peer takes no direct connections: its streams go on the session", "peer", addr, "for", noDirectRetry)
	return st, nil
}

// directConn is a dialed direct connection.
type directConn struct {
	net.Conn
	once    sync.Once
	onClose func()
}

// writeBuffers writes v with writev when the connection is TCP.
func (c *directConn) writeBuffers(v *net.Buffers) (int64, error) { return v.WriteTo(c.Conn) }

func (c *directConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.onClose != nil {
			c.onClose()
		}
	})
	return err
}

// ErrGroupNotHosted is Dial's error when the peer hosts no replica of the
// group (not yet, or no longer).
var ErrGroupNotHosted = errors.New("replication: group not hosted by the peer")

// Layer registers group and returns its raft.StreamLayer.
func (m *Mux) Layer(group string) (raft.StreamLayer, error) { return m.layer(group, false, false) }

// DirectConnections is the number of direct connections this node has
// dialed and holds open, to all peers.
func (m *Mux) DirectConnections() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, c := range m.direct {
		n += c
	}
	return n
}

// DirectLayer is Layer for a group whose streams are dialed as direct
// connections while the peer's bound allows (see Mux). It accepts streams
// that come either way.
func (m *Mux) DirectLayer(group string) (raft.StreamLayer, error) { return m.layer(group, true, false) }

// ControlLayer is DirectLayer for a node's own control links, one or two
// per peer (quiescence's liveness): their direct connections are dialed
// whatever the bound (WithDirectLimit), so that a link that tells a
// peer's liveness never waits behind the session's bulk traffic, nor
// ends with a session closed for it.
func (m *Mux) ControlLayer(group string) (raft.StreamLayer, error) { return m.layer(group, true, true) }

func (m *Mux) layer(group string, direct, control bool) (*groupLayer, error) {
	if len(group) > maxGroupName {
		return nil, fmt.Errorf("replication: group name of %d bytes", len(group))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrMuxClosed
	}
	if m.groups[group] != nil {
		return nil, fmt.Errorf("replication: group %q already registered", group)
	}
	g := &groupLayer{mux: m, name: group, direct: direct, control: control, accept: make(chan net.Conn), served: make(chan struct{}), closed: make(chan struct{})}
	m.groups[group] = g
	return g, nil
}

// Close stops the listener and every session.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.stop)
	votes := m.votes
	sessions := m.sessions
	m.sessions = map[raft.ServerAddress]*dialedSession{}
	conns := make([]net.Conn, 0, len(m.conns))
	for c := range m.conns {
		conns = append(conns, c)
	}
	m.mu.Unlock()
	err := m.ln.Close()
	for _, s := range sessions {
		s.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	if votes != nil {
		votes.close()
	}
	m.wg.Wait()
	return err
}

// groupLayer is one group's raft.StreamLayer on the mux.
type groupLayer struct {
	mux     *Mux
	name    string
	direct  bool // dial direct connections (DirectLayer)
	control bool // whatever the bound (ControlLayer)
	accept  chan net.Conn
	once    sync.Once
	closed  chan struct{}
	// handler, set by Serve before it closes served, is given each
	// accepted stream in the goroutine that routed it, instead of Accept.
	handler func(net.Conn)
	served  chan struct{}

	// The streams accepted for the group and not closed yet: closing the
	// group aborts them, so a peer holding one in its connection pool
	// (raft.NetworkTransport pools them per address, not per replica)
	// fails at once on it instead of writing into a stream nobody reads,
	// which for an InstallSnapshot blocks on the stream's window until
	// raft's size-scaled deadline, minutes.
	mu    sync.Mutex
	conns map[*bufferedConn]struct{}
	done  bool
}

func (g *groupLayer) track(c *bufferedConn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return false
	}
	if g.conns == nil {
		g.conns = map[*bufferedConn]struct{}{}
	}
	g.conns[c] = struct{}{}
	return true
}

func (g *groupLayer) untrack(c *bufferedConn) {
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
}

// Serve hands every stream accepted from now on to fn, in a goroutine of
// its own, instead of to Accept: a group served so needs no goroutine
// waiting in Accept, and a node holds thousands of groups. Called once.
func (g *groupLayer) Serve(fn func(net.Conn)) {
	g.handler = fn
	close(g.served)
}

func (g *groupLayer) Accept() (net.Conn, error) {
	select {
	case c := <-g.accept:
		return c, nil
	case <-g.closed:
		return nil, ErrMuxClosed
	}
}

// Close unregisters the group and aborts the streams it accepted.
func (g *groupLayer) Close() error {
	g.once.Do(func() {
		close(g.closed)
		g.mux.mu.Lock()
		if g.mux.groups[g.name] == g {
			delete(g.mux.groups, g.name)
		}
		g.mux.mu.Unlock()
		g.mu.Lock()
		g.done = true
		conns := g.conns
		g.conns = nil
		g.mu.Unlock()
		for c := range conns {
			abort(c)
		}
	})
	return nil
}

func (g *groupLayer) Addr() net.Addr { return muxAddr(g.mux.addr) }

func (g *groupLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if g.direct {
		c, err := g.mux.dialDirect(g.name, addr, timeout, g.control)
		switch {
		case errors.Is(err, errDirectRefused):
			return g.mux.dialFallback(g.name, addr, timeout)
		case c != nil || err != nil:
			return c, err
		}
	}
	return g.mux.Dial(g.name, addr, timeout)
}

type muxAddr string

func (a muxAddr) Network() string { return "tcp" }
func (a muxAddr) String() string  { return string(a) }
