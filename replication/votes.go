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
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// Votes on streams of the node's own.
//
// raft.NetworkTransport dials a connection for each RPC it does not pool,
// and gives each a 256 KiB buffer on either side: a vote costs half a
// megabyte allocated and cleared on each node. A group keeps no pooled
// connections of that transport (see Replica.openTransport), so on a
// node of thousands of groups an election storm allocated gigabytes a
// second for its pre-votes, which starved the heartbeats, which made
// more elections. Here the votes, pre-votes and TimeoutNow of every group
// between two nodes travel on a few streams per peer named voteStream,
// each request a frame of its own naming its group, answered on the same
// stream; idle streams are kept for the next. At most voteStreams
// requests to a peer are in flight, so at most that many streams are
// open to it: a request that finds none free within voteWait is refused
// at once (the candidate counts the peer's vote as refused and campaigns
// again later) rather than queued. A storm of thousands of campaigns
// opening a stream each had them wait on yamux's bound of streams being
// opened until long after their candidates had given up; voteWait is the
// shortest election timeout, past which a candidate gives up anyway. A
// peer that does not host voteStream (a node that predates it) is sent
// them through the NetworkTransport, which also serves those it
// sends here.
//
// Frames (frozen), both ways: a 4-byte big-endian length (≤
// maxVoteFrame), then
//
//	request:  1 byte kind (voteKind*), uvarint group length, group,
//	          the request, msgpack-encoded as raft.NetworkTransport does
//	response: 1 byte status: 0 and the response, msgpack-encoded, 1
//	          and the error the group answered with, as text, or 2 and
//	          the same when the group is not hosted there (a replica not
//	          yet created or already removed: ErrGroupNotHosted, which Raft
//	          retries and its log shows at debug)
const voteStream = "/vote"

const (
	voteKindVote byte = iota + 1
	voteKindPreVote
	voteKindTimeoutNow
)

const (
	maxVoteFrame = 64 << 10
	voteStreams  = 128
	voteWait     = time.Second
	voteBuffer   = 1 << 10
)

// votes is a node's vote streams: the groups they serve and the idle
// streams to each peer.
type votes struct {
	mux   *Mux
	layer raft.StreamLayer

	mu     sync.Mutex
	groups map[string]*appendTransport
	idle   idlePool[*voteConn]
	slots  map[raft.ServerAddress]chan struct{} // requests in flight to each peer
	wg     sync.WaitGroup

	served atomic.Uint64 // requests answered
}

type voteConn struct {
	conn net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
}

func newVotes(m *Mux) (*votes, error) {
	layer, err := m.Layer(voteStream)
	if err != nil {
		return nil, err
	}
	v := &votes{mux: m, layer: layer, groups: map[string]*appendTransport{},
		slots: map[raft.ServerAddress]chan struct{}{}}
	v.wg.Add(1)
	go v.accept()
	return v, nil
}

// register makes the votes for group reach t.
func (v *votes) register(group string, t *appendTransport) {
	v.mu.Lock()
	v.groups[group] = t
	v.mu.Unlock()
}

func (v *votes) unregister(group string, t *appendTransport) {
	v.mu.Lock()
	if v.groups[group] == t {
		delete(v.groups, group)
	}
	v.mu.Unlock()
}

func (v *votes) close() {
	v.layer.Close()
	for _, c := range v.idle.close() {
		c.conn.Close()
	}
	v.wg.Wait()
}

var msgpackHandle = &codec.MsgpackHandle{}

// encodeMsgpack encodes v as raft.NetworkTransport does.
func encodeMsgpack(v any) ([]byte, error) {
	var b []byte
	err := codec.NewEncoderBytes(&b, msgpackHandle).Encode(v)
	return b, err
}

// call sends group's request of kind to target and reads its response
// into resp, within timeout. errNoVoteStreams: target does not serve
// votes here; ErrGroupNotHosted (wrapped): it hosts no replica of group.
func (v *votes) call(target raft.ServerAddress, group string, kind byte, req, resp any, timeout time.Duration) error {
	frame := make([]byte, 4, 256)
	frame = append(frame, kind)
	frame = binary.AppendUvarint(frame, uint64(len(group)))
	frame = append(frame, group...)
	body, err := encodeMsgpack(req)
	if err != nil {
		return err
	}
	frame = append(frame, body...)
	if len(frame)-4 > maxVoteFrame {
		return fmt.Errorf("replication: vote request of %d bytes", len(frame)-4)
	}
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	release, err := v.slot(target, min(timeout, voteWait))
	if err != nil {
		return err
	}
	defer release()
	c, err := v.get(target, timeout)
	if err != nil {
		return err
	}
	c.conn.SetDeadline(time.Now().Add(timeout))
	if _, err := c.w.Write(frame); err != nil {
		c.conn.Close()
		return err
	}
	if err := c.w.Flush(); err != nil {
		c.conn.Close()
		return err
	}
	payload, err := readVoteFrame(c.r)
	if err != nil {
		c.conn.Close()
		return err
	}
	c.conn.SetDeadline(time.Time{})
	v.put(target, c)
	if len(payload) == 0 {
		return errors.New("replication: empty vote response")
	}
	switch payload[0] {
	case 0:
	case 2:
		return fmt.Errorf("%w: group %q at %s", ErrGroupNotHosted, group, target)
	default:
		return rpcError(payload[1:])
	}
	return codec.NewDecoderBytes(payload[1:], msgpackHandle).Decode(resp)
}

