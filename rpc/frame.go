package rpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kmsg"
)

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
