// Package index implements the sparse indexes that sit beside every log
// segment, in the manner of Kafka's OffsetIndex and TimeIndex.
//
// A segment's .log file holds record batches back to back. Finding the batch
// that holds an offset, or the first batch at or after a timestamp, by
// scanning the whole file would be slow, so every index.interval.bytes of
// log the segment records one small fixed-size entry:
//
//   - the offset index (.index) maps an offset to the physical position of
//     its batch in the .log file (OffsetIndex, format in offset.go);
//   - the time index (.timeindex) maps a timestamp to the offset from which
//     records at or after that timestamp may start (TimeIndex, format in
//     time.go).
//
// A lookup is a binary search over the entries; it yields a starting point,
// and the caller scans forward from there through at most one index
// interval of log.
//
// # Storage
//
// Both files are arrays of fixed-size big-endian entries with no header,
// memory-mapped with github.com/edsrzf/mmap-go. Offsets are stored relative
// to the segment's base offset (4 bytes), so a segment cannot span more than
// 2^32 offsets.
//
// The index of the active segment is writable: its file is preallocated
// (ftruncate, so the unused tail is sparse and reads as zero) to maxBytes
// rounded down to a whole number of entries, and it is mapped read-write.
// Appends are plain stores into the mapping, without a system call. When the
// segment is sealed (rolled), the mapping is flushed, the file is trimmed to
// exactly entries × entry size, fsynced and mapped again read-only. Close
// trims a writable index the same way, so a cleanly closed index file is
// always exactly as long as its entries.
//
// An index holds no file descriptor at rest: the file is opened for the
// operations that change its length, its mapping or its durability, and
// closed after them, since a mapping outlives its descriptor.
//
// The file holds no entry count. On open the count is the file size divided
// by the entry size. After a crash, a writable index may still be at its
// preallocated size; because an all-zero entry is never valid after the
// first one (offsets increase), Open drops trailing all-zero entries, and
// the first one too when the whole file is zero. The log should still run
// Check, and truncate or rebuild the index against the recovered log (the
// kernel may have written back entries for log bytes that never reached the
// disk).
//
// # Inspect-only opening
//
// OpenOffsetIndexReadOnly and OpenTimeIndexReadOnly open an index for
// diagnostics, possibly the active segment's index of a running broker
// that has it mapped read-write. They never create, write, preallocate,
// trim, msync or fsync the file: it is opened O_RDONLY and mapped
// PROT_READ at its current size, and the entries are counted as on a
// normal open (trailing all-zero entries dropped). A trailing partial
// entry is ignored instead of being reported. Such an index is a snapshot
// of the entries present at open: appends made afterwards by the writer are
// not seen. The mutating methods refuse: Append, MaybeAppend, Seal,
// Unseal, Sync and Delete return an error wrapping ErrReadOnly and change
// nothing; TruncateTo and Reset, which return no error, do nothing. Close
// (and Abort) only unmap it.
//
// The inspecting process, not the writer, is at risk if the writer shrinks
// the file while it is mapped (Seal or Close after a TruncateTo, Reset):
// touching the cut-off pages raises SIGBUS in the inspector.
//
// # Concurrency
//
// One goroutine, the owner, appends (Append, MaybeAppend). Any number of
// goroutines may call Lookup, Entry, Entries, LastEntry, IsFull, SizeBytes
// and BaseOffset concurrently with the appends: an append stores the entry
// bytes first and then publishes the new entry count with an atomic store;
// readers load the count atomically and read only that many entries.
//
// TruncateTo, Reset, Seal, Unseal, Close and Delete are called by the owner
// only, and the caller must exclude readers while they run (for example
// with a lock that readers hold shared): they shrink the count, zero
// entries, or replace the mapping. Sync is called by the owner too, but
// readers may run alongside it.
//
// # Errors
//
// A damaged file never causes a panic: sanity failures are returned as
// errors wrapping ErrCorrupt that name the file. Entry with an index outside
// [0, Entries()) is a programming error and panics like a slice access.
package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"

	"github.com/edsrzf/mmap-go"
)

