package log

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/raftlog/raftlog/index"
	"github.com/raftlog/raftlog/log/testkit"
	"github.com/raftlog/raftlog/log/vfs"
)

func TestAppendAssignsOffsetsWithoutReencoding(t *testing.T) {
	l := openTest(t, t.TempDir(), Config{})
	defer l.Close()
	var want [][]byte
	for i := 0; i < 10; i++ {
		b := mkBatch(1+i, 50, 1000+int64(i))
		orig := append([]byte(nil), b...)
		info := mustAppend(t, l, b)
		if info.BaseOffset != int64(i*(i+1)/2) || info.Records != int64(i+1) {
			t.Fatalf("append %d: %+v", i, info)
		}
		// Only baseOffset and partitionLeaderEpoch changed; the CRC still holds.
		if !bytes.Equal(orig[LogOverhead:leaderEpochOff], b[LogOverhead:leaderEpochOff]) || !bytes.Equal(orig[magicOff:], b[magicOff:]) {
			t.Fatalf("append %d re-encoded the batch", i)
		}
		if Batch(b).BaseOffset() != info.BaseOffset || Batch(b).LeaderEpoch() != 7 {
			t.Fatalf("append %d: header not rewritten", i)
		}
		want = append(want, b)
	}
	got := readAll(t, l)
	if len(got) != len(want) {
		t.Fatalf("read %d batches, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("batch %d differs", i)
		}
	}
	if l.EndOffset() != 55 {
		t.Fatalf("end %d", l.EndOffset())
	}
	mustVerify(t, l)
}

func TestAppendManyBatchesInOneBuffer(t *testing.T) {
	l := openTest(t, t.TempDir(), Config{IndexIntervalBytes: 200})
	defer l.Close()
	var buf []byte
	for i := 0; i < 50; i++ {
		buf = append(buf, mkBatch(2, 40, int64(i))...)
	}
	info := mustAppend(t, l, buf)
	if info.Batches != 50 || info.LastOffset != 99 {
		t.Fatalf("info %+v", info)
	}
	if got := readAll(t, l); len(got) != 50 {
		t.Fatalf("read %d batches", len(got))
	}
	if l.Segments()[0].IndexEntries == 0 {
		t.Fatal("no index entries for a 7 KiB write with a 200-byte interval")
	}
	mustVerify(t, l)
}

