package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"path/filepath"
	"sort"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log/vfs"
)

// entryFile holds the Raft entries of a partition that take no Kafka
// offset: Raft's own (configuration, no-op, barrier) and raftlog's
// commands (the vote guard's rejoin marker, DeleteRecords). The produced
// batches, the only entries that take offsets, stay in the partition log,
// so that its offsets are dense from 0 as in a Kafka broker; this file is
// to the partition what Kafka's leader-epoch-checkpoint is to a Kafka
// partition, a small file beside the log saying where each leader's term
// begins, with Raft's configurations besides.
//
// Each record names its Raft index and the offset it sits at: the log
// end when it was stored, so that the first produced batch after it
// starts at that offset. openLogStore merges the two by index and offset
// (a record at offset X comes before the batch at X).
//
// Every append is fsynced before the store writes any later entry to the
// log, so a record can only be lost in a crash together with everything
// stored after it: a torn tail of this file never leaves a produced batch
// behind that a lost record came before. It is written once per leader
// election and configuration change, never per produced batch.
//
//	file: header, then records
//	header  offset  size  field
//	             0     4  magic "RLRE"
//	             4     4  version (1)
//	record  offset  size  field
//	             0     4  body length L
//	             4     4  CRC-32C of the body
//	             8     L  body:
//	                      uint64 Raft index
//	                      uint64 term
//	                      int64  offset (the log end when stored)
//	                      byte   raft.LogType
//	                      int64  AppendedAt, Unix nanoseconds (0: none)
//	                      uvarint len(Extensions) | Extensions
//	                      rest   Data
//
// Integers are big-endian. Frozen.
//
// The file is opened for each write and closed after it (writes are
// rare), so that a node of thousands of partitions holds no descriptor
// for it.
type entryFile struct {
	fs   vfs.FS
	path string
	// size is the end of the last whole record: where the next is written.
	size int64
	// ents are the records in index order; ents[i].pos is where each
	// starts. Those below the first entry Raft holds are dropped from
	// memory at once and from the file when dropped bytes outweigh live
	// ones (dropBefore).
	ents []sideEntry
	// dead is the bytes of records dropped from memory still in the file.
	dead int64
}

// sideEntry is one record of the entries file.
type sideEntry struct {
	raft.Log
	offset int64 // the Kafka offset it sits at
	pos    int64 // where its record starts in the file
}

const (
	entryFileName    = "raft.entries"
	entryFileVersion = 1
	entryFileHeader  = 8
	entryRecordHead  = 8
	// entryBodyMin is a body's fixed part: index, term, offset, then an
	// entry value's (appendEntryValue).
	entryBodyMin = 8 + 8 + 8 + entryValueMin
	// entryCompactMin is the dropped bytes below which dropBefore never
	// rewrites the file.
	entryCompactMin = 64 << 10
)

var entryFileMagic = [4]byte{'R', 'L', 'R', 'E'}

// errEntryFileCorrupt marks an entries file that is damaged: a bad
// header, a record that passes its CRC but does not decode, or records
// out of order.
var errEntryFileCorrupt = errors.New("replication: entries file corrupt")

// entryFileExists reports whether dir holds an entries file.
func entryFileExists(fsys vfs.FS, dir string) (bool, error) {
	return fsys.Exists(filepath.Join(dir, entryFileName))
}