// errVoteNotHosted answers a request for a group this node hosts no
// replica of.
var errVoteNotHosted = errors.New("replication: group not hosted here")

// errNoVoteStreams is call's error for a peer that serves no vote
// streams (a node that predates them): its votes go another way.
var errNoVoteStreams = errors.New("replication: the peer serves no vote streams")

// errVotesBusy refuses a request that found every stream to its peer
// busy for voteWait.
var errVotesBusy = errors.New("replication: every vote stream to the peer is busy")

// slot takes one of the voteStreams slots of target, waiting at most
// wait, and returns its release.
func (v *votes) slot(target raft.ServerAddress, wait time.Duration) (func(), error) {
	v.mu.Lock()
	s := v.slots[target]
	if s == nil {
		s = make(chan struct{}, voteStreams)
		v.slots[target] = s
	}
	v.mu.Unlock()
	select {
	case s <- struct{}{}:
	default:
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case s <- struct{}{}:
		case <-t.C:
			return nil, errVotesBusy
		}
	}
	return func() { <-s }, nil
}

func (v *votes) get(target raft.ServerAddress, timeout time.Duration) (*voteConn, error) {
	if c, err := v.idle.take(target); c != nil || err != nil {
		return c, err
	}
	conn, err := v.mux.Dial(voteStream, target, timeout)
	if errors.Is(err, ErrGroupNotHosted) {
		return nil, errNoVoteStreams
	}
	if err != nil {
		return nil, err
	}
	return &voteConn{conn: conn, r: bufio.NewReaderSize(conn, voteBuffer), w: bufio.NewWriterSize(conn, voteBuffer)}, nil
}

func (v *votes) put(target raft.ServerAddress, c *voteConn) {
	if !v.idle.keep(target, c, voteStreams) {
		c.conn.Close()
	}
}

func readVoteFrame(r *bufio.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxVoteFrame {
		return nil, fmt.Errorf("replication: vote frame of %d bytes", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

func (v *votes) accept() {
	defer v.wg.Done()
	for {
		c, err := v.layer.Accept()
		if err != nil {
			return
		}
		v.wg.Add(1)
		go v.serve(c)
	}
}

// serve answers the requests of one stream in turn until it ends.
func (v *votes) serve(c net.Conn) {
	defer v.wg.Done()
	defer c.Close()
	r, w := bufio.NewReaderSize(c, voteBuffer), bufio.NewWriterSize(c, voteBuffer)
	for {
		payload, err := readVoteFrame(r)
		if err != nil {
			return
		}
		resp, err := v.answer(payload)
		v.served.Add(1)
		out := make([]byte, 4, 128)
		if err != nil {
			status := byte(1)
			if errors.Is(err, errVoteNotHosted) {
				status = 2
			}
			out = append(out, status)
			out = append(out, err.Error()...)
		} else {
			body, err := encodeMsgpack(resp)
			if err != nil {
				return
			}
			out = append(append(out, 0), body...)
		}
		if len(out)-4 > maxVoteFrame {
			return
		}
		binary.BigEndian.PutUint32(out, uint32(len(out)-4))
		c.SetWriteDeadline(time.Now().Add(handshakeTimeout))
		if _, err := w.Write(out); err != nil {
			return
		}
		if err := w.Flush(); err != nil {
			return
		}
		c.SetWriteDeadline(time.Time{})
	}
}

// answer passes one request to its group's Raft and returns the answer.
func (v *votes) answer(payload []byte) (any, error) {
	if len(payload) == 0 {
		return nil, errors.New("replication: empty vote request")
	}
	kind, rest := payload[0], payload[1:]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)-k) || n > maxGroupName {
		return nil, errors.New("replication: bad group name in a vote request")
	}
	group, body := string(rest[k:k+int(n)]), rest[k+int(n):]
	var cmd any
	switch kind {
	case voteKindVote:
		cmd = new(raft.RequestVoteRequest)
	case voteKindPreVote:
		cmd = new(raft.RequestPreVoteRequest)
	case voteKindTimeoutNow:
		cmd = new(raft.TimeoutNowRequest)
	default:
		return nil, fmt.Errorf("replication: vote request of kind %d", kind)
	}
	if err := codec.NewDecoderBytes(body, msgpackHandle).Decode(cmd); err != nil {
		return nil, err
	}
	v.mu.Lock()
	t := v.groups[group]
	v.mu.Unlock()
	if t == nil {
		return nil, fmt.Errorf("%w: %q", errVoteNotHosted, group)
	}
	respCh := make(chan raft.RPCResponse, 1) // of its own: Raft may answer after a shutdown
	timer := time.NewTimer(handshakeTimeout)
	defer timer.Stop()
	select {
	case t.consumeCh <- raft.RPC{Command: cmd, RespChan: respCh}:
	case <-t.shutdown:
		return nil, raft.ErrTransportShutdown
	case <-timer.C:
		return nil, fmt.Errorf("replication: group %q did not take a vote request in %v", group, handshakeTimeout)
	}
	select {
	case resp := <-respCh:
		return resp.Response, resp.Error
	case <-t.shutdown:
		return nil, raft.ErrTransportShutdown
	}
}