func TestAppendRejectsInvalidBatchesAndWritesNothing(t *testing.T) {
	l := openTest(t, t.TempDir(), Config{MaxBatchBytes: 2000})
	defer l.Close()
	good := mkBatch(3, 10, 1)
	bad := mkBatch(3, 10, 1)
	bad[len(bad)-1] ^= 0xff // CRC mismatch
	big := mkBatch(10, 300, 1)
	cases := map[string][]byte{
		"crc":       append(append([]byte(nil), good...), bad...),
		"truncated": good[:len(good)-3],
		"too large": big,
		"magic":     func() []byte { b := append([]byte(nil), good...); b[magicOff] = 1; return b }(),
		"empty":     nil,
		"count": func() []byte {
			b := append([]byte(nil), good...)
			b[recordCountOff+3] = 2
			Batch(b).SetBaseOffset(0)
			putCRC(b)
			return b
		}(),
	}
	for name, p := range cases {
		if _, err := appendRaw(l, p, 0); err == nil {
			t.Errorf("%s: accepted", name)
		} else if name == "too large" && !errors.Is(err, ErrBatchTooLarge) {
			t.Errorf("%s: %v", name, err)
		} else if name != "too large" && !errors.Is(err, ErrCorruptBatch) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if l.EndOffset() != 0 || l.Size() != 0 {
		t.Fatalf("something was written: end %d size %d", l.EndOffset(), l.Size())
	}
	// Errors of validation are not sticky.
	mustAppend(t, l, good)
}

// AppendValidated checks nothing of a batch but that its length fits its
// buffer and MaxBatchBytes (the caller validated it: SplitBatches), so a
// batch whose CRC is wrong is written as it is; Append and SplitBatches
// refuse every error ValidateBatch finds.
func TestAppendValidatedTrustsTheCaller(t *testing.T) {
	l := openTest(t, t.TempDir(), Config{MaxBatchBytes: 2000})
	defer l.Close()
	good := mkBatch(3, 10, 1)
	big := mkBatch(10, 300, 1)
	for name, p := range map[string][]byte{"truncated": good[:len(good)-3], "too large": big} {
		if _, err := l.AppendValidated([][]byte{p}, 0); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	cases := map[string][]byte{
		"magic": func() []byte { b := append([]byte(nil), good...); b[magicOff] = 1; return b }(),
		"delta": func() []byte { b := append([]byte(nil), good...); b[recordCountOff+3] = 2; return b }(),
		"crc":   func() []byte { b := append([]byte(nil), good...); b[len(b)-1] ^= 1; return b }(),
	}
	for name, p := range cases {
		if _, err := SplitBatches(append(append([]byte(nil), good...), p...), 0); !errors.Is(err, ErrCorruptBatch) {
			t.Errorf("%s: SplitBatches: %v", name, err)
		}
		if _, err := appendRaw(l, p, 0); !errors.Is(err, ErrCorruptBatch) {
			t.Errorf("%s: Append: %v", name, err)
		}
	}
	if l.EndOffset() != 0 {
		t.Fatalf("something was written: end %d", l.EndOffset())
	}
	if _, err := l.AppendValidated([][]byte{good, cases["crc"]}, 0); err != nil {
		t.Fatal(err)
	}
	if l.EndOffset() != 6 {
		t.Fatalf("end %d after two batches of 3", l.EndOffset())
	}
}

// SplitBatches returns each batch of a buffer, refuses an empty one and
// trailing bytes, and bounds each batch by maxSize.
func TestSplitBatches(t *testing.T) {
	a, b := mkBatch(3, 10, 1), mkBatch(1, 50, 1)
	got, err := SplitBatches(append(append([]byte(nil), a...), b...), 0)
	if err != nil || len(got) != 2 || !bytes.Equal(got[0], a) || !bytes.Equal(got[1], b) {
		t.Fatalf("split %d batches, %v", len(got), err)
	}
	for name, p := range map[string][]byte{"empty": nil, "trailing": append(append([]byte(nil), a...), 0, 0, 0)} {
		if _, err := SplitBatches(p, 0); !errors.Is(err, ErrCorruptBatch) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := SplitBatches(b, len(b)-1); !errors.Is(err, ErrBatchTooLarge) {
		t.Errorf("over the limit: %v", err)
	}
}

func putCRC(b []byte) {
	c := Batch(b).ComputeCRC()
	b[crcOff], b[crcOff+1], b[crcOff+2], b[crcOff+3] = byte(c>>24), byte(c>>16), byte(c>>8), byte(c)
}

func TestAppendAssigned(t *testing.T) {
	l := openTest(t, t.TempDir(), Config{})
	defer l.Close()
	a := mkBatch(3, 10, 1)
	Batch(a).SetBaseOffset(0)
	b := mkBatch(2, 10, 1)
	Batch(b).SetBaseOffset(3)
	if _, err := l.AppendAssigned(a, b); err != nil {
		t.Fatal(err)
	}
	c := mkBatch(1, 10, 1)
	Batch(c).SetBaseOffset(9)
	if _, err := l.AppendAssigned(c); !errors.Is(err, ErrOffsetMismatch) {
		t.Fatalf("gap accepted: %v", err)
	}
	if l.EndOffset() != 5 {
		t.Fatalf("end %d", l.EndOffset())
	}
}

func TestReadAtEveryOffset(t *testing.T) {
	l := openTest(t, t.TempDir(), Config{SegmentBytes: 3000, IndexIntervalBytes: 300})
	defer l.Close()
	r := rand.New(rand.NewPCG(1, 2))
	var batches []Batch
	for i := 0; i < 60; i++ {
		b := rndBatch(r, int64(i))
		mustAppend(t, l, b)
		batches = append(batches, b)
	}
	if n := len(l.Segments()); n < 3 {
		t.Fatalf("only %d segments", n)
	}
	end := l.EndOffset()
	for _, want := range batches {
		for off := want.BaseOffset(); off <= want.LastOffset(); off++ {
			p, err := l.Read(off, 1, end)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(p, want) {
				t.Fatalf("read at %d: got %d bytes, want the batch at %d (%d bytes)", off, len(p), want.BaseOffset(), len(want))
			}
			// maxOffset before the batch's end excludes it.
			if p, _ := l.Read(off, 1<<20, want.LastOffset()); len(p) != 0 {
				t.Fatalf("read at %d bounded by %d returned data", off, want.LastOffset())
			}
		}
	}
	// maxBytes: whole batches only, never more than asked unless the first.
	for _, mb := range []int{100, 500, 1000, 2999} {
		p, err := l.Read(0, mb, end)
		if err != nil {
			t.Fatal(err)
		}
		if len(p) > mb && len(p) != len(batches[0]) {
			t.Fatalf("maxBytes %d: %d bytes", mb, len(p))
		}
		n := 0
		Batches(p, func(b Batch) bool { n += b.Size(); return true })
		if n != len(p) {
			t.Fatalf("maxBytes %d: partial batch", mb)
		}
	}
	if p, err := l.Read(end, 100, end); err != nil || p != nil {
		t.Fatalf("read at end: %v %v", p, err)
	}
	if _, err := l.Read(end+1, 100, end+5); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read past end: %v", err)
	}
	for _, b := range batches[:5] {
		got, err := l.ReadBatch(b.BaseOffset())
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("ReadBatch %d: %v", b.BaseOffset(), err)
		}
	}
	mustVerify(t, l)
}

func TestReopenCleanGivesSameState(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{SegmentBytes: 4000, IndexIntervalBytes: 256}
	l := openTest(t, dir, cfg)
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 80; i++ {
		mustAppend(t, l, rndBatch(r, int64(1000+i)))
	}
	segs, data := l.Segments(), readAll(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Sealed indexes are trimmed to entries × entry size on disk.
	for _, s := range segs {
		st, err := os.Stat(filepath.Join(dir, segmentName(s.BaseOffset, indexSuffix)))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != int64(s.IndexEntries*index.OffsetEntrySize) {
			t.Fatalf("segment %d: index %d bytes on disk, %d entries", s.BaseOffset, st.Size(), s.IndexEntries)
		}
		st, err = os.Stat(filepath.Join(dir, segmentName(s.BaseOffset, timeIndexSuffix)))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != int64(s.TimeEntries*index.TimeEntrySize) {
			t.Fatalf("segment %d: time index %d bytes on disk, %d entries", s.BaseOffset, st.Size(), s.TimeEntries)
		}
	}
	l = openTest(t, dir, cfg)
	defer l.Close()
	rep := l.Recovery()
	if !rep.Clean || rep.ScannedSegments != 0 || rep.RebuiltIndexes != 0 || rep.Truncated {
		t.Fatalf("clean reopen did work: %+v", rep)
	}
	if got := l.Segments(); !reflect.DeepEqual(got, segs) {
		t.Fatalf("segments differ after reopen:\n%+v\n%+v", got, segs)
	}
	if got := readAll(t, l); !reflect.DeepEqual(got, data) {
		t.Fatal("data differs after reopen")
	}
	mustVerify(t, l)
	// And it goes on appending where it was.
	info := mustAppend(t, l, mkBatch(1, 1, 5000))
	if info.BaseOffset != segs[len(segs)-1].NextOffset {
		t.Fatalf("append after reopen at %d", info.BaseOffset)
	}
	mustVerify(t, l)
}

func TestRollOnSizeIndexFullAndAge(t *testing.T) {
	t.Run("size", func(t *testing.T) {
		l := openTest(t, t.TempDir(), Config{SegmentBytes: 1000})
		defer l.Close()
		for i := 0; i < 20; i++ {
			mustAppend(t, l, mkBatch(1, 300, 1))
		}
		for _, s := range l.Segments() {
			if s.Size > 1000 {
				t.Fatalf("segment %d has %d bytes", s.BaseOffset, s.Size)
			}
		}
		if n := len(l.Segments()); n < 7 {
			t.Fatalf("%d segments", n)
		}
	})
	t.Run("index full", func(t *testing.T) {
		// Room for 8 time entries: the log must roll before either index fills.
		l := openTest(t, t.TempDir(), Config{SegmentIndexBytes: 96, IndexIntervalBytes: 1})
		defer l.Close()
		for i := 0; i < 100; i++ {
			mustAppend(t, l, mkBatch(1, 10, int64(i)))
		}
		segs := l.Segments()
		if len(segs) < 10 {
			t.Fatalf("%d segments", len(segs))
		}
		for _, s := range segs {
			if s.TimeEntries > 8 || s.IndexEntries > 12 {
				t.Fatalf("segment %+v overfull", s)
			}
		}
		mustVerify(t, l)
	})
	t.Run("age", func(t *testing.T) {
		l := openTest(t, t.TempDir(), Config{SegmentMs: time.Hour})
		defer l.Close()
		h := time.Hour.Milliseconds()
		for _, ts := range []int64{0, h / 2, h, h + 1, 2 * h, 3*h + 2} {
			mustAppend(t, l, mkBatch(1, 10, ts))
		}
		var bases []int64
		for _, s := range l.Segments() {
			bases = append(bases, s.BaseOffset)
		}
		if !reflect.DeepEqual(bases, []int64{0, 3, 5}) {
			t.Fatalf("segment bases %v", bases)
		}
	})
}

func TestOffsetForTimestamp(t *testing.T) {
	l := openTest(t, t.TempDir(), Config{SegmentBytes: 2000, IndexIntervalBytes: 200})
	defer l.Close()
	// Producer clocks go backwards now and then.
	tss := []int64{100, 200, 150, 300, 300, 250, 400, 1000, 900, 1100}
	var firstAtLeast func(ts int64) int64
	type rec struct{ off, ts int64 }
	var all []rec
	for _, ts := range tss {
		info := mustAppend(t, l, mkBatch(3, 200, ts))
		for i := int64(0); i < 3; i++ {
			all = append(all, rec{info.BaseOffset + i, ts + i})
		}
	}
	firstAtLeast = func(ts int64) int64 {
		for _, r := range all {
			if r.ts >= ts {
				return r.off
			}
		}
		return -1
	}
	for ts := int64(0); ts <= 1200; ts += 7 {
		off, got, found, err := l.OffsetForTimestamp(ts, l.EndOffset())
		if err != nil {
			t.Fatal(err)
		}
		want := firstAtLeast(ts)
		if (want >= 0) != found || (found && off != want) {
			t.Fatalf("ts %d: got %d (%d, %v), want %d", ts, off, got, found, want)
		}
		if found && got < ts {
			t.Fatalf("ts %d: record timestamp %d", ts, got)
		}
	}
	if l.MaxTimestamp() != 1102 {
		t.Fatalf("max timestamp %d", l.MaxTimestamp())
	}
}

func TestTruncateTo(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{SegmentBytes: 1500, IndexIntervalBytes: 100}
	l := openTest(t, dir, cfg)
	var infos []AppendInfo
	for i := 0; i < 30; i++ {
		infos = append(infos, mustAppend(t, l, mkBatch(2, 100, int64(i))))
	}
	segs := l.Segments()
	// Into the middle of a sealed segment, at a batch boundary.
	cut := infos[3].BaseOffset
	if segs[1].BaseOffset <= cut {
		t.Fatalf("test assumes offset %d is in the first segment", cut)
	}
	end, err := l.TruncateTo(cut + 1) // inside batch 3: it goes whole
	if err != nil || end != cut {
		t.Fatalf("truncate: %d %v", end, err)
	}
	if len(l.Segments()) != 1 || l.EndOffset() != cut {
		t.Fatalf("after truncate: %d segments, end %d", len(l.Segments()), l.EndOffset())
	}
	mustVerify(t, l)
	for i := 0; i < 10; i++ {
		mustAppend(t, l, mkBatch(1, 100, 500))
	}
	mustVerify(t, l)
	// Exactly at a segment base.
	segs = l.Segments()
	if len(segs) < 2 {
		t.Fatal("no second segment")
	}
	if end, err := l.TruncateTo(segs[1].BaseOffset); err != nil || end != segs[1].BaseOffset {
		t.Fatalf("truncate at base: %d %v", end, err)
	}
	mustVerify(t, l)
	// Past the end: nothing.
	if end, err := l.TruncateTo(1 << 40); err != nil || end != l.EndOffset() {
		t.Fatalf("truncate past end: %d %v", end, err)
	}
	want := readAll(t, l)
	l.Close()
	l = openTest(t, dir, cfg)
	defer l.Close()
	if got := readAll(t, l); !reflect.DeepEqual(got, want) {
		t.Fatal("data differs after reopen")
	}
	mustVerify(t, l)
	// To zero: empty at 0.
	if _, err := l.TruncateTo(0); err != nil {
		t.Fatal(err)
	}
	if l.EndOffset() != 0 || l.Size() != 0 {
		t.Fatalf("end %d size %d", l.EndOffset(), l.Size())
	}
}

func TestRetentionAndPrefixDeletion(t *testing.T) {
	now := time.UnixMilli(10_000_000)
	clock := func() time.Time { return now }
	t.Run("bytes", func(t *testing.T) {
		l := openTest(t, t.TempDir(), Config{SegmentBytes: 1000, RetentionBytes: 2500}, WithClock(clock))
		defer l.Close()
		for i := 0; i < 30; i++ {
			mustAppend(t, l, mkBatch(1, 300, now.UnixMilli()))
		}
		n, err := l.ApplyRetention()
		if err != nil || n == 0 {
			t.Fatalf("retention: %d %v", n, err)
		}
		if l.Size() < 2500-1000 || l.Size() > 2500+1000 {
			t.Fatalf("size %d after retention", l.Size())
		}
		if l.StartOffset() != l.Segments()[0].BaseOffset {
			t.Fatalf("start %d", l.StartOffset())
		}
		if _, err := l.Read(0, 100, l.EndOffset()); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("read below start: %v", err)
		}
		readAll(t, l)
	})
	t.Run("time", func(t *testing.T) {
		l := openTest(t, t.TempDir(), Config{SegmentBytes: 1000, RetentionMs: time.Hour}, WithClock(clock))
		defer l.Close()
		old := now.Add(-2 * time.Hour).UnixMilli()
		for i := 0; i < 10; i++ {
			mustAppend(t, l, mkBatch(1, 300, old))
		}
		boundary := l.EndOffset()
		for i := 0; i < 10; i++ {
			mustAppend(t, l, mkBatch(1, 300, now.UnixMilli()))
		}
		if _, err := l.ApplyRetention(); err != nil {
			t.Fatal(err)
		}
		if s := l.StartOffset(); s > boundary || s < boundary-3 {
			t.Fatalf("start %d, old data ended at %d", s, boundary)
		}
	})
	t.Run("advance start", func(t *testing.T) {
		dir := t.TempDir()
		l := openTest(t, dir, Config{SegmentBytes: 1000})
		for i := 0; i < 20; i++ {
			mustAppend(t, l, mkBatch(1, 300, 1))
		}
		if err := l.AdvanceStart(7); err != nil {
			t.Fatal(err)
		}
		if l.StartOffset() != 7 || l.Segments()[0].BaseOffset > 7 || l.Segments()[0].NextOffset <= 7 {
			t.Fatalf("start %d first segment %+v", l.StartOffset(), l.Segments()[0])
		}
		if p, err := l.Read(7, 10, l.EndOffset()); err != nil || Batch(p).BaseOffset() != 7 {
			t.Fatalf("read at start: %v", err)
		}
		if err := l.AdvanceStart(l.EndOffset() + 1); err == nil {
			t.Fatal("start past the end accepted")
		}
		l.Close()
		l = openTest(t, dir, Config{SegmentBytes: 1000})
		defer l.Close()
		if l.StartOffset() != 7 {
			t.Fatalf("start %d after reopen", l.StartOffset())
		}
	})
}

// TestRetentionBelowPinnedStart: segments a pin kept when the log start
// moved past them go at the next retention pass once the pin has moved,
// even with no retention configured.
func TestRetentionBelowPinnedStart(t *testing.T) {
	l := openTest(t, t.TempDir(), Config{SegmentBytes: 1000, RetentionMs: -1, RetentionBytes: -1})
	defer l.Close()
	for i := 0; i < 20; i++ {
		mustAppend(t, l, mkBatch(1, 300, 1))
	}
	l.Pin(0)
	if err := l.AdvanceStart(15); err != nil {
		t.Fatal(err)
	}
	if got := l.Segments()[0].BaseOffset; got != 0 {
		t.Fatalf("first segment at %d: the pin at 0 should have kept it", got)
	}
	if n, err := l.ApplyRetention(); err != nil || n != 0 {
		t.Fatalf("retention under the pin: %d segments, %v", n, err)
	}
	l.Pin(12)
	n, err := l.ApplyRetention()
	if err != nil || n == 0 {
		t.Fatalf("retention after the pin moved: %d segments, %v", n, err)
	}
	first := l.Segments()[0]
	if first.BaseOffset > 12 || first.NextOffset <= 12 {
		t.Fatalf("first segment [%d, %d): should hold the pin 12", first.BaseOffset, first.NextOffset)
	}
	if l.StartOffset() != 15 {
		t.Fatalf("start %d, want 15", l.StartOffset())
	}
	if p, err := l.Read(15, 10, l.EndOffset()); err != nil || Batch(p).BaseOffset() != 15 {
		t.Fatalf("read at start: %v", err)
	}
}

func TestReset(t *testing.T) {
	dir := t.TempDir()
	l := openTest(t, dir, Config{SegmentBytes: 1000})
	for i := 0; i < 10; i++ {
		mustAppend(t, l, mkBatch(1, 300, 1))
	}
	if err := l.Reset(500); err != nil {
		t.Fatal(err)
	}
	if l.StartOffset() != 500 || l.EndOffset() != 500 || len(l.Segments()) != 1 {
		t.Fatalf("after reset: %d %d %d", l.StartOffset(), l.EndOffset(), len(l.Segments()))
	}
	mustAppend(t, l, mkBatch(2, 3, 1))
	l.Close()
	l = openTest(t, dir, Config{SegmentBytes: 1000})
	defer l.Close()
	if l.StartOffset() != 500 || l.EndOffset() != 502 {
		t.Fatalf("after reopen: %d %d", l.StartOffset(), l.EndOffset())
	}
}

func TestCorruptTailIsCutAndReported(t *testing.T) {
	for _, mode := range []string{"flip", "garbage", "torn"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			cfg := Config{SegmentBytes: 3000}
			l := openTest(t, dir, cfg)
			var infos []AppendInfo
			for i := 0; i < 20; i++ {
				infos = append(infos, mustAppend(t, l, mkBatch(2, 100, 1)))
			}
			segs := l.Segments()
			l.Close()
			os.Remove(filepath.Join(dir, cleanShutdownName))
			last := segs[len(segs)-1]
			path := last.LogPath
			data, _ := os.ReadFile(path)
			switch mode {
			case "flip":
				data[len(data)-5] ^= 1
			case "garbage":
				data = append(data, bytes.Repeat([]byte{0xAB}, 77)...)
			case "torn":
				data = data[:len(data)-9]
			}
			os.WriteFile(path, data, 0o644)
			// Stale the checkpoint so the segment is scanned.
			writeCheckpoint(vfs.OS, dir, checkpoint{recoveryPoint: last.BaseOffset})
			l = openTest(t, dir, cfg)
			defer l.Close()
			rep := l.Recovery()
			if rep.Clean || !rep.Truncated || rep.ScannedSegments != 1 {
				t.Fatalf("report %+v", rep)
			}
			lastInfo := infos[len(infos)-1]
			wantEnd := lastInfo.BaseOffset
			if mode == "garbage" {
				wantEnd = lastInfo.LastOffset + 1
			}
			if l.EndOffset() != wantEnd || rep.TruncatedAt != wantEnd {
				t.Fatalf("end %d, truncated at %d, want %d", l.EndOffset(), rep.TruncatedAt, wantEnd)
			}
			mustVerify(t, l)
			mustAppend(t, l, mkBatch(1, 1, 1))
			mustVerify(t, l)
		})
	}
}

