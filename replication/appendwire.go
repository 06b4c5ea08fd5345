package replication

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The wire format of AppendEntries on a group's append streams
// (appendTransport). raft.NetworkTransport encodes every RPC with msgpack,
// which a follower pays for on every entry: the decoder allocates each
// entry's bytes in 256 KiB steps, copying what it read at each step, and
// a Kafka batch is up to 1 MiB. Here the entry bytes follow a fixed
// header and are read straight into one buffer of their exact size (on a
// follower's stream, into chunks it reuses: entryArena), and written from
// the leader's buffers without a copy. Frozen: peers of different
// versions exchange it.
//
// Request, leader → follower (integers big endian):
//
//	offset  size  field
//	     0     1  kind: 1 (AppendEntries)
//	     1     8  protocol version (int64)
//	     9     8  term
//	    17     8  previous log index
//	    25     8  previous log term
//	    33     8  leader commit index
//	    41     4  number of entries N (≤ maxWireEntries)
//	    45     -  ID, Addr, Leader: each a 2-byte length and the bytes
//	     -     -  N entries:
//	                8  index
//	                8  term
//	                1  type (raft.LogType)
//	                8  appended at, Unix ns (math.MinInt64: the zero time)
//	                4  extensions length E, then E bytes
//	                4  data length D (≤ maxWireData), then D bytes
//
// Response, follower → leader (as raft.NetworkTransport, the response
// and the error the follower answered with, if any, both travel):
//
//	 0     1  flags: bit 0 success, bit 1 no retry backoff, bit 2 an
//	          error text follows the response
//	 1     8  protocol version (int64)
//	 9     8  term
//	17     8  last log index
//	25     -  ID, Addr: each a 2-byte length and the bytes
//	 -     -  with bit 2: the error text, a 2-byte length and the bytes
const (
	wireKindAppend    = 1
	wireFlagSuccess   = 1 << 0
	wireFlagNoBackoff = 1 << 1
	wireFlagError     = 1 << 2
	wireZeroTime      = math.MinInt64

	// maxWireEntries bounds the entries of one request (raft sends at most
	// MaxAppendEntries, itself at most 1024).
	maxWireEntries = 1 << 16
	// maxWireData bounds one entry's data and extensions (a Kafka batch is
	// bounded far lower by max.message.bytes).
	maxWireData = 256 << 20
	// wireExactAlloc: entries up to this size (a Kafka batch is at most
	// 1 MiB by default) are read into a buffer of their size at once.
	wireExactAlloc = 4 << 20
)

var errWireFormat = errors.New("replication: malformed append request")

// wireWriter appends the fixed parts of a message to buf and hands the
// entries' bytes to w unchanged, or, on a stream that takes several
// buffers in one system call (vec), hands the fixed parts and the
// entries' bytes to it together.
type wireWriter struct {
	w   *bufio.Writer
	vec buffersWriter
	// conn, when w and vec are nil, is written through a writer of
	// writerPool held for one message only.
	conn io.Writer
	buf  []byte
	out  net.Buffers
}

// Append streams on a session (past the direct connections a node dials
// to a peer) are thousands, mostly idle: their 16 KiB buffers, one on
// each side, were half of an idle node's heap at 3,000 partitions. A
// sender's writer and a session stream's reader are taken from these
// pools for one message and handed back after it.
var (
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, appendBufferSize) }}
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, appendBufferSize) }}
)

// writer returns the writer of one message: w, or one of writerPool
// writing to conn, handed back by done.
func (ww *wireWriter) writer() *bufio.Writer {
	if ww.w != nil {
		return ww.w
	}
	w := writerPool.Get().(*bufio.Writer)
	w.Reset(ww.conn)
	return w
}

// done ends a message written through w.
func (ww *wireWriter) done(w *bufio.Writer) {
	if w != ww.w {
		w.Reset(nil)
		writerPool.Put(w)
	}
}

// buffersWriter is a stream that writes several buffers with one system
// call (writev): a direct connection. A request then reaches the follower
// whole instead of as a first piece of the size of w's buffer, which wakes
// the follower's reader for that piece alone, and the rest.
type buffersWriter interface {
	writeBuffers(v *net.Buffers) (int64, error)
}

func putBytes16(b, v []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(v)))
	return append(b, v...)
}

func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return wireZeroTime
	}
	return t.UnixNano()
}

