package log

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Kafka RecordBatch v2, as stored in a .log file and sent on the wire.
// All integers are big-endian. The CRC is CRC-32C (Castagnoli) over every
// byte from attributes to the end of the batch, so the two fields before it
// that the broker rewrites (baseOffset, partitionLeaderEpoch) are outside it.
//
//	offset  size  field
//	     0     8  baseOffset            rewritten by the leader: first offset of the batch
//	     8     4  batchLength           bytes after this field (total size = 12 + batchLength)
//	    12     4  partitionLeaderEpoch  rewritten by the leader: its epoch (the Raft term)
//	    16     1  magic                 always 2
//	    17     4  crc                   CRC-32C of bytes [21, end)
//	    21     2  attributes            bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control
//	    23     4  lastOffsetDelta       recordCount-1 for a produced batch
//	    27     8  baseTimestamp
//	    35     8  maxTimestamp
//	    43     8  producerId
//	    51     2  producerEpoch
//	    53     4  baseSequence
//	    57     4  recordCount
//	    61     …  records (compressed as a whole when codec != 0)
//
// These numbers are frozen: they are Kafka's.
const (
	BatchHeaderSize = 61 // bytes before the first record
	batchLengthOff  = 8
	leaderEpochOff  = 12
	magicOff        = 16
	crcOff          = 17
	attributesOff   = 21
	lastDeltaOff    = 23
	baseTimeOff     = 27
	maxTimeOff      = 35
	producerIDOff   = 43
	producerEpOff   = 51
	baseSeqOff      = 53
	recordCountOff  = 57
	// LogOverhead is the part of every batch before batchLength counts.
	LogOverhead = 12

	// AttrCompressionMask selects the codec bits of attributes.
	AttrCompressionMask = 0x07
	// AttrTimestampType is set for LogAppendTime.
	AttrTimestampType = 0x08
	// AttrTransactional marks a transactional batch.
	AttrTransactional = 0x10
	// AttrControl marks a control batch, which consumers skip.
	AttrControl = 0x20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors of batch validation. Each reported error wraps ErrCorruptBatch or
// ErrBatchTooLarge so callers (the Kafka front end) can map them to
// CORRUPT_MESSAGE and MESSAGE_TOO_LARGE.
var (
	ErrCorruptBatch  = errors.New("corrupt record batch")
	ErrBatchTooLarge = errors.New("record batch too large")
)

// Batch is a view of one RecordBatch v2 in a byte slice. It does not copy.
type Batch []byte

// BaseOffset is the offset of the first record.
func (b Batch) BaseOffset() int64 { return int64(binary.BigEndian.Uint64(b[0:])) }

// Size is the total size of the batch in bytes.
func (b Batch) Size() int {
	return LogOverhead + int(int32(binary.BigEndian.Uint32(b[batchLengthOff:])))
}

// LeaderEpoch is the partitionLeaderEpoch field.
func (b Batch) LeaderEpoch() int32 { return int32(binary.BigEndian.Uint32(b[leaderEpochOff:])) }

// Magic is the format version byte.
func (b Batch) Magic() int8 { return int8(b[magicOff]) }

// CRC is the stored checksum.
func (b Batch) CRC() uint32 { return binary.BigEndian.Uint32(b[crcOff:]) }

// Attributes is the attributes field.
func (b Batch) Attributes() int16 { return int16(binary.BigEndian.Uint16(b[attributesOff:])) }

// LastOffsetDelta is lastOffset - baseOffset.
func (b Batch) LastOffsetDelta() int32 { return int32(binary.BigEndian.Uint32(b[lastDeltaOff:])) }

// LastOffset is the offset of the last record.
func (b Batch) LastOffset() int64 { return b.BaseOffset() + int64(b.LastOffsetDelta()) }

// NextOffset is the offset after the batch.
func (b Batch) NextOffset() int64 { return b.LastOffset() + 1 }

// BaseTimestamp is the first record's timestamp base (ms).
func (b Batch) BaseTimestamp() int64 { return int64(binary.BigEndian.Uint64(b[baseTimeOff:])) }

// MaxTimestamp is the largest timestamp in the batch (ms).
func (b Batch) MaxTimestamp() int64 { return int64(binary.BigEndian.Uint64(b[maxTimeOff:])) }

// ProducerID is the idempotent producer id, -1 when none.
func (b Batch) ProducerID() int64 { return int64(binary.BigEndian.Uint64(b[producerIDOff:])) }

// ProducerEpoch is the producer epoch.
func (b Batch) ProducerEpoch() int16 { return int16(binary.BigEndian.Uint16(b[producerEpOff:])) }

// BaseSequence is the producer sequence of the first record.
func (b Batch) BaseSequence() int32 { return int32(binary.BigEndian.Uint32(b[baseSeqOff:])) }

// RecordCount is the number of records.
func (b Batch) RecordCount() int32 { return int32(binary.BigEndian.Uint32(b[recordCountOff:])) }

// Codec is the compression codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
func (b Batch) Codec() int { return int(b.Attributes() & AttrCompressionMask) }

// IsControl reports whether this is a control batch.
func (b Batch) IsControl() bool { return b.Attributes()&AttrControl != 0 }

// Records is the records section (compressed when Codec != 0).
func (b Batch) Records() []byte { return b[BatchHeaderSize:b.Size()] }

// ComputeCRC computes the CRC-32C the batch should carry.
func (b Batch) ComputeCRC() uint32 { return crc32.Checksum(b[attributesOff:b.Size()], castagnoli) }

// SetBaseOffset rewrites baseOffset in place (outside the CRC).
func (b Batch) SetBaseOffset(o int64) { binary.BigEndian.PutUint64(b[0:], uint64(o)) }

// SetLeaderEpoch rewrites partitionLeaderEpoch in place (outside the CRC).
func (b Batch) SetLeaderEpoch(e int32) { binary.BigEndian.PutUint32(b[leaderEpochOff:], uint32(e)) }

// peekBatchSize reads the total size of the batch at the start of p, or
// returns an error when p cannot hold a batch header or the length is
// impossible.
func peekBatchSize(p []byte) (int, error) {
	if len(p) < LogOverhead {
		return 0, fmt.Errorf("%w: %d bytes, shorter than the %d-byte length prefix", ErrCorruptBatch, len(p), LogOverhead)
	}
	n := int32(binary.BigEndian.Uint32(p[batchLengthOff:]))
	if n < BatchHeaderSize-LogOverhead {
		return 0, fmt.Errorf("%w: batchLength %d below the minimum %d", ErrCorruptBatch, n, BatchHeaderSize-LogOverhead)
	}
	return LogOverhead + int(n), nil
}

// ValidateBatch checks the batch at the start of p and returns its size.
// It checks what Kafka checks before appending without decompressing:
// length, magic, CRC-32C, record count against lastOffsetDelta, and, for
// uncompressed batches, that the records exactly fill the batch. maxSize
// bounds the batch size (0: no bound).
func ValidateBatch(p []byte, maxSize int) (int, error) {
	size, err := checkFrame(p, maxSize)
	if err != nil {
		return 0, err
	}
	b := Batch(p[:size])
	if got, want := b.ComputeCRC(), b.CRC(); got != want {
		return 0, fmt.Errorf("%w: crc %08x, computed %08x", ErrCorruptBatch, want, got)
	}
	if b.Codec() == 0 {
		n, err := countRecords(b.Records())
		if err != nil {
			return 0, err
		}
		if count := b.RecordCount(); n != int(count) {
			return 0, fmt.Errorf("%w: recordCount %d, %d records present", ErrCorruptBatch, count, n)
		}
	}
	return size, nil
}

// checkFrame is ValidateBatch without the two checks that read the whole
// batch (the CRC and the walk of uncompressed records): length, magic,
// record count, lastOffsetDelta and codec, from the header alone.
func checkFrame(p []byte, maxSize int) (int, error) {
	size, err := peekBatchSize(p)
	if err != nil {
		return 0, err
	}
	if maxSize > 0 && size > maxSize {
		return 0, fmt.Errorf("%w: %d bytes, limit %d", ErrBatchTooLarge, size, maxSize)
	}
	if size > len(p) {
		return 0, fmt.Errorf("%w: batchLength says %d bytes, only %d present", ErrCorruptBatch, size, len(p))
	}
	b := Batch(p[:size])
	if m := b.Magic(); m != 2 {
		return 0, fmt.Errorf("%w: magic %d, only 2 is supported", ErrCorruptBatch, m)
	}
	count := b.RecordCount()
	if count <= 0 {
		return 0, fmt.Errorf("%w: record count %d", ErrCorruptBatch, count)
	}
	if d := b.LastOffsetDelta(); d != count-1 {
		return 0, fmt.Errorf("%w: lastOffsetDelta %d with %d records", ErrCorruptBatch, d, count)
	}
	if b.Codec() > 4 {
		return 0, fmt.Errorf("%w: unknown compression codec %d", ErrCorruptBatch, b.Codec())
	}
	return size, nil
}

// SplitBatches splits records, a buffer of whole batches (the record set
// of one partition of a Produce request), into its batches and validates
// each in full (ValidateBatch; maxSize bounds each batch, 0: no bound).
// This is where a batch is checked on its way into a log: the batches it
// returns go down to Log.AppendValidated, or through Raft to it, checked
// no more. An empty buffer, trailing bytes and any invalid batch fail the
// whole split.
func SplitBatches(records []byte, maxSize int) ([]Batch, error) {
	if len(records) == 0 {
		return nil, fmt.Errorf("%w: no record batch", ErrCorruptBatch)
	}
	var out []Batch
	for at := 0; at < len(records); {
		size, err := ValidateBatch(records[at:], maxSize)
		if err != nil {
			if len(out) > 0 {
				err = fmt.Errorf("batch %d: %w", len(out)+1, err)
			}
			return nil, err
		}
		out = append(out, Batch(records[at:at+size]))
		at += size
	}
	return out, nil
}

// frameSize is the size of the batch at the start of p, a buffer of
// batches that were validated before (SplitBatches, ValidateBatch): it
// guards the walk of such a buffer against a length that runs past it
// or past maxSize (0: no bound), and checks nothing else.
func frameSize(p []byte, maxSize int) (int, error) {
	size, err := peekBatchSize(p)
	switch {
	case err != nil:
		return 0, err
	case size > len(p) || len(p) < BatchHeaderSize:
		return 0, fmt.Errorf("%w: batchLength says %d bytes, only %d present", ErrCorruptBatch, size, len(p))
	case maxSize > 0 && size > maxSize:
		return 0, fmt.Errorf("%w: %d bytes, limit %d", ErrBatchTooLarge, size, maxSize)
	}
	return size, nil
}

// countRecords walks the length prefixes of uncompressed records and
// returns how many there are; the records must fill p exactly.
func countRecords(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		l, w := binary.Varint(p)
		if w <= 0 || l < 0 || int64(len(p)-w) < l {
			return 0, fmt.Errorf("%w: record %d has a bad length", ErrCorruptBatch, n)
		}
		p = p[w+int(l):]
		n++
	}
	return n, nil
}

// Batches iterates the batches of a buffer of whole, validated batches.
// It stops at the first incomplete one.
func Batches(p []byte, fn func(b Batch) bool) {
	for len(p) >= BatchHeaderSize {
		size, err := peekBatchSize(p)
		if err != nil || size > len(p) {
			return
		}
		if !fn(Batch(p[:size])) {
			return
		}
		p = p[size:]
	}
}
