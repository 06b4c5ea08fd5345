package log

import (
	"errors"
	"fmt"
	"math"

	"github.com/raftlog/raftlog/index"
	"github.com/raftlog/raftlog/log/vfs"
)

type pendingBatch struct {
	buf, start, size int
	base, last       int64
	maxTs            int64
	records          int32
}

// AppendInfo describes what an append wrote.
type AppendInfo struct {
	BaseOffset int64 // offset of the first record written
	LastOffset int64 // offset of the last record written
	Batches    int
	Records    int64
	Bytes      int64
}

// AppendValidated appends the batches held in bufs (each buffer holds
// whole batches that SplitBatches or ValidateBatch accepted): it assigns
// them offsets from the log end by rewriting baseOffset, stamps
// partitionLeaderEpoch with leaderEpoch (both outside the CRC, so nothing
// is re-encoded: the buffers are changed in place), and writes them with
// one vectored write per run of batches that fit the active segment. A
// negative leaderEpoch keeps the epoch each batch already carries (a Raft
// log whose batches carry their entries' terms). The batches are not
// checked again: only a length that runs past its buffer, or past
// MaxBatchBytes, stops the append before anything is written.
func (l *Log) AppendValidated(bufs [][]byte, leaderEpoch int32) (AppendInfo, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.appendLocked(bufs, true, leaderEpoch)
}

// AppendAssigned appends validated batches whose offsets are already
// assigned (a replica replaying a snapshot stream): the first must start
// at the log end offset and each must follow the one before. Bytes are
// written unchanged.
func (l *Log) AppendAssigned(bufs ...[]byte) (AppendInfo, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.appendLocked(bufs, false, 0)
}

func (l *Log) appendLocked(bufs [][]byte, assign bool, epoch int32) (AppendInfo, error) {
	if l.closed {
		return AppendInfo{}, ErrClosed
	}
	if l.werr != nil {
		return AppendInfo{}, l.werr
	}
	active := l.segs[len(l.segs)-1]
	next := active.next.Load()
	info := AppendInfo{BaseOffset: next}
	l.pending = l.pending[:0]
	for bi, p := range bufs {
		for at := 0; at < len(p); {
			size, err := frameSize(p[at:], l.cfg.MaxBatchBytes)
			if err != nil {
				return AppendInfo{}, fmt.Errorf("log: batch %d: %w", len(l.pending), err)
			}
			b := Batch(p[at : at+size])
			if assign {
				b.SetBaseOffset(next)
				if epoch >= 0 {
					b.SetLeaderEpoch(epoch)
				}
			} else if b.BaseOffset() != next {
				return AppendInfo{}, fmt.Errorf("%w: batch at %d, expected %d", ErrOffsetMismatch, b.BaseOffset(), next)
			}
			last := b.LastOffset()
			if last < next || last == math.MaxInt64 {
				return AppendInfo{}, fmt.Errorf("log: batch %d: %w: offsets overflow", len(l.pending), ErrCorruptBatch)
			}
			l.pending = append(l.pending, pendingBatch{buf: bi, start: at, size: size, base: next, last: last, maxTs: b.MaxTimestamp(), records: b.RecordCount()})
			next = last + 1
			at += size
			info.Records += int64(b.RecordCount())
			info.Bytes += int64(size)
		}
	}
	if len(l.pending) == 0 {
		return AppendInfo{}, fmt.Errorf("log: %w: no batches", ErrCorruptBatch)
	}
	info.Batches = len(l.pending)
	info.LastOffset = next - 1
	if err := l.writePending(bufs); err != nil {
		return AppendInfo{}, err
	}
	l.unflushedMsgs += info.Records
	if l.cfg.FlushMessages > 0 && l.unflushedMsgs >= l.cfg.FlushMessages {
		if err := l.flushLocked(); err != nil {
			return AppendInfo{}, err
		}
	}
	return info, nil
}

// writePending writes l.pending into the active segment, rolling when a
// batch would not fit.
func (l *Log) writePending(bufs [][]byte) error {
	interval := l.cfg.IndexIntervalBytes
	for i := 0; i < len(l.pending); {
		seg := l.segs[len(l.segs)-1]
		if l.mustRoll(seg, &l.pending[i], 0, 0) {
			if err := l.roll(l.pending[i].base); err != nil {
				return err
			}
			continue
		}
		// The run [i, j) goes into seg.
		runBytes, entries := int64(0), 0
		since := seg.sinceIndex
		j := i
		for j < len(l.pending) {
			pb := &l.pending[j]
			if j > i && l.mustRoll(seg, pb, runBytes, entries) {
				break
			}
			if since >= interval && seg.size.Load()+runBytes > 0 {
				entries++
				since = 0
			}
			since += pb.size
			runBytes += int64(pb.size)
			j++
		}
		l.iov = l.iov[:0]
		for k := i; k < j; k++ {
			pb := &l.pending[k]
			p := bufs[pb.buf][pb.start : pb.start+pb.size]
			if n := len(l.iov); n > 0 && k > i && l.pending[k-1].buf == pb.buf {
				prev := l.iov[n-1]
				l.iov[n-1] = prev[:len(prev)+pb.size] // contiguous in the same buffer
			} else {
				l.iov = append(l.iov, p)
			}
		}
		pos := seg.size.Load()
		start := pos
		if err := vfs.WriteVecAt(seg.f, l.iov, pos); err != nil {
			l.stop(fmt.Errorf("log: write %s at %d: %w", seg.logPath, pos, err))
			return l.werr
		}
		seg.markWritten()
		for k := i; k < j; k++ {
			pb := &l.pending[k]
			b := Batch(bufs[pb.buf][pb.start : pb.start+pb.size])
			if err := seg.observe(b, pos, interval); err != nil && !errors.Is(err, index.ErrFull) {
				l.stop(fmt.Errorf("log: index %s: %w", seg.logPath, err))
				return l.werr
			}
			pos += int64(pb.size)
		}
		// Publish: readers see the run only now.
		seg.size.Store(pos)
		seg.next.Store(l.pending[j-1].last + 1)
		l.writeBehind(seg, start, pos)
		i = j
	}
	return nil
}
