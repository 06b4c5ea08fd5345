package log

import (
	"fmt"
	"io"
	"sync"
)

// locateBufs holds the small buffers of index-to-batch scans.
var locateBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// locate finds the position of the first batch of seg whose last offset is
// at least offset: index lower bound, then a scan of batch headers (at most
// about one index interval). ok is false when seg holds no such batch below
// limit. Callers hold l.mu shared.
func (l *Log) locate(seg *segment, offset, limit int64) (pos int64, b [BatchHeaderSize]byte, ok bool, err error) {
	_, p := seg.oi.Lookup(offset)
	bufp := locateBufs.Get().(*[]byte)
	defer locateBufs.Put(bufp)
	sc := newScanner(seg.f, int64(p), limit, *bufp)
	for {
		hdr, at, more := sc.next(false, 0)
		if !more {
			return 0, b, false, sc.err
		}
		if hdr.LastOffset() >= offset {
			copy(b[:], hdr)
			return at, b, true, nil
		}
	}
}

// segmentFor returns the segment holding offset and the position of the
// batch that holds it, with a read reference taken. Callers release it.
func (l *Log) segmentFor(offset int64, physical bool) (*segment, int64, int64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	start := l.start.Load()
	if physical {
		start = l.segs[0].base
	}
	end := l.segs[len(l.segs)-1].next.Load()
	if offset < start || offset > end {
		return nil, 0, 0, fmt.Errorf("%w: %d not in [%d, %d]", ErrOffsetOutOfRange, offset, start, end)
	}
	if offset == end {
		return nil, 0, 0, nil
	}
	for i := l.floorIndex(offset); i < len(l.segs); i++ {
		seg := l.segs[i]
		limit := seg.size.Load()
		pos, _, ok, err := l.locate(seg, offset, limit)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("log: read %s: %w", seg.logPath, err)
		}
		if ok {
			if !seg.acquire() {
				return nil, 0, 0, ErrClosed
			}
			return seg, pos, limit, nil
		}
	}
	return nil, 0, 0, nil
}

// Read returns whole batches starting with the one that holds offset, up to
// maxBytes, leaving out batches that reach maxOffset (the high watermark:
// pass EndOffset to read everything). The first batch is returned whole
// even when larger than maxBytes, so a reader always makes progress (as
// Kafka does). Reads stay within one segment. Empty at the end of the log.
func (l *Log) Read(offset int64, maxBytes int, maxOffset int64) ([]byte, error) {
	if offset >= maxOffset {
		if start, end := l.StartOffset(), l.EndOffset(); offset < start || offset > end {
			return nil, fmt.Errorf("%w: %d not in [%d, %d]", ErrOffsetOutOfRange, offset, start, end)
		}
		return nil, nil
	}
	seg, pos, limit, err := l.segmentFor(offset, false)
	if err != nil || seg == nil {
		return nil, err
	}
	defer seg.release()
	var hdr [LogOverhead]byte
	if _, err := seg.f.ReadAt(hdr[:], pos); err != nil {
		return nil, fmt.Errorf("log: read %s at %d: %w", seg.logPath, pos, err)
	}
	first, err := peekBatchSize(hdr[:])
	if err != nil {
		return nil, fmt.Errorf("log: read %s at %d: %w", seg.logPath, pos, err)
	}
	n := int64(maxBytes)
	if n < int64(first) {
		n = int64(first)
	}
	if rem := limit - pos; n > rem {
		n = rem
	}
	buf := make([]byte, n)
	if m, err := seg.f.ReadAt(buf, pos); int64(m) < n {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("log: read %s at %d: %w", seg.logPath, pos, err)
	}
	// Cut at the last whole batch below maxOffset.
	cut := 0
	for cut < len(buf) {
		rest := buf[cut:]
		if len(rest) < BatchHeaderSize {
			break
		}
		size, err := peekBatchSize(rest)
		if err != nil || size > len(rest) || Batch(rest).LastOffset() >= maxOffset {
			break
		}
		cut += size
	}
	return buf[:cut], nil
}