// openEntryFile opens dir's entries file, creating an empty one (durably)
// when there is none. A torn tail (decodeEntryFile) is cut off: the crash
// that tore it stopped the store before it wrote anything that came after.
func openEntryFile(fsys vfs.FS, dir string) (*entryFile, error) {
	e := &entryFile{fs: fsys, path: filepath.Join(dir, entryFileName)}
	b, err := vfs.ReadFile(fsys, e.path)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(b) < entryFileHeader) {
		// None, or one whose creation a crash cut short (it is written
		// whole and synced before anything is stored): start anew.
		if err := e.rewrite(nil); err != nil {
			return nil, err
		}
		return e, nil
	}
	if err != nil {
		return nil, fmt.Errorf("replication: entries file: %w", err)
	}
	ents, size, err := decodeEntryFile(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errEntryFileCorrupt, e.path, err)
	}
	e.ents, e.size = ents, size
	if size < int64(len(b)) {
		if err := e.cut(size); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// decodeEntryFile decodes a whole entries file: its records and the end
// of the last whole one. The first record cut short or failing its CRC
// starts the torn tail, left out (size says where it began), as the log's
// recovery does with a segment: a crash tears only the last append, and
// what a lost record came before, openLogStore checks (every term's
// entries start with its leader's no-op). A record that passes its CRC
// but does not decode, or is out of index order, is an error.
func decodeEntryFile(b []byte) ([]sideEntry, int64, error) {
	if len(b) < entryFileHeader || [4]byte(b[:4]) != entryFileMagic {
		return nil, 0, errors.New("bad magic")
	}
	if v := binary.BigEndian.Uint32(b[4:8]); v != entryFileVersion {
		return nil, 0, fmt.Errorf("version %d, this build reads %d", v, entryFileVersion)
	}
	var ents []sideEntry
	pos := int64(entryFileHeader)
	for pos < int64(len(b)) {
		rest := b[pos:]
		if len(rest) < entryRecordHead {
			break // torn
		}
		n := int64(binary.BigEndian.Uint32(rest))
		end := pos + entryRecordHead + n
		if n < entryBodyMin || end > int64(len(b)) {
			break // torn
		}
		body := rest[entryRecordHead : entryRecordHead+n]
		if crc32.Checksum(body, crcTable) != binary.BigEndian.Uint32(rest[4:]) {
			break // torn
		}
		se, err := decodeEntryBody(body)
		if err != nil {
			return nil, 0, fmt.Errorf("record at %d: %v", pos, err)
		}
		if k := len(ents); k > 0 && se.Index <= ents[k-1].Index {
			return nil, 0, fmt.Errorf("record at %d: index %d after %d", pos, se.Index, ents[k-1].Index)
		}
		se.pos = pos
		ents = append(ents, se)
		pos = end
	}
	return ents, pos, nil
}

func decodeEntryBody(b []byte) (sideEntry, error) {
	var se sideEntry
	se.Index = binary.BigEndian.Uint64(b)
	se.Term = binary.BigEndian.Uint64(b[8:])
	se.offset = int64(binary.BigEndian.Uint64(b[16:]))
	if err := decodeEntryValue(b[24:], &se.Log); err != nil {
		return sideEntry{}, err
	}
	if se.offset < 0 {
		return sideEntry{}, fmt.Errorf("offset %d", se.offset)
	}
	return se, nil
}

// appendEntryRecord appends the record of se to b.
func appendEntryRecord(b []byte, se *sideEntry) []byte {
	start := len(b)
	b = append(b, make([]byte, entryRecordHead)...)
	b = binary.BigEndian.AppendUint64(b, se.Index)
	b = binary.BigEndian.AppendUint64(b, se.Term)
	b = binary.BigEndian.AppendUint64(b, uint64(se.offset))
	b = appendEntryValue(b, &se.Log)
	body := b[start+entryRecordHead:]
	binary.BigEndian.PutUint32(b[start:], uint32(len(body)))
	binary.BigEndian.PutUint32(b[start+4:], crc32.Checksum(body, crcTable))
	return b
}

// append writes the records of ents (indexes above every record held)
// with one write, and fsyncs them.
func (e *entryFile) append(ents []sideEntry) error {
	if len(ents) == 0 {
		return nil
	}
	if k := len(e.ents); k > 0 && ents[0].Index <= e.ents[k-1].Index {
		return fmt.Errorf("replication: entries file: append of %d after %d", ents[0].Index, e.ents[k-1].Index)
	}
	var b []byte
	at := e.size
	for i := range ents {
		ents[i].pos = at + int64(len(b))
		b = appendEntryRecord(b, &ents[i])
	}
	if err := e.withFile(func(f vfs.File) error {
		_, err := f.WriteAt(b, e.size)
		return err
	}); err != nil {
		return err
	}
	e.size += int64(len(b))
	for _, se := range ents {
		// Copies: the caller's Data may be a buffer it reuses.
		se.Data, se.Extensions = cloneOrNil(se.Data), cloneOrNil(se.Extensions)
		e.ents = append(e.ents, se)
	}
	return nil
}

func cloneOrNil(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// find returns the position in ents of the first record with an index at
// or above index.
func (e *entryFile) find(index uint64) int {
	return sort.Search(len(e.ents), func(i int) bool { return e.ents[i].Index >= index })
}

// get returns the record of entry index.
func (e *entryFile) get(index uint64) (*sideEntry, bool) {
	i := e.find(index)
	if i == len(e.ents) || e.ents[i].Index != index {
		return nil, false
	}
	return &e.ents[i], true
}

// truncateFrom removes the records of entry index and later, durably.
func (e *entryFile) truncateFrom(index uint64) error {
	i := e.find(index)
	if i == len(e.ents) {
		return nil
	}
	if err := e.cut(e.ents[i].pos); err != nil {
		return err
	}
	clear(e.ents[i:])
	e.ents = e.ents[:i]
	return nil
}

// cut truncates the file to size and fsyncs it.
func (e *entryFile) cut(size int64) error {
	if err := e.withFile(func(f vfs.File) error { return f.Truncate(size) }); err != nil {
		return err
	}
	e.size = size
	return nil
}

// withFile opens the file, runs op on it, fsyncs and closes it.
func (e *entryFile) withFile(op func(vfs.File) error) error {
	f, err := e.fs.OpenRW(e.path)
	if err != nil {
		return fmt.Errorf("replication: entries file: %w", err)
	}
	err = op(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("replication: entries file: %w", err)
	}
	return nil
}

// dropBefore forgets the records below index (entries Raft compacted
// away). The file keeps them until they outweigh the records that remain
// and entryCompactMin; then it is rewritten, atomically, without them.
// A crash before the rewrite leaves records below the anchor, which
// openLogStore skips.
func (e *entryFile) dropBefore(index uint64) error {
	i := e.find(index)
	if i == 0 {
		return nil
	}
	if i < len(e.ents) {
		e.dead = e.ents[i].pos - entryFileHeader
	} else {
		e.dead = e.size - entryFileHeader
	}
	e.ents = append(e.ents[:0:0], e.ents[i:]...)
	live := e.size - entryFileHeader - e.dead
	if e.dead < entryCompactMin || e.dead < live {
		return nil
	}
	return e.rewrite(e.ents)
}

// reset removes every record, durably (the store restarts from a
// snapshot).
func (e *entryFile) reset() error { return e.rewrite(nil) }

// rewrite replaces the file, atomically, with one holding ents.
func (e *entryFile) rewrite(ents []sideEntry) error {
	b := append(entryFileMagic[:0:0], entryFileMagic[:]...)
	b = binary.BigEndian.AppendUint32(b, entryFileVersion)
	for i := range ents {
		ents[i].pos = int64(len(b))
		b = appendEntryRecord(b, &ents[i])
	}
	if err := vfs.WriteFileAtomic(e.fs, e.path, b); err != nil {
		return fmt.Errorf("replication: entries file: %w", err)
	}
	e.size, e.dead = int64(len(b)), 0
	e.ents = ents
	return nil
}