func fromUnixNanos(n int64) time.Time {
	if n == wireZeroTime {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func checkHeader(h raft.RPCHeader) error {
	if len(h.ID) > math.MaxUint16 || len(h.Addr) > math.MaxUint16 {
		return fmt.Errorf("replication: RPC header of %d+%d bytes", len(h.ID), len(h.Addr))
	}
	return nil
}

// writeAppendRequest writes req and flushes.
func (ww *wireWriter) writeAppendRequest(req *raft.AppendEntriesRequest) error {
	if len(req.Entries) > maxWireEntries {
		return fmt.Errorf("replication: %d entries in one request", len(req.Entries))
	}
	if err := checkHeader(req.RPCHeader); err != nil {
		return err
	}
	if len(req.Leader) > math.MaxUint16 {
		return fmt.Errorf("replication: leader address of %d bytes", len(req.Leader))
	}
	for _, e := range req.Entries {
		if len(e.Data) > maxWireData || len(e.Extensions) > maxWireData {
			return fmt.Errorf("replication: entry %d of %d bytes", e.Index, len(e.Data)+len(e.Extensions))
		}
		if isHeaderOnly(e) {
			// A replication goroutine of a replica that stepped down
			// read a follower's cached header (logStore.GetLog). A
			// follower would refuse it only after Raft cut its
			// conflicting entries, which leaves Raft's idea of its last
			// entry wrong; it is never sent.
			return fmt.Errorf("replication: entry %d is a cached header, not the batch (the replica no longer leads)", e.Index)
		}
	}
	// The fixed parts gather in buf; a large entry goes out from its own
	// buffer (bufio.Writer writes a slice larger than its free space
	// straight to the stream).
	b := ww.appendRequestHeader(req)
	out := ww.out[:0]
	start := 0 // b[start:] is not in out yet
	for _, e := range req.Entries {
		b = appendEntryHeader(b, e)
		if len(e.Data) <= 4<<10 {
			b = append(b, e.Data...)
			continue
		}
		// b may move as it grows; what out holds of it stays where it
		// was, in the array it was appended to.
		out = append(out, b[start:len(b):len(b)], e.Data)
		start = len(b)
	}
	if start < len(b) {
		out = append(out, b[start:])
	}
	ww.keep(b)
	ww.out = out[:0]
	var err error
	if ww.vec != nil {
		v := out
		_, err = ww.vec.writeBuffers(&v)
	} else {
		w := ww.writer()
		for _, p := range out {
			if _, err = w.Write(p); err != nil {
				break
			}
		}
		if err == nil {
			err = w.Flush()
		}
		ww.done(w)
	}
	clear(out) // the entries' buffers are Raft's, not to be held here
	return err
}

// appendRequestHeader starts a request in buf: its fixed part.
func (ww *wireWriter) appendRequestHeader(req *raft.AppendEntriesRequest) []byte {
	b := append(ww.buf[:0], wireKindAppend)
	b = binary.BigEndian.AppendUint64(b, uint64(req.ProtocolVersion))
	b = binary.BigEndian.AppendUint64(b, req.Term)
	b = binary.BigEndian.AppendUint64(b, req.PrevLogEntry)
	b = binary.BigEndian.AppendUint64(b, req.PrevLogTerm)
	b = binary.BigEndian.AppendUint64(b, req.LeaderCommitIndex)
	b = binary.BigEndian.AppendUint32(b, uint32(len(req.Entries)))
	b = putBytes16(b, req.ID)
	b = putBytes16(b, req.Addr)
	return putBytes16(b, req.Leader)
}

// appendEntryHeader appends e's fields up to its data length.
func appendEntryHeader(b []byte, e *raft.Log) []byte {
	b = binary.BigEndian.AppendUint64(b, e.Index)
	b = binary.BigEndian.AppendUint64(b, e.Term)
	b = append(b, byte(e.Type))
	b = binary.BigEndian.AppendUint64(b, uint64(unixNanos(e.AppendedAt)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(e.Extensions)))
	b = append(b, e.Extensions...)
	return binary.BigEndian.AppendUint32(b, uint32(len(e.Data)))
}

// keep keeps b's array for the next message unless it grew large (many
// small entries gathered in one request).
func (ww *wireWriter) keep(b []byte) {
	if cap(b) > 64<<10 {
		ww.buf = nil
		return
	}
	ww.buf = b[:0]
}

// writeAppendResponse writes resp (nil: a zero response) and the error
// the RPC was answered with, if any, and flushes.
func (ww *wireWriter) writeAppendResponse(resp *raft.AppendEntriesResponse, rpcErr error) error {
	if resp == nil {
		resp = &raft.AppendEntriesResponse{}
	}
	if err := checkHeader(resp.RPCHeader); err != nil {
		return err
	}
	var flags byte
	if resp.Success {
		flags |= wireFlagSuccess
	}
	if resp.NoRetryBackoff {
		flags |= wireFlagNoBackoff
	}
	// As raft.NetworkTransport: an error is its text, and no text is no
	// error.
	if rpcErr != nil && rpcErr.Error() == "" {
		rpcErr = nil
	}
	if rpcErr != nil {
		flags |= wireFlagError
	}
	b := append(ww.buf[:0], flags)
	b = binary.BigEndian.AppendUint64(b, uint64(resp.ProtocolVersion))
	b = binary.BigEndian.AppendUint64(b, resp.Term)
	b = binary.BigEndian.AppendUint64(b, resp.LastLog)
	b = putBytes16(b, resp.ID)
	b = putBytes16(b, resp.Addr)
	if rpcErr != nil {
		msg := rpcErr.Error()
		if len(msg) > math.MaxUint16 {
			msg = msg[:math.MaxUint16]
		}
		b = putBytes16(b, []byte(msg))
	}
	ww.buf = b[:0]
	w := ww.writer()
	defer ww.done(w)
	if _, err := w.Write(b); err != nil {
		return err
	}
	return w.Flush()
}

// wireReader reads messages of the format above. With an arena, the
// entries' data of a request are read into its chunks.
type wireReader struct {
	r     *bufio.Reader
	fix   [45]byte
	arena *entryArena
}

// arenaChunkSize is the size of the chunks a follower reads entries into:
// a Kafka batch (1 MiB by default) fits, and a chunk holds many of the
// batches a loaded partition's requests carry. A larger entry gets a
// buffer of its own.
const arenaChunkSize = 1 << 20

// arenaChunks are the chunks no request holds, shared by every stream: a
// sync.Pool, so the collector frees those left unused.
var arenaChunks = sync.Pool{New: func() any { return new([arenaChunkSize]byte) }}

// entryArena holds the entries of the append request a follower's stream
// is serving, read into pooled chunks instead of a new buffer per entry.
// Allocating those buffers was most of what a loaded follower allocated,
// on the goroutine reading the stream: each garbage collection's assists
// charged it there, in the round trip that a produce's commit waits for.
//
// The request's entries may be used until release, which the stream
// calls once the Raft goroutine answered the request: by then Raft has
// stored them (logStore.StoreLogs writes them to the log and, on a
// replica that does not lead, caches copies only) and decoded what it
// keeps of a configuration entry into its own values.
type entryArena struct {
	chunks []*[arenaChunkSize]byte // those of the current request; the last is being filled
	off    int                     // bytes used in the last chunk
}

// take returns n ≤ arenaChunkSize bytes for an entry of the current
// request.
func (a *entryArena) take(n int) []byte {
	if len(a.chunks) == 0 || arenaChunkSize-a.off < n {
		a.chunks = append(a.chunks, arenaChunks.Get().(*[arenaChunkSize]byte))
		a.off = 0
	}
	c := a.chunks[len(a.chunks)-1]
	b := c[a.off : a.off+n : a.off+n]
	a.off += n
	return b
}

// release hands the chunks back to the pool: nothing may use the entries
// read since the last release any more.
func (a *entryArena) release() {
	for i, c := range a.chunks {
		if poisonReleasedChunks {
			for j := range c {
				c[j] = 0xdb
			}
		}
		arenaChunks.Put(c)
		a.chunks[i] = nil
	}
	a.chunks, a.off = a.chunks[:0], 0
}

func (wr *wireReader) full(n int) ([]byte, error) {
	if _, err := io.ReadFull(wr.r, wr.fix[:n]); err != nil {
		return nil, err
	}
	return wr.fix[:n], nil
}

func (wr *wireReader) bytes16() ([]byte, error) {
	h, err := wr.full(2)
	if err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(h))
	if n == 0 {
		return nil, nil
	}
	b := make([]byte, n)
	_, err = io.ReadFull(wr.r, b)
	return b, err
}

// bytes32 reads a 4-byte length and the bytes; with entry set and an
// arena, bytes that fit a chunk are read into the arena.
func (wr *wireReader) bytes32(entry bool) ([]byte, error) {
	h, err := wr.full(4)
	if err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h)
	if n > maxWireData {
		return nil, fmt.Errorf("%w: %d bytes in one entry", errWireFormat, n)
	}
	if n == 0 {
		return nil, nil
	}
	if entry && wr.arena != nil && n <= arenaChunkSize {
		b := wr.arena.take(int(n))
		_, err = io.ReadFull(wr.r, b)
		return b, err
	}
	if n <= wireExactAlloc {
		b := make([]byte, n)
		_, err = io.ReadFull(wr.r, b)
		return b, err
	}
	// Past wireExactAlloc the buffer grows as the bytes arrive, so a
	// length that lies costs what was sent, not what it claims.
	var buf bytes.Buffer
	buf.Grow(wireExactAlloc)
	if _, err := io.CopyN(&buf, wr.r, int64(n)); err != nil {
		return nil, eof(err)
	}
	return buf.Bytes(), nil
}