// ReadBatch returns a copy of the batch whose base offset is offset. It
// reads what is on disk, below the log start too (a Raft log reads its
// entries with it).
func (l *Log) ReadBatch(offset int64) (Batch, error) {
	seg, pos, limit, err := l.segmentFor(offset, true)
	if err != nil {
		return nil, err
	}
	if seg == nil {
		return nil, fmt.Errorf("%w: %d is the log end", ErrOffsetOutOfRange, offset)
	}
	defer seg.release()
	var hdr [BatchHeaderSize]byte
	if _, err := seg.f.ReadAt(hdr[:], pos); err != nil {
		return nil, fmt.Errorf("log: read %s at %d: %w", seg.logPath, pos, err)
	}
	size, err := peekBatchSize(hdr[:])
	if err != nil || pos+int64(size) > limit {
		return nil, fmt.Errorf("log: read %s at %d: bad batch header (%v)", seg.logPath, pos, err)
	}
	if got := Batch(hdr[:]).BaseOffset(); got != offset {
		return nil, fmt.Errorf("%w: offset %d is inside the batch at %d", ErrOffsetOutOfRange, offset, got)
	}
	b := make([]byte, size)
	if _, err := seg.f.ReadAt(b, pos); err != nil {
		return nil, fmt.Errorf("log: read %s at %d: %w", seg.logPath, pos, err)
	}
	return Batch(b), nil
}

// OffsetForTimestamp finds the first record at or after the log start
// with a timestamp at least ts among offsets below maxOffset: the first
// segment whose max timestamp reaches ts, then the time index, the offset
// index, and a scan, going on to later segments when one holds no such
// record. It returns that record's offset and timestamp; found is false
// when no record qualifies. In a compressed batch the answer is the batch's
// first offset (or the log start) and its max timestamp (a record of that
// batch qualifies; earlier ones of it may not).
func (l *Log) OffsetForTimestamp(ts, maxOffset int64) (offset, timestamp int64, found bool, err error) {
	start := l.StartOffset()
	for from := 0; ; from++ {
		l.mu.RLock()
		var seg *segment
		var pos int64
		for ; from < len(l.segs); from++ {
			s := l.segs[from]
			if s.base >= maxOffset {
				break
			}
			if s.maxTs.Load() >= ts && s.next.Load() > start {
				seg = s
				break
			}
		}
		if seg != nil {
			startOff := seg.base
			if _, o, ok := seg.ti.Lookup(ts); ok {
				startOff = o
			}
			startOff = max(startOff, start)
			_, p := seg.oi.Lookup(startOff)
			pos = int64(p)
			if !seg.acquire() {
				l.mu.RUnlock()
				return 0, 0, false, ErrClosed
			}
		}
		l.mu.RUnlock()
		if seg == nil {
			return 0, 0, false, nil
		}
		offset, timestamp, found, err = l.timestampInSegment(seg, pos, ts, start, maxOffset)
		seg.release()
		if found || err != nil {
			return offset, timestamp, found, err
		}
	}
}

func (l *Log) timestampInSegment(seg *segment, from, ts, start, maxOffset int64) (int64, int64, bool, error) {
	bufp := locateBufs.Get().(*[]byte)
	defer locateBufs.Put(bufp)
	limit := seg.size.Load()
	sc := newScanner(seg.f, from, limit, *bufp)
	for {
		hdr, pos, ok := sc.next(false, 0)
		if !ok {
			return 0, 0, false, sc.err
		}
		if hdr.BaseOffset() >= maxOffset {
			return 0, 0, false, nil
		}
		if hdr.MaxTimestamp() < ts || hdr.IsControl() || hdr.LastOffset() >= maxOffset || hdr.LastOffset() < start {
			continue
		}
		if hdr.Codec() != 0 || hdr.Attributes()&AttrTimestampType != 0 {
			// Compressed, or LogAppendTime (every record has the batch's
			// max timestamp).
			return max(hdr.BaseOffset(), start), hdr.MaxTimestamp(), true, nil
		}
		size := hdr.Size()
		if pos+int64(size) > limit {
			return 0, 0, false, fmt.Errorf("log: %s: batch at %d runs past %d", seg.logPath, pos, limit)
		}
		b := make([]byte, size)
		if _, err := seg.f.ReadAt(b, pos); err != nil {
			return 0, 0, false, err
		}
		if o, t, ok := firstRecordAtOrAfter(Batch(b), ts, start); ok {
			return o, t, true, nil
		}
	}
}