// DefaultMaxBytes is the default preallocated size of an index file
// (Kafka's segment.index.bytes).
const DefaultMaxBytes = 10 << 20

var (
	// ErrFull is returned by an append when the index has no free entry, or
	// when the offset is too far above the base offset to be stored
	// relative to it. Either way the log rolls the segment.
	ErrFull = errors.New("index: full")
	// ErrOutOfOrder is returned by an append whose offset is not greater
	// than the last entry's (the time index accepts an equal offset and
	// skips it), or is below the base offset.
	ErrOutOfOrder = errors.New("index: offset not increasing")
	// ErrCorrupt is wrapped by every sanity-check failure.
	ErrCorrupt = errors.New("index: corrupt")
	// ErrReadOnly is returned by an append to a sealed index, and by every
	// mutating call on an index opened with OpenOffsetIndexReadOnly or
	// OpenTimeIndexReadOnly.
	ErrReadOnly = errors.New("index: read-only")
)

// warmBytes is the tail of the index that lookups search first. Most
// lookups (consumers near the head, replication) target recent entries;
// searching the last few pages first keeps the pages they touch in the
// page cache instead of walking a fresh path from the middle of the file
// each time (the same trick as Kafka's "warm section").
const warmBytes = 8192

// mmapFile is the storage shared by OffsetIndex and TimeIndex: a file of
// fixed-size entries, mapped into memory, with an atomically published
// entry count. It owns opening, preallocation, mapping, remapping,
// trimming and closing; the index types add only the entry encoding.
//
// Its exported methods are promoted to both index types.
type mmapFile struct {
	path      string
	base      int64
	entrySize int
	maxBytes  int // preallocation size, a multiple of entrySize

	// f is the open file while an operation that needs it runs (open,
	// Seal, Unseal, Sync, Close), nil otherwise: a mapping outlives its
	// descriptor, so an index holds none at rest, and a node of thousands
	// of partitions does not run out of them.
	f        *os.File
	data     mmap.MMap // nil when the file is empty or closed
	size     int64     // length of the file on disk
	writable bool      // appends allowed: preallocated and mapped read-write
	rw       bool      // data is a read-write mapping
	inspect  bool      // opened inspect-only: the file is never modified
	closed   bool

	n atomic.Int64 // valid entries; stored after their bytes
}