func TestCorruptMiddleSegmentDropsWhatFollows(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{SegmentBytes: 1000}
	l := openTest(t, dir, cfg)
	for i := 0; i < 20; i++ {
		mustAppend(t, l, mkBatch(1, 300, 1))
	}
	segs := l.Segments()
	l.Close()
	os.Remove(filepath.Join(dir, cleanShutdownName))
	data, _ := os.ReadFile(segs[2].LogPath)
	data[100] ^= 0x10
	os.WriteFile(segs[2].LogPath, data, 0o644)
	writeCheckpoint(vfs.OS, dir, checkpoint{recoveryPoint: segs[2].BaseOffset})
	l = openTest(t, dir, cfg)
	defer l.Close()
	rep := l.Recovery()
	if !rep.Truncated || rep.DeletedSegments != len(segs)-3 || l.EndOffset() != segs[2].BaseOffset {
		t.Fatalf("report %+v end %d", rep, l.EndOffset())
	}
	mustVerify(t, l)
}

func TestStaleIndexIsRebuilt(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{SegmentBytes: 3000, IndexIntervalBytes: 200}
	l := openTest(t, dir, cfg)
	for i := 0; i < 30; i++ {
		mustAppend(t, l, mkBatch(2, 100, 1))
	}
	segs := l.Segments()
	want := readAll(t, l)
	l.Close()
	// Corrupt a sealed segment's index: its last entry points elsewhere.
	p := filepath.Join(dir, segmentName(segs[0].BaseOffset, indexSuffix))
	data, _ := os.ReadFile(p)
	data[len(data)-1] ^= 0x40
	os.WriteFile(p, data, 0o644)
	// And delete the active segment's time index.
	os.Remove(filepath.Join(dir, segmentName(segs[len(segs)-1].BaseOffset, timeIndexSuffix)))
	l = openTest(t, dir, cfg)
	defer l.Close()
	if rep := l.Recovery(); rep.RebuiltIndexes != 2 {
		t.Fatalf("report %+v", rep)
	}
	if got := readAll(t, l); !reflect.DeepEqual(got, want) {
		t.Fatal("data differs")
	}
	mustVerify(t, l)
}