// firstRecordAtOrAfter walks an uncompressed batch's records for the first
// at or past start with timestamp ≥ ts. A record: length varint, attributes
// int8, timestampDelta varlong, offsetDelta varint, then key, value,
// headers (not needed here).
func firstRecordAtOrAfter(b Batch, ts, start int64) (int64, int64, bool) {
	p := b.Records()
	base, baseTs := b.BaseOffset(), b.BaseTimestamp()
	for len(p) > 0 {
		l, rest, ok := readVarint(p)
		if !ok || l < 1 || int64(len(rest)) < l {
			return 0, 0, false
		}
		rec := rest[1:l]
		p = rest[l:]
		td, rec, ok := readVarint(rec)
		if !ok {
			return 0, 0, false
		}
		od, _, ok := readVarint(rec)
		if !ok {
			return 0, 0, false
		}
		if baseTs+td >= ts && base+od >= start {
			return base + od, baseTs + td, true
		}
	}
	return 0, 0, false
}

// WalkBatches calls fn with the header (the first BatchHeaderSize bytes)
// of every batch from the one starting at offset to the end of the log, in
// order, until fn returns false. It reads headers only.
func (l *Log) WalkBatches(offset int64, fn func(hdr Batch) bool) error {
	for {
		seg, pos, limit, err := l.segmentFor(offset, true)
		if err != nil || seg == nil {
			return err
		}
		bufp := locateBufs.Get().(*[]byte)
		sc := newScanner(seg.f, pos, limit, *bufp)
		cont := true
		for cont {
			hdr, _, ok := sc.next(false, 0)
			if !ok {
				break
			}
			offset = hdr.NextOffset()
			cont = fn(hdr)
		}
		err = sc.err
		locateBufs.Put(bufp)
		seg.release()
		if err != nil {
			return fmt.Errorf("log: walk %s: %w", seg.logPath, err)
		}
		if !cont {
			return nil
		}
	}
}

// BytesBetween is the size of the whole batches from the one holding from
// to the last one ending at or before to: what Read would return for that
// range across all its segments, without reading it.
func (l *Log) BytesBetween(from, to int64) (int64, error) {
	if to <= from {
		return 0, nil
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if from < l.segs[0].base || to > l.segs[len(l.segs)-1].next.Load() {
		return 0, fmt.Errorf("%w: [%d, %d) not on disk", ErrOffsetOutOfRange, from, to)
	}
	// position of the batch holding off in seg, or seg's size past its end.
	pos := func(seg *segment, off int64) (int64, error) {
		if off >= seg.next.Load() {
			return seg.size.Load(), nil
		}
		p, _, ok, err := l.locate(seg, off, seg.size.Load())
		if err != nil {
			return 0, err
		}
		if !ok {
			return seg.size.Load(), nil
		}
		return p, nil
	}
	var n int64
	for i := l.floorIndex(from); i < len(l.segs) && l.segs[i].base < to; i++ {
		seg := l.segs[i]
		lo, hi := int64(0), seg.size.Load()
		var err error
		if from > seg.base {
			if lo, err = pos(seg, from); err != nil {
				return 0, err
			}
		}
		if to < seg.next.Load() {
			// The batch holding to-1 ends the range when it ends at to;
			// one that crosses to is left out, as Read does.
			if hi, err = pos(seg, to); err != nil {
				return 0, err
			}
		}
		n += hi - lo
	}
	return n, nil
}
