package log

import (
	"errors"
	"os"

	"github.com/raftlog/raftlog/log/vfs"
)

// writeBehindSlots bounds the write-behinds running at once in the
// process: on a device that cannot keep up, each waits in the kernel for
// room in its queue, and a thread per partition waiting there is what the
// bound prevents. One that finds no slot is skipped, never waited for.
var writeBehindSlots = make(chan struct{}, 4)

// writeBehindPage aligns write-behind ranges: the page holding the end
// of the log is written again by the next append, so it is left dirty.
const writeBehindPage = 4096

// writeBehind starts, in the background, the writeback of seg's .log up
// to end (rounded down to a page) once WriteBehindBytes have gathered
// since the last start, unless one is still running (the next append's
// covers this range too). start is where the append that ended at end
// began: what a segment held when it was opened is not written behind.
// It is what keeps the kernel's writeback of the log in small steps: left
// alone, it writes nothing until the dirty pages pass
// vm.dirty_background_ratio (gigabytes), and then all at once, while ext4
// allocates their blocks under the lock that appends to the same file
// take. Under wmu.
func (l *Log) writeBehind(seg *segment, start, end int64) {
	if l.cfg.WriteBehindBytes < 0 || l.writeBehindFailed.Load() {
		return
	}
	wb, ok := seg.f.(vfs.Writebacker)
	if !ok {
		return
	}
	if seg.behind < 0 || seg.behind > start { // opened, or truncated since
		seg.behind = start &^ (writeBehindPage - 1)
	}
	to := end &^ (writeBehindPage - 1)
	if to-seg.behind < l.cfg.WriteBehindBytes || !seg.writingBack.CompareAndSwap(false, true) {
		return
	}
	select {
	case writeBehindSlots <- struct{}{}:
	default: // as many run as may: a later append covers this range
		seg.writingBack.Store(false)
		return
	}
	from := seg.behind
	seg.behind = to
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		defer func() { <-writeBehindSlots }()
		defer seg.writingBack.Store(false)
		// A segment closed meanwhile fails with os.ErrClosed. Any other
		// error (a file system without the call, an I/O error the next
		// fsync reports too) turns the write-behind off for this log,
		// which costs latency, not data: said once, not at every MiB.
		if err := wb.StartWriteback(from, to-from); err != nil && !errors.Is(err, os.ErrClosed) && !l.writeBehindFailed.Swap(true) {
			l.logger.Warn("write-behind failed; the kernel writes this log back on its own from now on", "file", seg.logPath, "error", err)
		}
	}()
}
