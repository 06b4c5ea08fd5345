package index

import (
	"encoding/binary"
	"fmt"
)

// Time index file format (.timeindex). Frozen: files written by one version
// are read by every later one.
//
// The file is an array of 12-byte entries, no header, no padding, ordered by
// timestamp and by offset. Entry i:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |  bytes 0-7
//	+          timestamp, ms since the epoch (int64, big-endian)    +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          relative offset (uint32, big-endian)                 |  bytes 8-11
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
//	offset = base offset of the segment + relative offset
//
// An entry (T, O) says: every record of the segment before offset O has a
// timestamp <= T (T is the running maximum timestamp of the segment when
// the entry was added). Timestamps and offsets are non-decreasing (this
// package writes both strictly increasing).
const (
	TimeEntrySize = 12 // frozen: entry size in bytes

	timeTsOff  = 0 // frozen: timestamp field, 8 bytes
	timeRelOff = 8 // frozen: relative offset field, 4 bytes
)

// TimeIndex maps timestamps to offsets in a segment: a sparse index with at
// most one entry per index interval. See the package documentation for the
// concurrency rules.
//
// Entries, IsFull, BaseOffset, SizeBytes, Path, Reset, Seal, Unseal, Sync,
// Close and Delete are shared with OffsetIndex.
type TimeIndex struct {
	mmapFile
}

// OpenTimeIndex opens or creates the time index at path for the segment
// starting at baseOffset. maxBytes is rounded down to a multiple of
// TimeEntrySize; otherwise it behaves as OpenOffsetIndex.
func OpenTimeIndex(path string, baseOffset int64, maxBytes int, writable bool) (*TimeIndex, error) {
	x := &TimeIndex{}
	if err := x.open(path, baseOffset, TimeEntrySize, maxBytes, writable); err != nil {
		return nil, err
	}
	return x, nil
}

// OpenTimeIndexReadOnly opens the existing time index at path for
// inspection, for the segment starting at baseOffset, without ever
// creating or modifying the file; it behaves as OpenOffsetIndexReadOnly.
// MaybeAppend, Seal, Unseal, Sync and Delete on the index fail with an
// error wrapping ErrReadOnly; TruncateTo and Reset do nothing.
func OpenTimeIndexReadOnly(path string, baseOffset int64) (*TimeIndex, error) {
	x := &TimeIndex{}
	if err := x.openReadOnly(path, baseOffset, TimeEntrySize); err != nil {
		return nil, err
	}
	return x, nil
}

// MaybeAppend adds the entry (timestamp, offset) and reports whether it did.
//
// The log passes the running maximum timestamp of its segment, so an entry
// is only worth adding when it raises the maximum: an entry whose timestamp
// is not greater than the last entry's is skipped (false, nil). An entry
// with the same offset as the last one and a greater timestamp is skipped
// too: it would not replace the last entry, whose claim about the records
// before that offset still holds. An offset below the last entry's offset
// (or below the base offset) is ErrOutOfOrder; one more than 2^32-1 above the
// base offset is an error wrapping ErrFull. ErrFull is returned when the
// index has no room for an entry that would be added, ErrReadOnly when the
// index is sealed.
//
// The entry is stored in the mapping with plain stores, then published with
// an atomic store of the entry count.
func (x *TimeIndex) MaybeAppend(timestamp int64, offset int64) (bool, error) {
	if err := x.writableCheck(); err != nil {
		return false, err
	}
	n := x.count()
	if n > 0 {
		lastTs, lastOff := x.entry(n - 1)
		if offset < lastOff {
			return false, fmt.Errorf("%w: %s: offset %d before %d", ErrOutOfOrder, x.path, offset, lastOff)
		}
		if timestamp <= lastTs || offset == lastOff {
			return false, nil
		}
	}
	rel, err := x.relative(offset)
	if err != nil {
		return false, err
	}
	b, err := x.freeSlot(n)
	if err != nil {
		return false, err
	}
	binary.BigEndian.PutUint64(b[timeTsOff:], uint64(timestamp))
	binary.BigEndian.PutUint32(b[timeRelOff:], rel)
	x.publish(n + 1)
	return true, nil
}

// Lookup returns the last entry whose timestamp is strictly less than
// target. Every record before its offset has a timestamp < target, so the
// first record with a timestamp >= target is at that offset or later: the
// caller scans from there. ok is false when no entry has a timestamp <
// target (scan from the segment start); the entry returned is then
// (-1, BaseOffset()). Safe concurrently with MaybeAppend.
func (x *TimeIndex) Lookup(target int64) (timestamp int64, offset int64, ok bool) {
	if target == minInt64 {
		return -1, x.base, false
	}
	i := x.lastAtMost(x.count(), timeTsOff, true, target-1) // timestamp < target
	if i < 0 {
		return -1, x.base, false
	}
	timestamp, offset = x.entry(i)
	return timestamp, offset, true
}

// Entry returns entry i, 0 <= i < Entries(). Safe concurrently with
// MaybeAppend.
func (x *TimeIndex) Entry(i int) (timestamp int64, offset int64) {
	checkIndex(i, x.count())
	return x.entry(i)
}

func (x *TimeIndex) entry(i int) (int64, int64) {
	b := x.slot(i)
	return int64(binary.BigEndian.Uint64(b[timeTsOff:])), x.base + int64(binary.BigEndian.Uint32(b[timeRelOff:]))
}

// LastEntry returns the last entry, or (-1, BaseOffset(), false) when the
// index is empty. Safe concurrently with MaybeAppend.
func (x *TimeIndex) LastEntry() (timestamp int64, offset int64, ok bool) {
	n := x.count()
	if n == 0 {
		return -1, x.base, false
	}
	timestamp, offset = x.entry(n - 1)
	return timestamp, offset, true
}

// TruncateTo drops every entry whose offset is >= offset; as
// OffsetIndex.TruncateTo. Readers must be excluded. A no-op on an index
// opened with OpenTimeIndexReadOnly.
func (x *TimeIndex) TruncateTo(offset int64) {
	x.truncateOffsets(timeRelOff, offset)
}

// Check verifies every entry: timestamps non-decreasing, offsets
// non-decreasing and representable. Failures wrap ErrCorrupt and name the
// file.
func (x *TimeIndex) Check() error {
	n := x.count()
	var prevTs int64
	var prevRel uint32
	for i := range n {
		b := x.slot(i)
		ts := int64(binary.BigEndian.Uint64(b[timeTsOff:]))
		rel := binary.BigEndian.Uint32(b[timeRelOff:])
		if err := x.checkRelative(i, rel); err != nil {
			return err
		}
		if i > 0 && ts < prevTs {
			return x.corrupt(i, "timestamp %d below the previous %d", ts, prevTs)
		}
		if i > 0 && rel < prevRel {
			return x.corrupt(i, "offset %d below the previous %d", x.base+int64(rel), x.base+int64(prevRel))
		}
		prevTs, prevRel = ts, rel
	}
	return nil
}
