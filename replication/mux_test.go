package replication

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/yamux"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/log/vfs"
)

// TestMuxConnectionsDoNotGrowWithGroups: three nodes host 12 groups each;
// every group elects and commits through its append streams, and each
// node holds at most one session to each peer and, with direct
// connections, at most their bound of those, whatever the number of
// groups.
func TestMuxConnectionsDoNotGrowWithGroups(t *testing.T) {
	for _, limit := range []int{0, 2} {
		t.Run(fmt.Sprintf("direct=%d", limit), func(t *testing.T) { testMuxConnections(t, limit) })
	}
}

func testMuxConnections(t *testing.T, directLimit int) {
	const nodes, groups = 3, 12
	muxes := newTestMuxes(t, nodes, WithDirectLimit(directLimit))
	var all [][]*Replica
	for g := 0; g < groups; g++ {
		var reps []*Replica
		var servers []raft.Server
		for i, m := range muxes {
			r, err := Open(Config{Group: fmt.Sprintf("g-%d", g), NodeID: fmt.Sprintf("n%d", i), Dir: "/d", FS: vfs.NewMem(),
				IndexDir: t.TempDir(), Mux: m, Raft: testTimings(), Log: log.Config{SegmentIndexBytes: 4096}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Kill() })
			reps = append(reps, r)
			servers = append(servers, raft.Server{ID: r.ServerID(), Address: r.Address(), Suffrage: raft.Voter})
		}
		if err := reps[0].Bootstrap(servers); err != nil {
			t.Fatal(err)
		}
		all = append(all, reps)
	}
	// Each group commits a batch through whichever replica leads it (on a
	// loaded machine leadership can move between finding and appending).
	for g, reps := range all {
		waitFor(t, fmt.Sprintf("group %d to commit", g), 30*time.Second, func() bool {
			for _, r := range reps {
				if r.IsLeader() {
					if _, err := r.Append(shortCtx(t), testBatch(1, 10), AcksAll); err == nil {
						return true
					}
				}
			}
			return false
		})
	}
	// The appends came on the groups' append streams, not through msgpack:
	// every follower serves one, once its leader has reached it (a loaded
	// machine can be slow to, and leadership can move meanwhile).
	for g, reps := range all {
		waitFor(t, fmt.Sprintf("group %d: every follower to serve an append stream", g), 30*time.Second, func() bool {
			for _, r := range reps {
				if r.IsLeader() {
					continue
				}
				at := r.guard.Transport.(*appendTransport)
				at.mu.Lock()
				n := len(at.accepted)
				at.mu.Unlock()
				if n == 0 {
					return false
				}
			}
			return true
		})
	}
	// m.conns holds the sessions accepted and the direct connections
	// accepted and dialed. An accepted connection whose dialer replaced it
	// is closed a moment after: the bound is waited for.
	peers, used := nodes-1, 0
	for i, m := range muxes {
		var sessions, conns int
		waitFor(t, fmt.Sprintf("node %d's connections within their bound", i), 10*time.Second, func() bool {
			m.mu.Lock()
			defer m.mu.Unlock()
			sessions, conns = len(m.sessions), len(m.conns)
			return sessions <= peers && conns <= peers+2*peers*directLimit
		})
		m.mu.Lock()
		for _, n := range m.direct {
			used += n
		}
		m.mu.Unlock()
	}
	if directLimit > 0 && used == 0 {
		t.Fatal("no direct connection in use")
	}
}

// TestMuxDialUnhostedGroup: a stream to a group the peer does not host
// fails at Dial, before anything is written into it (a large write into a
// stream nobody reads would block until the write deadline), and one to a
// hosted group carries bytes both ways.
func TestMuxDialUnhostedGroup(t *testing.T) {
	muxes := newTestMuxes(t, 2)
	if _, err := muxes[0].Dial("absent", muxes[1].Addr(), 5*time.Second); !errors.Is(err, ErrGroupNotHosted) {
		t.Fatalf("dial of a group not hosted: %v, want ErrGroupNotHosted", err)
	}

	layer, err := muxes[1].Layer("present")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		c, err := layer.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		buf := make([]byte, 5)
		if _, err := io.ReadFull(c, buf); err != nil {
			got <- nil
			return
		}
		c.Write([]byte("pong!"))
		got <- buf
	}()
	c, err := muxes[0].Dial("present", muxes[1].Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ping(t, c, "pong!")
	if b := <-got; string(b) != "ping!" {
		t.Fatalf("the acceptor read %q", b)
	}
}

