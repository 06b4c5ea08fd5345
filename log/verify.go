package log

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/raftlog/raftlog/index"
	"github.com/raftlog/raftlog/log/vfs"
)

// BatchInfo describes one batch of a segment (for dumps).
type BatchInfo struct {
	Position      int64
	BaseOffset    int64
	LastOffset    int64
	Records       int32
	BaseTimestamp int64
	MaxTimestamp  int64
	Size          int
	LeaderEpoch   int32
	ProducerID    int64
	Codec         int
	Control       bool
	CRCOK         bool
}

// SegmentCheck is what checking a segment against its indexes found.
type SegmentCheck struct {
	Batches      int
	Bytes        int64 // of whole, valid batches
	FileSize     int64
	NextOffset   int64
	IndexEntries int
	TimeEntries  int
	Problems     []string // empty when log and indexes agree
}

type offsetEntries interface {
	Entries() int
	Entry(i int) (int64, uint32)
}

type timeEntries interface {
	Entries() int
	Entry(i int) (int64, int64)
}

// checkSegment walks every batch of a segment, validating it, and checks
// that both indexes agree with what it finds: every offset-index entry
// names the base offset of the batch at its position, and every time-index
// entry (T, O) sits on a batch boundary with every record before O at most
// T. fn, when not nil, sees every batch.
func checkSegment(f vfs.File, size, base int64, oi offsetEntries, ti timeEntries, fn func(BatchInfo)) SegmentCheck {
	res := SegmentCheck{FileSize: size, NextOffset: base}
	if oi != nil {
		res.IndexEntries = oi.Entries()
	}
	if ti != nil {
		res.TimeEntries = ti.Entries()
	}
	problem := func(format string, a ...any) {
		if len(res.Problems) < 20 {
			res.Problems = append(res.Problems, fmt.Sprintf(format, a...))
		}
	}
	oiAt, tiAt := 0, 0
	runMax := int64(-1)
	// checkTime consumes time entries at offset `at`, given the running max
	// of everything before it.
	checkTime := func(at int64) {
		for ti != nil && tiAt < res.TimeEntries {
			ts, off := ti.Entry(tiAt)
			if off > at {
				return
			}
			if off < at {
				problem("time index entry %d (%d, %d) is not on a batch boundary", tiAt, ts, off)
			} else if runMax > ts {
				problem("time index entry %d (%d, %d): a record before it has timestamp %d", tiAt, ts, off, runMax)
			}
			tiAt++
		}
	}
	sc := newScanner(f, 0, size, nil)
	next := base
	for {
		hdr, pos, ok := sc.next(false, 0)
		if !ok {
			break
		}
		b := make([]byte, hdr.Size())
		if _, err := f.ReadAt(b, pos); err != nil {
			problem("read at %d: %v", pos, err)
			break
		}
		_, verr := ValidateBatch(b, 0)
		bb := Batch(b)
		if fn != nil {
			fn(BatchInfo{Position: pos, BaseOffset: bb.BaseOffset(), LastOffset: bb.LastOffset(), Records: bb.RecordCount(),
				BaseTimestamp: bb.BaseTimestamp(), MaxTimestamp: bb.MaxTimestamp(), Size: len(b), LeaderEpoch: bb.LeaderEpoch(),
				ProducerID: bb.ProducerID(), Codec: bb.Codec(), Control: bb.IsControl(), CRCOK: bb.ComputeCRC() == bb.CRC()})
		}
		if verr != nil {
			problem("batch at %d: %v", pos, verr)
			break
		}
		if bb.BaseOffset() != next {
			problem("batch at %d has offset %d, expected %d", pos, bb.BaseOffset(), next)
		}
		for oi != nil && oiAt < res.IndexEntries {
			off, p := oi.Entry(oiAt)
			if int64(p) > pos {
				break
			}
			if int64(p) < pos || off != bb.BaseOffset() {
				problem("index entry %d (%d → %d) does not name the batch at %d (offset %d)", oiAt, off, p, pos, bb.BaseOffset())
			}
			oiAt++
		}
		checkTime(bb.BaseOffset())
		if ts := bb.MaxTimestamp(); ts > runMax {
			runMax = ts
		}
		next = bb.NextOffset()
		res.Batches++
		res.Bytes = pos + int64(len(b))
	}
	if sc.err != nil {
		problem("at %d: %v", sc.pos, sc.err)
	}
	checkTime(next)
	if oiAt < res.IndexEntries {
		off, p := oi.Entry(oiAt)
		problem("%d index entries past the last batch, first (%d → %d)", res.IndexEntries-oiAt, off, p)
	}
	if ti != nil && tiAt < res.TimeEntries {
		ts, off := ti.Entry(tiAt)
		problem("%d time index entries past the last batch, first (%d, %d)", res.TimeEntries-tiAt, ts, off)
	}
	if res.Bytes != size {
		problem("%d bytes after the last whole batch", size-res.Bytes)
	}
	res.NextOffset = next
	return res
}

// Verify checks every segment of the open log against its indexes and the
// segments against each other. It reads the whole log.
func (l *Log) Verify() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.RLock()
	defer l.mu.RUnlock()
	var errs []error
	for i, s := range l.segs {
		res := checkSegment(s.f, s.size.Load(), s.base, s.oi, s.ti, nil)
		for _, p := range res.Problems {
			errs = append(errs, fmt.Errorf("%s: %s", s.logPath, p))
		}
		if res.NextOffset != s.next.Load() {
			errs = append(errs, fmt.Errorf("%s: ends at %d, believed %d", s.logPath, res.NextOffset, s.next.Load()))
		}
		if i+1 < len(l.segs) && l.segs[i+1].base != res.NextOffset {
			errs = append(errs, fmt.Errorf("%s: ends at %d, next segment starts at %d", s.logPath, res.NextOffset, l.segs[i+1].base))
		}
	}
	return errors.Join(errs...)
}

// InspectSegment checks one segment file (of the OS file system) against
// the .index and .timeindex beside it in indexDir ("" for the same
// directory), calling fn for every batch. Missing index files are reported
// as problems, not errors. Opening is read-only.
func InspectSegment(logPath, indexDir string, fn func(BatchInfo)) (SegmentCheck, error) {
	base, ok := parseSegmentName(filepath.Base(logPath))
	if !ok {
		return SegmentCheck{}, fmt.Errorf("log: %s is not named <20-digit base offset>.log", logPath)
	}
	if indexDir == "" {
		indexDir = filepath.Dir(logPath)
	}
	f, err := vfs.OS.Open(logPath)
	if err != nil {
		return SegmentCheck{}, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return SegmentCheck{}, err
	}
	var oi offsetEntries
	var ti timeEntries
	var notes []string
	if x, err := index.OpenOffsetIndexReadOnly(filepath.Join(indexDir, segmentName(base, indexSuffix)), base); err == nil {
		defer x.Close()
		oi = x
	} else {
		notes = append(notes, fmt.Sprintf("offset index: %v", err))
	}
	if x, err := index.OpenTimeIndexReadOnly(filepath.Join(indexDir, segmentName(base, timeIndexSuffix)), base); err == nil {
		defer x.Close()
		ti = x
	} else {
		notes = append(notes, fmt.Sprintf("time index: %v", err))
	}
	res := checkSegment(f, size, base, oi, ti, fn)
	res.Problems = append(notes, res.Problems...)
	return res, nil
}
