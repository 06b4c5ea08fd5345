package rpc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

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