// open opens or creates path and maps it; see OpenOffsetIndex.
func (m *mmapFile) open(path string, base int64, entrySize, maxBytes int, writable bool) error {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	m.path, m.base, m.entrySize = path, base, entrySize
	m.maxBytes = maxBytes / entrySize * entrySize
	if m.maxBytes == 0 {
		return fmt.Errorf("index: %s: maxBytes %d is smaller than one %d-byte entry", path, maxBytes, entrySize)
	}
	if base < 0 {
		return fmt.Errorf("index: %s: negative base offset %d", path, base)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	m.f = f
	defer m.closeFile()
	if err := m.load(writable); err != nil {
		m.unmap()
		m.closed = true
		return err
	}
	return nil
}

// openFile opens the index file for an operation that needs it; the
// caller defers closeFile. An inspect-only index opens it read-only.
func (m *mmapFile) openFile() error {
	flag := os.O_RDWR
	if m.inspect {
		flag = os.O_RDONLY
	}
	f, err := os.OpenFile(m.path, flag, 0)
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	m.f = f
	return nil
}

// closeFile closes the file openFile opened. Nothing was written through
// the descriptor that a close could fail to keep (writes go through the
// mapping, and the operations that need durability fsync first).
func (m *mmapFile) closeFile() {
	if m.f != nil {
		_ = m.f.Close()
		m.f = nil
	}
}

// openReadOnly opens path inspect-only; see OpenOffsetIndexReadOnly and
// the package documentation. Nothing here or in any later call on m writes
// to the file.
func (m *mmapFile) openReadOnly(path string, base int64, entrySize int) error {
	m.path, m.base, m.entrySize = path, base, entrySize
	m.inspect = true
	if base < 0 {
		return fmt.Errorf("index: %s: negative base offset %d", path, base)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	m.f = f
	defer m.closeFile()
	if err := m.loadReadOnly(); err != nil {
		m.unmap()
		m.closed = true
		return err
	}
	return nil
}

func (m *mmapFile) loadReadOnly() error {
	st, err := m.f.Stat()
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("index: %s: not a regular file", m.path)
	}
	m.size = st.Size()
	if m.size > int64(maxInt) {
		return fmt.Errorf("%w: %s: size %d is too large", ErrCorrupt, m.path, m.size)
	}
	if err := m.remap(int(m.size), false); err != nil {
		return err
	}
	// A trailing partial entry (a file being extended or cut) is ignored.
	m.n.Store(int64(m.usedEntries(int(m.size) / m.entrySize)))
	return nil
}

// inspectOnly reports the refusal of a mutating call on an index opened
// inspect-only, or nil.
func (m *mmapFile) inspectOnly(op string) error {
	if !m.inspect {
		return nil
	}
	return fmt.Errorf("%w: %s: %s on an index opened inspect-only", ErrReadOnly, m.path, op)
}

func (m *mmapFile) load(writable bool) error {
	st, err := m.f.Stat()
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	m.size = st.Size()
	if m.size%int64(m.entrySize) != 0 {
		return fmt.Errorf("%w: %s: size %d is not a multiple of the %d-byte entry", ErrCorrupt, m.path, m.size, m.entrySize)
	}
	if m.size > int64(maxInt) {
		return fmt.Errorf("%w: %s: size %d is too large", ErrCorrupt, m.path, m.size)
	}
	stored := int(m.size) / m.entrySize
	length := int(m.size)
	if writable {
		length = m.capacityFor(stored)
		if err := m.truncate(int64(length)); err != nil {
			return err
		}
	}
	if err := m.remap(length, writable); err != nil {
		return err
	}
	m.writable = writable
	m.n.Store(int64(m.usedEntries(stored)))
	return nil
}

// usedEntries returns how many of the first stored entries are real: the
// trailing all-zero ones are preallocated space that a crash left untrimmed.
func (m *mmapFile) usedEntries(stored int) int {
	end := stored * m.entrySize
	i := end - 1
	for i >= 0 && m.data[i] == 0 {
		i--
	}
	if i < 0 {
		// All zero. One zero entry is a legitimate clean index (base offset
		// at position 0); more than one can only be unused space.
		if stored == 1 {
			return 1
		}
		return 0
	}
	return i/m.entrySize + 1
}

// capacityFor is the preallocated length of a writable file holding n
// entries: maxBytes, or more when an older, larger configuration left more
// entries than that.
func (m *mmapFile) capacityFor(n int) int {
	return max(m.maxBytes, n*m.entrySize)
}

// truncate sets the file's length.
func (m *mmapFile) truncate(size int64) error {
	if size == m.size {
		return nil
	}
	if err := m.f.Truncate(size); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	m.size = size
	return nil
}

// remap replaces the mapping with one of the first length bytes of the
// file. On failure the old mapping stays in place. A zero length is not
// mapped (mmap rejects it): data becomes nil.
func (m *mmapFile) remap(length int, writable bool) error {
	var next mmap.MMap
	if length > 0 {
		prot := mmap.RDONLY
		if writable {
			prot = mmap.RDWR
		}
		var err error
		next, err = mmap.MapRegion(m.f, length, prot, 0, 0)
		if err != nil {
			return fmt.Errorf("index: mmap %s: %w", m.path, err)
		}
	}
	old := m.data
	m.data, m.rw = next, writable && next != nil
	if old != nil {
		if err := old.Unmap(); err != nil {
			return fmt.Errorf("index: munmap %s: %w", m.path, err)
		}
	}
	return nil
}

func (m *mmapFile) errClosed() error {
	return fmt.Errorf("index: %s: %w", m.path, fs.ErrClosed)
}

// count loads the published number of entries.
func (m *mmapFile) count() int { return int(m.n.Load()) }

// slot returns the bytes of entry i.
func (m *mmapFile) slot(i int) []byte {
	o := i * m.entrySize
	return m.data[o : o+m.entrySize : o+m.entrySize]
}

// checkIndex panics unless 0 <= i < n.
func checkIndex(i, n int) {
	if uint(i) >= uint(n) {
		panic(fmt.Sprintf("index: entry %d out of range [0,%d)", i, n))
	}
}

// writableCheck reports why the index cannot take appends, if it cannot.
func (m *mmapFile) writableCheck() error {
	if m.closed {
		return m.errClosed()
	}
	if err := m.inspectOnly("append"); err != nil {
		return err
	}
	if !m.writable {
		return fmt.Errorf("%w: %s", ErrReadOnly, m.path)
	}
	return nil
}

// relative converts offset to its stored form, reporting ErrOutOfOrder
// below the base offset and ErrFull beyond what 32 bits can express.
func (m *mmapFile) relative(offset int64) (uint32, error) {
	switch {
	case offset < m.base:
		return 0, fmt.Errorf("%w: %s: offset %d below base offset %d", ErrOutOfOrder, m.path, offset, m.base)
	case offset-m.base > maxUint32:
		return 0, fmt.Errorf("%w: %s: offset %d is more than 2^32-1 above base offset %d", ErrFull, m.path, offset, m.base)
	}
	return uint32(offset - m.base), nil
}

// freeSlot returns the slot for entry n, or ErrFull.
func (m *mmapFile) freeSlot(n int) ([]byte, error) {
	if (n+1)*m.entrySize > len(m.data) {
		return nil, fmt.Errorf("%w: %s: %d entries", ErrFull, m.path, n)
	}
	return m.slot(n), nil
}

// publish makes n entries visible to readers. The entry bytes must have
// been stored already.
func (m *mmapFile) publish(n int) { m.n.Store(int64(n)) }

// shrink drops the entries from n on. In a writable index their bytes are
// zeroed, so that a crash before the next trim does not bring them back.
// A no-op on an inspect-only index.
func (m *mmapFile) shrink(n int) {
	old := m.count()
	if m.closed || m.inspect || n >= old {
		return
	}
	m.publish(n)
	if m.writable {
		clear(m.data[n*m.entrySize : old*m.entrySize])
	}
}

// lastAtMost returns the largest i < n whose key is <= t, or -1 when no
// key is. The key of an entry is the big-endian field at byte off: an int64
// when wide, else a uint32. Keys must be non-decreasing (on a corrupt index
// the answer is wrong but in range). The warm tail of the index is tried
// first.
func (m *mmapFile) lastAtMost(n, off int, wide bool, t int64) int {
	data, es := m.data, m.entrySize
	key := func(i int) int64 {
		p := i*es + off
		if wide {
			return int64(binary.BigEndian.Uint64(data[p : p+8]))
		}
		return int64(binary.BigEndian.Uint32(data[p : p+4]))
	}
	if n == 0 || key(0) > t {
		return -1
	}
	lo, hi := 0, n-1 // key(lo) <= t; the answer is in [lo, hi]
	if w := n - 1 - warmBytes/es; w > 0 && key(w) <= t {
		lo = w
	}
	for lo < hi {
		mid := int(uint(lo+hi+1) >> 1)
		if key(mid) <= t {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// lastOffsetAtMost returns the largest i < n whose offset, stored relative
// to the base offset in the 4-byte field at byte off, is <= target, or -1.
func (m *mmapFile) lastOffsetAtMost(n, off int, target int64) int {
	if target < m.base {
		return -1
	}
	return m.lastAtMost(n, off, false, target-m.base)
}

// truncateOffsets drops the entries whose offset, stored in the 4-byte
// field at byte off, is >= offset.
func (m *mmapFile) truncateOffsets(off int, offset int64) {
	if m.closed || m.inspect {
		return
	}
	keep := 0
	if offset > m.base {
		keep = m.lastOffsetAtMost(m.count(), off, offset-1) + 1
	}
	m.shrink(keep)
}

// corrupt builds a sanity-check error for entry i.
func (m *mmapFile) corrupt(i int, format string, args ...any) error {
	return fmt.Errorf("%w: %s: entry %d: %s", ErrCorrupt, m.path, i, fmt.Sprintf(format, args...))
}

// checkRelative reports an entry whose offset overflows int64.
func (m *mmapFile) checkRelative(i int, rel uint32) error {
	if int64(rel) > maxInt64-m.base {
		return m.corrupt(i, "relative offset %d overflows base offset %d", rel, m.base)
	}
	return nil
}

// Entries returns the number of entries. Safe concurrently with appends.
func (m *mmapFile) Entries() int { return m.count() }

// IsFull reports whether an append would fail with ErrFull for lack of
// room. A sealed or closed index is always full.
func (m *mmapFile) IsFull() bool {
	if m.closed || !m.writable {
		return true
	}
	return (m.count()+1)*m.entrySize > len(m.data)
}

// BaseOffset returns the base offset of the segment the index belongs to.
func (m *mmapFile) BaseOffset() int64 { return m.base }

// SizeBytes returns the bytes taken by the entries: Entries() × entry size.
func (m *mmapFile) SizeBytes() int64 { return int64(m.count()) * int64(m.entrySize) }

// Path returns the file's path.
func (m *mmapFile) Path() string { return m.path }

// Reset drops every entry. Readers must be excluded. A no-op on an
// inspect-only index.
func (m *mmapFile) Reset() { m.shrink(0) }

// Seal makes the index read-only and exactly as long as its entries:
// msync, trim the file to Entries() × entry size, fsync it, and map it
// again read-only (an empty file stays unmapped). Sealing a sealed index
// trims it again if a TruncateTo or Reset shortened it. After Seal,
// appends fail with ErrReadOnly; lookups keep working. Readers must be
// excluded. On an inspect-only index Seal fails with ErrReadOnly.
func (m *mmapFile) Seal() error { return m.seal(true) }

// SealNoSync is Seal without the msync and the fsync: the entries are
// written through the page cache, and made durable by a later Sync. An
// fsync waits on ext4 for a journal commit, and with it for the data of
// every file being written back: hundreds of milliseconds under load,
// which a segment roll must not make appends wait for. SyncFile makes it
// durable.
func (m *mmapFile) SealNoSync() error { return m.seal(false) }

func (m *mmapFile) seal(sync bool) error {
	if m.closed {
		return m.errClosed()
	}
	if err := m.inspectOnly("Seal"); err != nil {
		return err
	}
	if err := m.openFile(); err != nil {
		return err
	}
	defer m.closeFile()
	length := m.count() * m.entrySize
	wasWritable := m.writable
	// Without sync, the dirty pages of the writable mapping pass to the
	// page cache when it is unmapped (remap below), and Sync writes them.
	if wasWritable && sync {
		if err := m.data.Flush(); err != nil {
			return fmt.Errorf("index: msync %s: %w", m.path, err)
		}
	}
	resized := m.size != int64(length)
	// The old mapping stays valid over the entries while the file shrinks
	// under it; from here nothing may write past them.
	if err := m.truncate(int64(length)); err != nil {
		return err
	}
	m.writable = false
	if sync && (wasWritable || resized) {
		if err := m.f.Sync(); err != nil {
			return fmt.Errorf("index: fsync %s: %w", m.path, err)
		}
	}
	if m.rw || len(m.data) != length {
		return m.remap(length, false)
	}
	return nil
}

// Unseal makes a sealed index writable again (when a suffix truncation
// makes its segment the active one): preallocate the file to maxBytes
// again and map it read-write. A no-op on a writable index. Readers must
// be excluded. On an inspect-only index Unseal fails with ErrReadOnly.
func (m *mmapFile) Unseal() error {
	if m.closed {
		return m.errClosed()
	}
	if err := m.inspectOnly("Unseal"); err != nil {
		return err
	}
	if m.writable {
		return nil
	}
	if err := m.openFile(); err != nil {
		return err
	}
	defer m.closeFile()
	n := m.count()
	length := n * m.entrySize
	// Cut stale entries (left by TruncateTo on the sealed index) so that
	// the free slots read as zero, then preallocate.
	if err := m.truncate(int64(length)); err != nil {
		return err
	}
	if err := m.truncate(int64(m.capacityFor(n))); err != nil {
		return err
	}
	if err := m.remap(m.capacityFor(n), true); err != nil {
		return err
	}
	m.writable = true
	return nil
}

// Sync writes the mapping back (msync) and fsyncs the file. On an
// inspect-only index Sync fails with ErrReadOnly.
func (m *mmapFile) Sync() error {
	if m.closed {
		return m.errClosed()
	}
	if err := m.inspectOnly("Sync"); err != nil {
		return err
	}
	if err := m.openFile(); err != nil {
		return err
	}
	defer m.closeFile()
	if m.writable && m.data != nil {
		if err := m.data.Flush(); err != nil {
			return fmt.Errorf("index: msync %s: %w", m.path, err)
		}
	}
	if err := m.f.Sync(); err != nil {
		return fmt.Errorf("index: fsync %s: %w", m.path, err)
	}
	return nil
}

// SyncFile fsyncs the index file and nothing else: it reads none of the
// index's state, so it is safe beside lookups and beside a Seal, Unseal
// or append on another goroutine (entries written through the shared
// mapping are in the page cache as soon as written, and the fsync writes
// what is there). It opens the file by its path for the fsync; a file
// deleted meanwhile needs none. It makes an index sealed with SealNoSync
// durable.
func (m *mmapFile) SyncFile() error {
	f, err := os.Open(m.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("index: fsync %s: %w", m.path, err)
	}
	return nil
}

// Close flushes a writable index, unmaps it, trims the file to its
// entries and closes it. Closing a closed index does nothing. Readers must
// be excluded; afterwards the index has no entries. An inspect-only index
// is only unmapped and closed.
func (m *mmapFile) Close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	length := int64(m.count()) * int64(m.entrySize)
	var errs []error
	if m.inspect {
		return m.unmap()
	}
	if m.writable && m.data != nil {
		if err := m.data.Flush(); err != nil {
			errs = append(errs, fmt.Errorf("index: msync %s: %w", m.path, err))
		}
	}
	if err := m.unmap(); err != nil {
		errs = append(errs, err)
	}
	if length != m.size {
		if err := m.openFile(); err != nil {
			errs = append(errs, err)
		} else {
			if err := m.truncate(length); err != nil {
				errs = append(errs, err)
			}
			m.closeFile()
		}
	}
	return errors.Join(errs...)
}

// Abort unmaps and closes the index without msync or trimming: what a
// crash leaves (the file stays at its preallocated size).
func (m *mmapFile) Abort() {
	if m.closed {
		return
	}
	m.closed = true
	_ = m.unmap()
}

// Delete unmaps and closes the index (without trimming) and removes its
// file. A missing file is not an error. Readers must be excluded. On an
// inspect-only index Delete fails with ErrReadOnly and leaves the index
// open and the file in place.
func (m *mmapFile) Delete() error {
	if err := m.inspectOnly("Delete"); err != nil {
		return err
	}
	var errs []error
	if !m.closed {
		m.closed = true
		if err := m.unmap(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(m.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("index: %w", err))
	}
	return errors.Join(errs...)
}

// unmap drops the mapping and the entries.
func (m *mmapFile) unmap() error {
	m.n.Store(0)
	m.writable, m.rw = false, false
	if m.data == nil {
		return nil
	}
	err := m.data.Unmap()
	m.data = nil
	if err != nil {
		return fmt.Errorf("index: munmap %s: %w", m.path, err)
	}
	return nil
}

const (
	maxUint32 = 1<<32 - 1
	maxInt64  = 1<<63 - 1
	maxInt    = int(^uint(0) >> 1)
	minInt64  = -1 << 63
)
