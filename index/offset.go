package index

import (
	"encoding/binary"
	"fmt"
)

// Offset index file format (.index). Frozen: files written by one version
// are read by every later one.
//
// The file is an array of 8-byte entries, no header, no padding, ordered by
// offset. Entry i:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          relative offset (uint32, big-endian)                 |  bytes 0-3
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          position in the .log file (uint32, big-endian)       |  bytes 4-7
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
//	offset   = base offset of the segment + relative offset
//	position = byte position of the batch holding offset in the .log file
//
// Relative offsets are strictly increasing and positions non-decreasing.
const (
	OffsetEntrySize = 8 // frozen: entry size in bytes

	offsetRelOff = 0 // frozen: relative offset field, 4 bytes
	offsetPosOff = 4 // frozen: position field, 4 bytes
)

// OffsetIndex maps offsets to positions in a segment's .log file: a sparse
// index with one entry per index interval. See the package documentation
// for the concurrency rules.
//
// Entries, IsFull, BaseOffset, SizeBytes, Path, Reset, Seal, Unseal, Sync,
// Close and Delete are shared with TimeIndex.
type OffsetIndex struct {
	mmapFile
}

// OpenOffsetIndex opens or creates the offset index at path for the segment
// starting at baseOffset.
//
// With writable set, the file is preallocated (ftruncate) to maxBytes
// rounded down to a multiple of OffsetEntrySize (DefaultMaxBytes when
// maxBytes <= 0; never below the entries already present) and mapped
// read-write. Without it the file is mapped read-only at its current size,
// as a sealed segment's index. Either way the entries are those in the file
// before preallocation: its size divided by OffsetEntrySize, less trailing
// all-zero entries (untrimmed preallocated space after a crash, see the
// package documentation). A size that is not a multiple of OffsetEntrySize
// is reported as ErrCorrupt.
//
// Open does not validate the entries; call Check for that.
func OpenOffsetIndex(path string, baseOffset int64, maxBytes int, writable bool) (*OffsetIndex, error) {
	x := &OffsetIndex{}
	if err := x.open(path, baseOffset, OffsetEntrySize, maxBytes, writable); err != nil {
		return nil, err
	}
	return x, nil
}

// OpenOffsetIndexReadOnly opens the existing offset index at path for
// inspection, for the segment starting at baseOffset. It is safe on the
// active segment's index of a running process: the file is opened O_RDONLY
// (a missing file is an error wrapping fs.ErrNotExist, never created) and
// mapped read-only at its current size, and nothing is ever written,
// trimmed or synced. The entries are counted as by OpenOffsetIndex
// (trailing all-zero entries dropped), except that a trailing partial
// entry is ignored rather than reported.
//
// Append, Seal, Unseal, Sync and Delete on the index fail with an error
// wrapping ErrReadOnly; TruncateTo and Reset do nothing; Close only unmaps
// and closes. See the package documentation.
func OpenOffsetIndexReadOnly(path string, baseOffset int64) (*OffsetIndex, error) {
	x := &OffsetIndex{}
	if err := x.openReadOnly(path, baseOffset, OffsetEntrySize); err != nil {
		return nil, err
	}
	return x, nil
}

// Append adds an entry saying that offset is in the batch at position.
// offset must be greater than the last entry's (else ErrOutOfOrder), not
// below the base offset (ErrOutOfOrder) and at most 2^32-1 above it (else an
// error wrapping ErrFull, so that the log rolls). It returns ErrFull when
// the index has no room and ErrReadOnly when it is sealed.
//
// The entry is stored in the mapping with plain stores, then published with
// an atomic store of the entry count: concurrent readers see it whole or not
// at all.
func (x *OffsetIndex) Append(offset int64, position uint32) error {
	if err := x.writableCheck(); err != nil {
		return err
	}
	n := x.count()
	if n > 0 {
		if last, _ := x.entry(n - 1); offset <= last {
			return fmt.Errorf("%w: %s: offset %d after %d", ErrOutOfOrder, x.path, offset, last)
		}
	}
	rel, err := x.relative(offset)
	if err != nil {
		return err
	}
	b, err := x.freeSlot(n)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(b[offsetRelOff:], rel)
	binary.BigEndian.PutUint32(b[offsetPosOff:], position)
	x.publish(n + 1)
	return nil
}

// Lookup returns the entry with the largest offset <= target, or
// (BaseOffset(), 0) when there is none: the caller scans the .log from
// position until it reaches target. Safe concurrently with Append.
func (x *OffsetIndex) Lookup(target int64) (offset int64, position uint32) {
	i := x.lastOffsetAtMost(x.count(), offsetRelOff, target)
	if i < 0 {
		return x.base, 0
	}
	return x.entry(i)
}

// Entry returns entry i, 0 <= i < Entries(). Safe concurrently with Append.
func (x *OffsetIndex) Entry(i int) (offset int64, position uint32) {
	checkIndex(i, x.count())
	return x.entry(i)
}

func (x *OffsetIndex) entry(i int) (int64, uint32) {
	b := x.slot(i)
	return x.base + int64(binary.BigEndian.Uint32(b[offsetRelOff:])), binary.BigEndian.Uint32(b[offsetPosOff:])
}

// LastEntry returns the last entry, or (BaseOffset(), 0, false) when the
// index is empty. Safe concurrently with Append.
func (x *OffsetIndex) LastEntry() (offset int64, position uint32, ok bool) {
	n := x.count()
	if n == 0 {
		return x.base, 0, false
	}
	offset, position = x.entry(n - 1)
	return offset, position, true
}

// TruncateTo drops every entry whose offset is >= offset. On a writable
// index the dropped entries are zeroed; on a sealed one the file is trimmed
// by the next Seal or Close (or Unseal). Readers must be excluded. A no-op
// on an index opened with OpenOffsetIndexReadOnly.
func (x *OffsetIndex) TruncateTo(offset int64) {
	x.truncateOffsets(offsetRelOff, offset)
}

// Check verifies every entry: offsets strictly increasing and representable,
// positions non-decreasing. Failures wrap ErrCorrupt and name the file.
func (x *OffsetIndex) Check() error {
	n := x.count()
	var prevRel, prevPos uint32
	for i := range n {
		b := x.slot(i)
		rel := binary.BigEndian.Uint32(b[offsetRelOff:])
		pos := binary.BigEndian.Uint32(b[offsetPosOff:])
		if err := x.checkRelative(i, rel); err != nil {
			return err
		}
		if i > 0 && rel <= prevRel {
			return x.corrupt(i, "offset %d not greater than the previous %d", x.base+int64(rel), x.base+int64(prevRel))
		}
		if i > 0 && pos < prevPos {
			return x.corrupt(i, "position %d below the previous %d", pos, prevPos)
		}
		prevRel, prevPos = rel, pos
	}
	return nil
}