// readAppendRequest reads one request. io.EOF before its first byte is
// returned as is (the peer closed between requests).
func (wr *wireReader) readAppendRequest(req *raft.AppendEntriesRequest) error {
	b, err := wr.full(45)
	if err != nil {
		return err
	}
	if b[0] != wireKindAppend {
		return fmt.Errorf("%w: kind %d", errWireFormat, b[0])
	}
	req.ProtocolVersion = raft.ProtocolVersion(int64(binary.BigEndian.Uint64(b[1:])))
	req.Term = binary.BigEndian.Uint64(b[9:])
	req.PrevLogEntry = binary.BigEndian.Uint64(b[17:])
	req.PrevLogTerm = binary.BigEndian.Uint64(b[25:])
	req.LeaderCommitIndex = binary.BigEndian.Uint64(b[33:])
	n := binary.BigEndian.Uint32(b[41:])
	if n > maxWireEntries {
		return fmt.Errorf("%w: %d entries", errWireFormat, n)
	}
	if req.ID, err = wr.bytes16(); err != nil {
		return eof(err)
	}
	if req.Addr, err = wr.bytes16(); err != nil {
		return eof(err)
	}
	if req.Leader, err = wr.bytes16(); err != nil {
		return eof(err)
	}
	// Entries are allocated as they arrive, so that a header claiming
	// many costs nothing until their bytes do.
	req.Entries = nil
	var ents []raft.Log
	for i := uint32(0); i < n; i++ {
		if len(ents) == cap(ents) {
			ents = make([]raft.Log, 0, min(n-i, 64))
		}
		ents = append(ents, raft.Log{})
		e := &ents[len(ents)-1]
		h, err := wr.full(25)
		if err != nil {
			return eof(err)
		}
		e.Index = binary.BigEndian.Uint64(h)
		e.Term = binary.BigEndian.Uint64(h[8:])
		e.Type = raft.LogType(h[16])
		e.AppendedAt = fromUnixNanos(int64(binary.BigEndian.Uint64(h[17:])))
		if e.Extensions, err = wr.bytes32(false); err != nil {
			return eof(err)
		}
		if e.Data, err = wr.bytes32(true); err != nil {
			return eof(err)
		}
		req.Entries = append(req.Entries, e)
	}
	return nil
}