// TestMuxGroupCloseAbortsStreams: a peer holds an open stream to a group
// (raft.NetworkTransport keeps them pooled per address); the group closes
// (its replica is dropped and opened again). The peer's read on the stream
// ends at once, and a large write into it (an InstallSnapshot) fails
// within the stream close timeout instead of blocking on the window until
// its own deadline.
func TestMuxGroupCloseAbortsStreams(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) { testGroupCloseAborts(t, direct) })
	}
}

func testGroupCloseAborts(t *testing.T, direct bool) {
	muxes := newTestMuxes(t, 2)
	layer, err := muxes[1].Layer("g")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := layer.Accept()
			if err != nil {
				return
			}
			accepted <- c // held, never read: a handler waiting for its next request
		}
	}()
	dial := func() (net.Conn, error) { return muxes[0].Dial("g", muxes[1].Addr(), 5*time.Second) }
	if direct {
		dl, err := muxes[0].DirectLayer("g")
		if err != nil {
			t.Fatal(err)
		}
		dial = func() (net.Conn, error) {
			c, err := dl.Dial(muxes[1].Addr(), 5*time.Second)
			if _, ok := c.(*directConn); err == nil && !ok {
				t.Fatalf("dialed a %T, want a direct connection", c)
			}
			return c, err
		}
	}
	reader, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	writer, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		// Append streams serve a session stream without holding a
		// buffer between requests, a direct connection with one.
		if c := <-accepted; sessionStream(c) == direct {
			t.Fatalf("sessionStream of an accepted %T (direct %v): %v", c.(*bufferedConn).Conn, direct, !direct)
		}
	}
	layer.Close()

	reader.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := reader.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read on a stream of a closed group: %v, want it ended at once", err)
	}
	writer.SetWriteDeadline(time.Now().Add(30 * time.Second))
	start := time.Now()
	_, err = writer.Write(make([]byte, 16<<20))
	if err == nil || isTimeout(err) {
		t.Fatalf("a 16 MiB write into a stream of a closed group: %v after %v, want it reset", err, time.Since(start))
	}
}

