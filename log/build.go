package log

import (
	"encoding/binary"
)

// Record is one uncompressed record to encode into a batch.
type Record struct {
	Key, Value []byte // nil encodes as null
	Timestamp  int64  // ms
	Headers    []Header
}

// Header is a record header.
type Header struct {
	Key   string
	Value []byte
}

// BatchOptions are the batch-level fields of BuildBatch.
type BatchOptions struct {
	BaseOffset    int64
	LeaderEpoch   int32
	Attributes    int16 // codec bits must be 0: BuildBatch does not compress
	ProducerID    int64 // -1 when not idempotent
	ProducerEpoch int16
	BaseSequence  int32
}

// BuildBatch appends to dst an uncompressed RecordBatch v2 holding recs
// (at least one), with its CRC. Raft's own entries are stored as control
// batches built here; tests build produce batches with it too.
func BuildBatch(dst []byte, o BatchOptions, recs []Record) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, BatchHeaderSize)...)
	baseTs, maxTs := recs[0].Timestamp, recs[0].Timestamp
	for _, r := range recs {
		if r.Timestamp < baseTs {
			baseTs = r.Timestamp
		}
		if r.Timestamp > maxTs {
			maxTs = r.Timestamp
		}
	}
	var body []byte
	for i, r := range recs {
		body = body[:0]
		body = append(body, 0) // attributes
		body = binary.AppendVarint(body, r.Timestamp-baseTs)
		body = binary.AppendVarint(body, int64(i))
		body = appendVarBytes(body, r.Key)
		body = appendVarBytes(body, r.Value)
		body = binary.AppendVarint(body, int64(len(r.Headers)))
		for _, h := range r.Headers {
			body = appendVarBytes(body, []byte(h.Key))
			body = appendVarBytes(body, h.Value)
		}
		dst = binary.AppendVarint(dst, int64(len(body)))
		dst = append(dst, body...)
	}
	b := Batch(dst[start:])
	be := binary.BigEndian
	be.PutUint64(b[0:], uint64(o.BaseOffset))
	be.PutUint32(b[batchLengthOff:], uint32(len(b)-LogOverhead))
	be.PutUint32(b[leaderEpochOff:], uint32(o.LeaderEpoch))
	b[magicOff] = 2
	be.PutUint16(b[attributesOff:], uint16(o.Attributes&^AttrCompressionMask))
	be.PutUint32(b[lastDeltaOff:], uint32(len(recs)-1))
	be.PutUint64(b[baseTimeOff:], uint64(baseTs))
	be.PutUint64(b[maxTimeOff:], uint64(maxTs))
	be.PutUint64(b[producerIDOff:], uint64(o.ProducerID))
	be.PutUint16(b[producerEpOff:], uint16(o.ProducerEpoch))
	be.PutUint32(b[baseSeqOff:], uint32(o.BaseSequence))
	be.PutUint32(b[recordCountOff:], uint32(len(recs)))
	be.PutUint32(b[crcOff:], b.ComputeCRC())
	return dst
}

func appendVarBytes(dst, p []byte) []byte {
	if p == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(p)))
	return append(dst, p...)
}

// DecodeRecords decodes the records of an uncompressed batch (for the dump
// tool and tests). It returns nil for a compressed batch.
func DecodeRecords(b Batch) ([]Record, []int64, bool) {
	if b.Codec() != 0 {
		return nil, nil, false
	}
	p := b.Records()
	var recs []Record
	var offs []int64
	base, baseTs := b.BaseOffset(), b.BaseTimestamp()
	for len(p) > 0 {
		l, w := binary.Varint(p)
		if w <= 0 || l < 1 || int64(len(p)-w) < l {
			return nil, nil, false
		}
		rec := p[w+1 : w+int(l)]
		p = p[w+int(l):]
		var r Record
		var ok bool
		var td, od int64
		if td, rec, ok = readVarint(rec); !ok {
			return nil, nil, false
		}
		if od, rec, ok = readVarint(rec); !ok {
			return nil, nil, false
		}
		r.Timestamp = baseTs + td
		if r.Key, rec, ok = readVarBytes(rec); !ok {
			return nil, nil, false
		}
		if r.Value, rec, ok = readVarBytes(rec); !ok {
			return nil, nil, false
		}
		var nh int64
		if nh, rec, ok = readVarint(rec); !ok || nh < 0 {
			return nil, nil, false
		}
		for ; nh > 0; nh-- {
			var k, v []byte
			if k, rec, ok = readVarBytes(rec); !ok {
				return nil, nil, false
			}
			if v, rec, ok = readVarBytes(rec); !ok {
				return nil, nil, false
			}
			r.Headers = append(r.Headers, Header{Key: string(k), Value: v})
		}
		recs = append(recs, r)
		offs = append(offs, base+od)
	}
	return recs, offs, true
}

func readVarint(p []byte) (int64, []byte, bool) {
	v, w := binary.Varint(p)
	if w <= 0 {
		return 0, nil, false
	}
	return v, p[w:], true
}

func readVarBytes(p []byte) ([]byte, []byte, bool) {
	n, p, ok := readVarint(p)
	if !ok {
		return nil, nil, false
	}
	if n < 0 {
		return nil, p, true
	}
	if int64(len(p)) < n {
		return nil, nil, false
	}
	return p[:n:n], p[n:], true
}

// EmptyBatch turns the BatchHeaderSize bytes of h, the header of a batch,
// into a whole batch with no records that keeps its offsets, leader epoch
// and timestamps: what compaction leaves of a batch whose records all went.
// It is not a control batch and has no producer.
func EmptyBatch(h Batch) {
	be := binary.BigEndian
	be.PutUint32(h[batchLengthOff:], uint32(BatchHeaderSize-LogOverhead))
	be.PutUint16(h[attributesOff:], 0)
	be.PutUint64(h[producerIDOff:], uint64(0xFFFFFFFFFFFFFFFF))
	be.PutUint16(h[producerEpOff:], 0xFFFF)
	be.PutUint32(h[baseSeqOff:], 0xFFFFFFFF)
	be.PutUint32(h[recordCountOff:], 0)
	be.PutUint32(h[crcOff:], h[:BatchHeaderSize].ComputeCRC())
}

// ExtendEmptyBatch makes the empty batch h (EmptyBatch) cover the offsets
// up to last as well, with maxTs as its max timestamp when larger: one
// empty batch for a run of batches, as compaction leaves of a run.
func ExtendEmptyBatch(h Batch, last, maxTs int64) {
	be := binary.BigEndian
	be.PutUint32(h[lastDeltaOff:], uint32(last-h.BaseOffset()))
	if maxTs > h.MaxTimestamp() {
		be.PutUint64(h[maxTimeOff:], uint64(maxTs))
	}
	be.PutUint32(h[crcOff:], h[:BatchHeaderSize].ComputeCRC())
}