// readAppendResponse reads one response into resp; an error the follower
// answered with is returned as an rpcError.
func (wr *wireReader) readAppendResponse(resp *raft.AppendEntriesResponse) error {
	b, err := wr.full(25)
	if err != nil {
		return err
	}
	flags := b[0]
	if flags&^(wireFlagSuccess|wireFlagNoBackoff|wireFlagError) != 0 {
		return fmt.Errorf("%w: response flags %#x", errWireFormat, flags)
	}
	resp.ProtocolVersion = raft.ProtocolVersion(int64(binary.BigEndian.Uint64(b[1:])))
	resp.Term = binary.BigEndian.Uint64(b[9:])
	resp.LastLog = binary.BigEndian.Uint64(b[17:])
	resp.Success = flags&wireFlagSuccess != 0
	resp.NoRetryBackoff = flags&wireFlagNoBackoff != 0
	if resp.ID, err = wr.bytes16(); err != nil {
		return eof(err)
	}
	if resp.Addr, err = wr.bytes16(); err != nil {
		return eof(err)
	}
	if flags&wireFlagError != 0 {
		msg, err := wr.bytes16()
		if err != nil {
			return eof(err)
		}
		return rpcError(msg)
	}
	return nil
}

// eof turns an EOF inside a message into io.ErrUnexpectedEOF.
func eof(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