// TestMuxDirect: a direct layer dials connections of their own, up to
// the bound per peer, past it streams on the session, and direct again
// once one is closed; a group the peer does not host fails at Dial as on
// the session; bytes go both ways.
func TestMuxDirect(t *testing.T) {
	muxes := newTestMuxes(t, 2, WithDirectLimit(1))
	peer := muxes[1].Addr()
	dl, err := muxes[0].DirectLayer("g")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dl.Dial(peer, 5*time.Second); !errors.Is(err, ErrGroupNotHosted) {
		t.Fatalf("dial of a group not hosted: %v, want ErrGroupNotHosted", err)
	}
	if n := directCount(muxes[0], peer); n != 0 {
		t.Fatalf("%d direct connections counted after a refused one", n)
	}
	layer, err := muxes[1].Layer("g")
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(layer)
	first, err := dl.Dial(peer, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := first.(*directConn); !ok {
		t.Fatalf("first dial: a %T, want a direct connection", first)
	}
	pingEcho(t, first)
	second, err := dl.Dial(peer, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := second.(*directConn); ok {
		t.Fatal("second dial: a direct connection past the bound of 1")
	}
	pingEcho(t, second)
	second.Close()
	first.Close()
	if n := directCount(muxes[0], peer); n != 0 {
		t.Fatalf("%d direct connections counted after closing them", n)
	}
	third, err := dl.Dial(peer, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if _, ok := third.(*directConn); !ok {
		t.Fatalf("dial after closing the direct one: a %T, want a direct connection", third)
	}
	pingEcho(t, third)
}

// TestMuxDirectToOlderPeer: a peer that predates direct connections reads
// one as a session's bad first frame and closes it; the stream then goes
// on the session, and so do the next ones for a while, without a
// connection attempt each.
func TestMuxDirectToOlderPeer(t *testing.T) {
	var conns atomic.Int32
	peer := fakePeer(t, func(c net.Conn) { // the older mux: a session on every connection, streams as before
		conns.Add(1)
		s, err := yamux.Server(c, yamuxConfig(hclog.NewNullLogger(), streamCloseTimeout))
		if err != nil {
			c.Close()
			return
		}
		acceptEach(func() (net.Conn, error) { return s.AcceptStream() }, func(st net.Conn) {
			defer st.Close()
			br := bufio.NewReader(st)
			var magic [4]byte
			if _, err := io.ReadFull(br, magic[:]); err != nil || magic != muxMagic {
				return
			}
			n, _ := binary.ReadUvarint(br)
			io.ReadFull(br, make([]byte, n))
			st.Write([]byte{1})
			io.Copy(st, br) // echo
		})
	})
	m := newTestMuxes(t, 1)[0]
	dl, err := m.DirectLayer("g")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		c, err := dl.Dial(peer, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		if _, ok := c.(*directConn); ok {
			t.Fatalf("dial %d: a direct connection to a peer that takes none", i)
		}
		pingEcho(t, c)
		c.Close()
	}
	// The refused direct connection and the session.
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections to the older peer, want 2", n)
	}
	// Once the while has passed, a direct connection is tried again.
	m.mu.Lock()
	m.noDirect[peer] = time.Now().Add(-time.Second)
	m.mu.Unlock()
	c, err := dl.Dial(peer, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections to the older peer after the while, want 3", n)
	}
}

// TestMuxDirectToPeerGoingDown: a node going down closes connections
// unanswered too, and so does its session; the dial fails and the peer's
// streams are not sent on the session afterwards for that.
func TestMuxDirectToPeerGoingDown(t *testing.T) {
	peer := fakePeer(t, func(c net.Conn) { c.Close() })
	m := newTestMuxes(t, 1)[0]
	dl, err := m.DirectLayer("g")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := dl.Dial(peer, 5*time.Second); err == nil {
		c.Close()
		t.Fatal("dial to a peer closing every connection succeeded")
	}
	m.mu.Lock()
	marked := !m.noDirect[peer].IsZero()
	m.mu.Unlock()
	if marked {
		t.Fatal("a peer going down was taken for one that predates direct connections")
	}
}

// serveEcho accepts the group's streams until it closes and echoes what
// each carries.
func serveEcho(layer raft.StreamLayer) {
	acceptEach(layer.Accept, func(c net.Conn) {
		defer c.Close()
		io.Copy(c, c)
	})
}

// fakePeer listens on loopback until the test ends, serves each
// connection with serve, and returns its address.
func fakePeer(t *testing.T, serve func(net.Conn)) raft.ServerAddress {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	acceptEach(ln.Accept, serve)
	return raft.ServerAddress(ln.Addr().String())
}

// acceptEach serves each connection accept returns on a goroutine of its
// own, until accept fails.
func acceptEach(accept func() (net.Conn, error), serve func(net.Conn)) {
	go func() {
		for {
			c, err := accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
}

// pingEcho writes to c and checks the echo.
func pingEcho(t *testing.T, c net.Conn) { t.Helper(); ping(t, c, "ping!") }

// ping writes "ping!" to c and checks that want comes back.
func ping(t *testing.T, c net.Conn, want string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("ping!")); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, len(want))
	if _, err := io.ReadFull(c, reply); err != nil || string(reply) != want {
		t.Fatalf("reply %q, %v; want %q", reply, err, want)
	}
}

func directCount(m *Mux, addr raft.ServerAddress) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.direct[addr]
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// newTestMuxes starts n muxes on loopback, closed at the end of the test.
func newTestMuxes(t *testing.T, n int, opts ...MuxOption) []*Mux {
	t.Helper()
	muxes := make([]*Mux, n)
	for i := range muxes {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		m := NewMux(ln, "", opts...)
		t.Cleanup(func() { m.Close() })
		muxes[i] = m
	}
	return muxes
}

// failingListener fails its first Accepts as a process out of file
// descriptors does.
type failingListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestMuxAcceptRetriesTemporaryErrors: a listener failing Accept with a
// temporary error (out of file descriptors) is retried after a backoff;
// before, the mux stopped accepting peers for good.
func TestMuxAcceptRetriesTemporaryErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingListener{Listener: ln}
	fl.fails.Store(3)
	acceptor := NewMux(fl, "")
	t.Cleanup(func() { acceptor.Close() })
	layer, err := acceptor.Layer("g")
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(layer)
	dialer := newTestMuxes(t, 1)[0]
	c, err := dialer.Dial("g", acceptor.Addr(), 10*time.Second)
	if err != nil {
		t.Fatalf("dial after the listener's temporary errors: %v", err)
	}
	defer c.Close()
	pingEcho(t, c)
}

// TestMuxSessionStreamsEnd: a stream dialed on a session is recorded in
// the session's set until closed; the set ends when the session shuts
// down; and ending the set fails a read blocked on the stream at once,
// while the session still lives (yamux's own close of its streams comes
// after a shutdown during which their readers spin).
func TestMuxSessionStreamsEnd(t *testing.T) {
	muxes := newTestMuxes(t, 2)
	layer, err := muxes[1].Layer("g")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := layer.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never written
		}
	}()
	dial := func() trackedStream {
		t.Helper()
		c, err := muxes[0].Dial("g", muxes[1].Addr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ts, ok := c.(trackedStream)
		if !ok {
			t.Fatalf("dialed a %T, want a trackedStream", c)
		}
		return ts
	}
	held := func(ts trackedStream) (held, ended bool) {
		ts.ss.mu.Lock()
		defer ts.ss.mu.Unlock()
		_, held = ts.ss.m[ts.Stream]
		return held, ts.ss.ended.Load()
	}

	// Recorded while open, forgotten when closed.
	a, b := dial(), dial()
	b.Close()
	if h, _ := held(a); !h {
		t.Fatal("an open dialed stream is not in its session's set")
	}
	if h, _ := held(b); h {
		t.Fatal("a closed stream is still in its session's set")
	}
	// The set ends with its session.
	muxes[0].mu.Lock()
	s := muxes[0].sessions[muxes[1].Addr()]
	muxes[0].mu.Unlock()
	s.Close()
	waitFor(t, "the set of a closed session to end", 10*time.Second, func() bool {
		_, ended := held(a)
		return ended
	})
	a.Close()

	// Ending the set of a live session ends a read blocked on a stream.
	c := dial()
	readFails := func(what string, before func()) {
		t.Helper()
		read := make(chan error, 1)
		go func() {
			_, err := c.Read(make([]byte, 1))
			read <- err
		}()
		before()
		select {
		case err := <-read:
			if err == nil {
				t.Fatal("the read returned no error")
			}
		case <-time.After(10 * time.Second):
			t.Fatal(what)
		}
	}
	readFails("a read blocked on the stream did not end with its session's set", c.ss.end)
	// A deadline set once the set ended (a request's timeout) stays in
	// the past: a read would spin until it passed once the session shut
	// down.
	c.SetReadDeadline(time.Now().Add(time.Hour))
	readFails("a deadline set after the set ended held a read", func() {})
	c.Close()
}