func TestConcurrentReadersSeeWholeBatches(t *testing.T) {
	l := openTest(t, t.TempDir(), Config{SegmentBytes: 20000, IndexIntervalBytes: 500})
	defer l.Close()
	const n = 400
	var wg sync.WaitGroup
	done := make(chan struct{})
	errc := make(chan error, 4)
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := int64(0)
			for {
				select {
				case <-done:
					return
				default:
				}
				end := l.EndOffset()
				if off >= end {
					continue
				}
				p, err := l.Read(off, 4096, end)
				if errors.Is(err, ErrOffsetOutOfRange) && off < l.StartOffset() {
					off = l.StartOffset() // retention overtook this reader
					continue
				}
				if err != nil {
					errc <- err
					return
				}
				Batches(p, func(b Batch) bool {
					if _, err := ValidateBatch(b, 0); err != nil {
						errc <- err
					}
					off = b.NextOffset()
					return true
				})
			}
		}()
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < n; i++ {
		mustAppend(t, l, rndBatch(rng, int64(i)))
		if i%100 == 99 {
			if _, err := l.ApplyRetention(); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(done)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
}

func TestWriteErrorsAreSticky(t *testing.T) {
	fs, idx, l := memLog(t, Config{})
	defer l.Close()
	mustAppend(t, l, mkBatch(1, 10, 1))
	if err := l.Err(); err != nil {
		t.Fatalf("Err before any failure: %v", err)
	}
	boom := errors.New("disk on fire")
	fs.SetHook(func(op int, kind, name string) error {
		if kind == vfs.OpWriteAt {
			return boom
		}
		return nil
	})
	if _, err := appendRaw(l, mkBatch(1, 10, 1), 0); !errors.Is(err, boom) {
		t.Fatalf("append: %v", err)
	}
	fs.SetHook(nil)
	if _, err := appendRaw(l, mkBatch(1, 10, 1), 0); !errors.Is(err, boom) {
		t.Fatalf("second append: %v", err)
	}
	if err := l.Flush(); !errors.Is(err, boom) {
		t.Fatalf("flush: %v", err)
	}
	if err := l.Err(); !errors.Is(err, boom) || !errors.Is(err, ErrWrite) {
		t.Fatalf("Err: %v", err)
	}
	if err := l.Close(); !errors.Is(err, boom) {
		t.Fatalf("close: %v", err)
	}
	// Opened again, the log recovers (no clean marker was written) and
	// writes.
	l2 := openTest(t, "/p/t-0", Config{}, WithFS(fs), WithIndexDir(idx))
	defer l2.Close()
	if l2.Recovery().Clean || l2.Err() != nil {
		t.Fatalf("reopened: %+v, Err %v", l2.Recovery(), l2.Err())
	}
	mustAppend(t, l2, mkBatch(1, 10, 1))
	if l2.EndOffset() != 2 {
		t.Fatalf("end %d after the failed append and one more", l2.EndOffset())
	}
}

func TestFlushMessages(t *testing.T) {
	fs, idx, l := memLog(t, Config{FlushMessages: 1})
	for i := 0; i < 5; i++ {
		mustAppend(t, l, mkBatch(2, 10, 1))
	}
	clone := fs.CrashClone(vfs.CrashOptions{})
	l.Close()
	l2 := openTest(t, "/p/t-0", Config{}, WithFS(clone), WithIndexDir(idx))
	defer l2.Close()
	if l2.EndOffset() != 10 || l2.Recovery().Clean {
		t.Fatalf("end %d after crash with flush.messages=1; %+v", l2.EndOffset(), l2.Recovery())
	}
}

func TestFlushMs(t *testing.T) {
	fs, idx, l := memLog(t, Config{FlushMs: time.Millisecond})
	defer l.Close()
	mustAppend(t, l, mkBatch(2, 10, 1))
	testkit.WaitFor(t, "flush.ms to flush", 10*time.Second, func() bool {
		clone := fs.CrashClone(vfs.CrashOptions{})
		l2 := openTest(t, "/p/t-0", Config{}, WithFS(clone), WithIndexDir(t.TempDir()))
		defer l2.Close()
		return l2.EndOffset() == 2
	})
	_ = idx
}