// TestMuxStreamsEndBeforeTheSessionShutsDown: when a session's
// connection ends (its peer died), the session's stream set has ended by
// the time yamux shuts the session down: from that shutdown until yamux
// closes the stream itself, a reader of a stream not ended spins.
func TestMuxStreamsEndBeforeTheSessionShutsDown(t *testing.T) {
	var mu sync.Mutex
	var dialed []net.Conn
	muxes := newTestMuxes(t, 2, WithDialer(func(addr string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err == nil {
			mu.Lock()
			dialed = append(dialed, c)
			mu.Unlock()
		}
		return c, err
	}))
	layer, err := muxes[1].Layer("g")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := layer.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never written
		}
	}()
	for round := range 20 {
		c, err := muxes[0].Dial("g", muxes[1].Addr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ts := c.(trackedStream)
		muxes[0].mu.Lock()
		s := muxes[0].sessions[muxes[1].Addr()]
		muxes[0].mu.Unlock()
		// The connection ends, with no frame of yamux's.
		mu.Lock()
		for _, c := range dialed {
			c.Close()
		}
		dialed = nil
		mu.Unlock()
		select {
		case <-s.CloseChan():
		case <-time.After(10 * time.Second):
			t.Fatal("the session outlived its connection")
		}
		if !ts.ss.ended.Load() {
			t.Fatalf("round %d: the session shut down before its streams ended", round)
		}
		ts.Close()
	}
}
