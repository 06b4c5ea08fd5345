package replication

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/log/vfs"
	"github.com/raftlog/raftlog/log/vfs/errorfs"
)

// layouts are the two offset layouts, for tests that run in both.
var layouts = []struct {
	name  string
	dense bool
}{{"dense", true}, {"legacy", false}}

func openTestStore(t *testing.T, fs *vfs.MemFS, idx string, dense bool) (*log.Log, *logStore) {
	t.Helper()
	l, err := log.Open("/r/log", log.WithFS(fs), log.WithIndexDir(idx), log.WithConfig(log.Config{SegmentBytes: 1024, SegmentIndexBytes: 4096}))
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := openLogStore(l, fs, "/r", nil, dense)
	if err != nil {
		t.Fatal(err)
	}
	return l, s
}

// raftEntries are n entries from index from, in term: a no-op first (as
// every leader's term starts), then produced batches with a
// configuration entry among them.
func raftEntries(from, n int, term uint64) []*raft.Log {
	var out []*raft.Log
	for i := 0; i < n; i++ {
		idx := uint64(from + i)
		switch i % 4 {
		case 0:
			out = append(out, &raft.Log{Index: idx, Term: term, Type: raft.LogNoop, AppendedAt: time.Unix(100, int64(i))})
		case 2:
			out = append(out, &raft.Log{Index: idx, Term: term, Type: raft.LogConfiguration, Data: []byte("cfg"), Extensions: []byte("x"), AppendedAt: time.Unix(200, 0)})
		default:
			out = append(out, &raft.Log{Index: idx, Term: term, Type: raft.LogCommand, Data: testBatch(i, 30)})
		}
	}
	return out
}

func TestLogStoreRoundTripAndReopen(t *testing.T) {
	for _, lay := range layouts {
		t.Run(lay.name, func(t *testing.T) { testLogStoreRoundTripAndReopen(t, lay.dense) })
	}
}

func testLogStoreRoundTripAndReopen(t *testing.T, dense bool) {
	fs, idx := vfs.NewMem(), t.TempDir()
	l, s := openTestStore(t, fs, idx, dense)
	// Stored as a leader stores (what a follower caches is
	// TestLogStoreCacheBounded's).
	s.leader = func() bool { return true }
	var e raft.Log
	if err := s.GetLog(1, &e); err != raft.ErrLogNotFound {
		t.Fatalf("empty store: %v (must be raft.ErrLogNotFound itself)", err)
	}
	ents := raftEntries(1, 40, 3)
	if err := s.StoreLogs(ents[:25]); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs(ents[25:]); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs(raftEntries(50, 1, 3)); err == nil {
		t.Fatal("a gap was accepted")
	}
	check := func(s *logStore) {
		t.Helper()
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		if first != 1 || last != 40 {
			t.Fatalf("first %d last %d", first, last)
		}
		prevNext := int64(0)
		for _, want := range ents {
			var got raft.Log
			if err := s.GetLog(want.Index, &got); err != nil {
				t.Fatalf("get %d: %v", want.Index, err)
			}
			if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type || !bytes.Equal(got.Data, want.Data) ||
				!bytes.Equal(got.Extensions, want.Extensions) || (want.Type != raft.LogCommand && !got.AppendedAt.Equal(want.AppendedAt)) {
				t.Fatalf("entry %d: got %+v want %+v", want.Index, got, want)
			}
			pos, _ := s.entryAt(want.Index)
			if pos.offset != prevNext {
				t.Fatalf("entry %d at offset %d, previous ended at %d", want.Index, pos.offset, prevNext)
			}
			prevNext = pos.next
		}
		if err := s.GetLog(41, &e); err != raft.ErrLogNotFound {
			t.Fatalf("past the end: %v", err)
		}
	}
	check(s)
	// In the legacy layout Raft's own entries are control batches of the
	// log (Kafka consumers skip them); in the dense one only produced
	// batches are, at offsets dense from 0.
	p, _ := l.Read(0, 1<<20, l.EndOffset())
	controls, next := 0, int64(0)
	log.Batches(p, func(b log.Batch) bool {
		if b.IsControl() {
			controls++
		}
		if b.BaseOffset() != next {
			t.Fatalf("batch at %d after one ending at %d", b.BaseOffset(), next)
		}
		next = b.NextOffset()
		return true
	})
	if dense && (controls != 0 || l.EndOffset() != 20) {
		t.Fatalf("dense layout: %d control batches, log end %d, want none and 20 (20 produced batches of a record)", controls, l.EndOffset())
	}
	if !dense && controls == 0 {
		t.Fatal("legacy layout: no control batches in the log")
	}
	l.Close()
	l, s = openTestStore(t, fs, idx, dense)
	check(s)
	// A conflicting suffix goes; a new one takes its offsets.
	pos, _ := s.entryAt(30)
	if err := s.DeleteRange(30, 40); err != nil {
		t.Fatal(err)
	}
	if l.EndOffset() != pos.offset {
		t.Fatalf("log ends at %d after the suffix cut, entry 30 was at %d", l.EndOffset(), pos.offset)
	}
	if err := s.StoreLogs(raftEntries(30, 5, 4)); err != nil {
		t.Fatal(err)
	}
	if err := s.GetLog(30, &e); err != nil || e.Type != raft.LogNoop || e.Term != 4 {
		t.Fatalf("entry 30 after the cut: %+v, %v", e, err)
	}
	// A prefix goes from Raft's view; the Kafka data stays.
	if err := s.DeleteRange(1, 10); err != nil {
		t.Fatal(err)
	}
	if first, _ := s.FirstIndex(); first != 11 {
		t.Fatalf("first %d", first)
	}
	if err := s.GetLog(5, &e); err != raft.ErrLogNotFound {
		t.Fatalf("compacted entry: %v", err)
	}
	if l.StartOffset() != 0 {
		t.Fatal("raft compaction deleted Kafka data")
	}
	l.Close()
	l, s = openTestStore(t, fs, idx, dense)
	defer l.Close()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != 11 || last != 34 {
		t.Fatalf("after reopen: first %d last %d", first, last)
	}
	if err := s.GetLog(34, &e); err != nil || e.Term != 4 {
		t.Fatalf("entry 34: %v term %d", err, e.Term)
	}
	// Everything goes after a snapshot (all applied); the next entry follows it.
	s.applied = func() uint64 { return 34 }
	if err := s.DeleteRange(11, 34); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs(raftEntries(36, 1, 5)); err == nil {
		t.Fatal("entry 36 accepted when 35 must come next")
	}
	if err := s.StoreLogs(raftEntries(35, 2, 5)); err != nil {
		t.Fatal(err)
	}
}

// newTestStable opens a new stable store in /s of a new memory file system.
func newTestStable(t *testing.T) (*vfs.MemFS, *stableStore) {
	t.Helper()
	fs := vfs.NewMem()
	fs.MkdirAll("/s")
	fs.SyncDir("/")
	s, err := openStableStore(fs, "/s", nil)
	if err != nil {
		t.Fatal(err)
	}
	return fs, s
}

func TestStableStore(t *testing.T) {
	fs, s := newTestStable(t)
	if _, err := s.Get([]byte("x")); err == nil || err.Error() != "not found" {
		t.Fatalf("missing key: %v (raft compares the text)", err)
	}
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 0 {
		t.Fatalf("missing uint64: %d %v", v, err)
	}
	s.SetUint64([]byte("CurrentTerm"), 7)
	s.Set([]byte("LastVoteCand"), []byte("n1"))
	// Every Set is durable: a crash right after keeps it.
	crashed := fs.CrashClone(vfs.CrashOptions{})
	s2, err := openStableStore(crashed, "/s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := s2.GetUint64([]byte("CurrentTerm")); v != 7 {
		t.Fatalf("term %d after crash", v)
	}
	if v, _ := s2.Get([]byte("LastVoteCand")); !reflect.DeepEqual(v, []byte("n1")) {
		t.Fatalf("vote %q after crash", v)
	}
	// Every Set went to the other slot: damage to the latest (a write torn
	// by a crash) leaves the state before it, damage to both is an error,
	// not a silent reset of the term.
	corrupt := func(fs *vfs.MemFS, slot int) {
		f, _ := fs.OpenRW("/s/" + stableName)
		f.WriteAt([]byte{0xff}, int64(slot*stableSlotSize+20))
		f.Close()
	}
	latest := s2.slot
	corrupt(crashed, latest)
	s3, err := openStableStore(crashed, "/s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := s3.GetUint64([]byte("CurrentTerm")); v != 7 {
		t.Fatalf("term %d from the previous slot", v)
	}
	if _, err := s3.Get([]byte("LastVoteCand")); err == nil {
		t.Fatal("the vote of the damaged slot survived")
	}
	corrupt(crashed, 1-latest)
	if _, err := openStableStore(crashed, "/s", nil); err == nil || !strings.Contains(err.Error(), "no valid slot") {
		t.Fatalf("both slots damaged: %v", err)
	}
}

// TestStableStoreVoteInOneWrite: the term of a vote is written with its
// candidate, as hashicorp/raft's persistVote sets them, one after the
// other: alone it is not written (a crash then loses it, and no vote went
// out), and the candidate's write carries it, also when the candidate is
// the one already held (a vote for the same node in a later term), where
// an unchanged value is otherwise not written again.
func TestStableStoreVoteInOneWrite(t *testing.T) {
	fs, s := newTestStable(t)
	reopen := func() *stableStore {
		t.Helper()
		s2, err := openStableStore(fs.CrashClone(vfs.CrashOptions{}), "/s", nil)
		if err != nil {
			t.Fatal(err)
		}
		return s2
	}
	vote := func(term uint64, cand string) {
		t.Helper()
		if err := s.SetUint64([]byte(keyLastVoteTerm), term); err != nil {
			t.Fatal(err)
		}
		if v, _ := s.GetUint64([]byte(keyLastVoteTerm)); v != term {
			t.Fatalf("term %d read back as %d", term, v)
		}
		if v, _ := reopen().GetUint64([]byte(keyLastVoteTerm)); v == term {
			t.Fatalf("term %d written before its candidate", term)
		}
		if err := s.Set([]byte(keyLastVoteCand), []byte(cand)); err != nil {
			t.Fatal(err)
		}
		s2 := reopen()
		if v, _ := s2.GetUint64([]byte(keyLastVoteTerm)); v != term {
			t.Fatalf("after the candidate: term %d on disk, want %d", v, term)
		}
		if v, _ := s2.Get([]byte(keyLastVoteCand)); string(v) != cand {
			t.Fatalf("after the candidate: %q on disk, want %q", v, cand)
		}
	}
	vote(3, "n1")
	vote(4, "n1") // the same candidate again
	vote(5, "n2")
}

// TestStableStoreOnFullDisk: a term or vote is saved on a disk with no
// free block (hashicorp/raft panics when it cannot save its term), since a
// change overwrites a slot of a file whose blocks exist.
func TestStableStoreOnFullDisk(t *testing.T) {
	mem := vfs.NewMem()
	mem.MkdirAll("/s")
	mem.SyncDir("/")
	if _, err := openStableStore(mem, "/s", nil); err != nil {
		t.Fatal(err)
	}
	disk := &errorfs.DiskFull{}
	disk.Set(true)
	full := errorfs.Wrap(mem, disk)
	s, err := openStableStore(full, "/s", nil)
	if err != nil {
		t.Fatal(err)
	}
	for term := uint64(1); term <= 5; term++ {
		if err := s.SetUint64([]byte("CurrentTerm"), term); err != nil {
			t.Fatalf("term %d on a full disk: %v", term, err)
		}
	}
	s2, err := openStableStore(mem.CrashClone(vfs.CrashOptions{}), "/s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := s2.GetUint64([]byte("CurrentTerm")); v != 5 {
		t.Fatalf("term %d after crash", v)
	}
	// A new replica's file cannot be made on a full disk: the open fails.
	full.MkdirAll("/t")
	if _, err := openStableStore(full, "/t", nil); !errors.Is(err, errorfs.ErrNoSpace) {
		t.Fatalf("new store on a full disk: %v", err)
	}
}

// TestStableStoreReadsEarlierFormat: a file of the earlier format (one
// body replaced atomically) is read and rewritten in slots.
func TestStableStoreReadsEarlierFormat(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/s")
	fs.SyncDir("/")
	b := append([]byte(nil), stableMagicV1[:]...)
	b = binary.BigEndian.AppendUint32(b, 2)
	for _, kv := range [][2]string{{"CurrentTerm", "\x00\x00\x00\x00\x00\x00\x00\x09"}, {"raftlog.server_id", "n3"}} {
		b = binary.AppendUvarint(b, uint64(len(kv[0])))
		b = append(b, kv[0]...)
		b = binary.AppendUvarint(b, uint64(len(kv[1])))
		b = append(b, kv[1]...)
	}
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
	if err := vfs.WriteFileAtomic(fs, "/s/"+stableName, b); err != nil {
		t.Fatal(err)
	}
	s, err := openStableStore(fs, "/s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := s.GetUint64([]byte("CurrentTerm")); v != 9 {
		t.Fatalf("term %d", v)
	}
	if v, _ := s.Get([]byte("raftlog.server_id")); string(v) != "n3" {
		t.Fatalf("server id %q", v)
	}
	img, _ := vfs.ReadFile(fs, "/s/"+stableName)
	if len(img) != 2*stableSlotSize || [4]byte(img[:4]) != stableMagic {
		t.Fatalf("not rewritten: %d bytes, magic %q", len(img), img[:4])
	}
	s2, err := openStableStore(fs.CrashClone(vfs.CrashOptions{}), "/s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := s2.Get([]byte("raftlog.server_id")); string(v) != "n3" {
		t.Fatalf("server id %q after rewrite", v)
	}
	// Damage is still found.
	b[len(b)-1] ^= 1
	vfs.WriteFileAtomic(fs, "/s/"+stableName, b)
	if _, err := openStableStore(fs, "/s", nil); err == nil {
		t.Fatal("corrupt file of the earlier format accepted")
	}
}

func TestControlBatchesAreKafkaControlBatches(t *testing.T) {
	e := &raft.Log{Index: 9, Term: 4, Type: raft.LogConfiguration, Data: []byte("d"), AppendedAt: time.Unix(5, 6)}
	b := log.Batch(encodeControl(e))
	if _, err := log.ValidateBatch(b, 0); err != nil {
		t.Fatal(err)
	}
	if !b.IsControl() || b.LeaderEpoch() != 4 || b.ProducerID() != -1 {
		t.Fatalf("attributes %x epoch %d pid %d", b.Attributes(), b.LeaderEpoch(), b.ProducerID())
	}
	var got raft.Log
	if err := decodeControl(b, &got); err != nil || got.Type != e.Type || !bytes.Equal(got.Data, e.Data) || !got.AppendedAt.Equal(e.AppendedAt) {
		t.Fatalf("decode: %v %+v", err, got)
	}
	// An entry with no time has no timestamp, and does not start its
	// segment's clock: the produced batch after it does not roll.
	boot := log.Batch(encodeControl(&raft.Log{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte("d")}))
	if boot.MaxTimestamp() != -1 {
		t.Fatalf("entry without a time stamped %d", boot.MaxTimestamp())
	}
	if err := decodeControl(boot, &got); err != nil || !got.AppendedAt.IsZero() {
		t.Fatalf("decode: %v %+v", err, got)
	}
	l, err := log.Open("/r/log", log.WithFS(vfs.NewMem()), log.WithIndexDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	now := time.Now().UnixMilli()
	for _, p := range [][]byte{boot, log.BuildBatch(nil, log.BatchOptions{ProducerID: -1, BaseSequence: -1}, []log.Record{{Value: []byte("v"), Timestamp: now}})} {
		if _, err := l.AppendValidated([][]byte{p}, 1); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(l.Segments()); n != 1 {
		t.Fatalf("%d segments after the bootstrap entry and a batch", n)
	}
	m := marker{server: "n1-abc", nonce: 42}
	mb := log.Batch(encodeMarker(m, time.Unix(1, 0)))
	if got, ok := decodeMarker(mb); !ok || got != m {
		t.Fatalf("marker %+v %v", got, ok)
	}
	if _, ok := decodeMarker(b); ok {
		t.Fatal("a configuration entry decoded as a marker")
	}
}

// The entry cache holds at most entryCacheBytes (always the newest
// entry), and an entry it dropped is read back from the log unchanged. A
// replica that does not lead caches copies of what it stores (its append
// stream reuses those buffers), of a produced batch only the header,
// which GetLog returns while it does not lead and a leader never sees;
// and it drops entries once applied.
func TestLogStoreCacheBounded(t *testing.T) {
	fs, idx := vfs.NewMem(), t.TempDir()
	l, err := log.Open("/r/log", log.WithFS(fs), log.WithIndexDir(idx))
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := openLogStore(l, fs, "/r", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	leading := true
	s.leader = func() bool { return leading }
	const size = 900 << 10
	var ents []*raft.Log
	for i := 1; i <= 40; i++ {
		e := &raft.Log{Index: uint64(i), Term: 2, Type: raft.LogCommand, Data: testBatch(i, size)}
		ents = append(ents, e)
		if err := s.StoreLogs([]*raft.Log{e}); err != nil {
			t.Fatal(err)
		}
		s.mu.RLock()
		total, held := 0, 0
		for _, c := range s.cache {
			if c != nil {
				total += len(c.Data)
				held++
			}
		}
		newest := s.cache[uint64(i)%entryCacheSize]
		bytesNow := s.cacheBytes
		s.mu.RUnlock()
		if total != bytesNow || total > entryCacheBytes {
			t.Fatalf("after entry %d: cache holds %d bytes in %d entries, counted %d, bound %d", i, total, held, bytesNow, entryCacheBytes)
		}
		if newest == nil || newest.Index != uint64(i) {
			t.Fatalf("after entry %d: the newest entry is not cached", i)
		}
	}
	if s.cache[1%entryCacheSize] != nil {
		t.Fatal("the oldest entry is still cached")
	}
	for _, want := range ents {
		var got raft.Log
		if err := s.GetLog(want.Index, &got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Data, want.Data) || got.Term != want.Term {
			t.Fatalf("entry %d differs", want.Index)
		}
	}
	s.releaseApplied(39)
	if s.cache[39%entryCacheSize] == nil {
		t.Fatal("a leader dropped an applied entry its followers may still need")
	}
	leading = false
	followed := []*raft.Log{{Index: 41, Term: 3, Type: raft.LogCommand, Data: testBatch(41, 100)}, {Index: 42, Term: 3, Type: raft.LogCommand, Data: testBatch(42, 100)}}
	for _, e := range followed {
		log.Batch(e.Data).SetLeaderEpoch(3) // as the leader of term 3 wrote it
	}
	if err := s.StoreLogs(followed); err != nil {
		t.Fatal(err)
	}
	want := [][]byte{bytes.Clone(followed[0].Data), bytes.Clone(followed[1].Data)} // as stored: the log set the offsets
	for _, e := range followed {
		if c := s.cache[e.Index%entryCacheSize]; c == nil || c.Index != e.Index || !isHeaderOnly(c) {
			t.Fatalf("a follower did not cache the header of entry %d", e.Index)
		}
		for i := range e.Data {
			e.Data[i] = 0xdb // the append stream reuses the buffer
		}
	}
	for _, lead := range []bool{false, true} {
		leading = lead
		for i, e := range followed {
			var got raft.Log
			if err := s.GetLog(e.Index, &got); err != nil {
				t.Fatal(err)
			}
			w := want[i]
			if !lead {
				w = w[:log.BatchHeaderSize]
			}
			if !bytes.Equal(got.Data, w) || got.Term != 3 || isHeaderOnly(&got) == lead {
				t.Fatalf("leading %v: entry %d read back differs from what was stored (%d bytes, extensions %q)", lead, e.Index, len(got.Data), got.Extensions)
			}
			// A header read by a replica that just stepped down is never
			// sent to a follower.
			ww := wireWriter{w: bufio.NewWriter(io.Discard)}
			req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("a"), Addr: []byte("a")}, Term: 3, Entries: []*raft.Log{&got}}
			if err := ww.writeAppendRequest(req); (err == nil) != lead {
				t.Fatalf("leading %v: writing the entry read back: %v", lead, err)
			}
		}
	}
	leading = false
	s.releaseApplied(41)
	for i, c := range s.cache {
		if c != nil && c.Index <= 41 {
			t.Fatalf("a follower's cache still holds applied entry %d in slot %d", c.Index, i)
		}
	}
	if c := s.cache[42%entryCacheSize]; c == nil || c.Index != 42 {
		t.Fatal("a follower dropped an entry not yet applied")
	}
	if s.cacheBytes != log.BatchHeaderSize {
		t.Fatalf("a follower's cache counts %d bytes, holds %d", s.cacheBytes, log.BatchHeaderSize)
	}
}

// Only a leader trusts the CRC its StartAppend checked: a replica in any
// other state (following, a candidate, not yet started: no leader
// function) refuses a batch whose CRC is wrong, and its offset drift
// check runs.
func TestLogStoreChecksWhatALeaderSent(t *testing.T) {
	bad := testBatch(1, 100)
	bad[len(bad)-1] ^= 0xff
	for _, state := range []string{"no raft yet", "not leading", "leading"} {
		fs, idx := vfs.NewMem(), t.TempDir()
		_, s := openTestStore(t, fs, idx, false)
		switch state {
		case "not leading":
			s.leader = func() bool { return false }
		case "leading":
			s.leader = func() bool { return true }
		}
		err := s.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: append([]byte(nil), bad...)}})
		if state == "leading" {
			if err != nil {
				t.Fatalf("%s: %v (a leader checks the framing only)", state, err)
			}
			continue
		}
		if !errors.Is(err, log.ErrCorruptBatch) {
			t.Fatalf("%s: a batch with a wrong CRC: %v", state, err)
		}
		drifted := testBatch(2, 100)
		log.Batch(drifted).SetBaseOffset(7) // the log end is 0
		if err := s.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: drifted}}); err == nil || !strings.Contains(err.Error(), "drifted") {
			t.Fatalf("%s: a batch at another offset than this log's: %v", state, err)
		}
	}
}

// TestEmptyControlBatches: each run of control batches a consumer reads
// becomes one empty batch over the run's offsets (kafka-go reads at most
// two headers in a row before a record), valid by its CRC; data batches
// pass unchanged.
func TestEmptyControlBatches(t *testing.T) {
	var p []byte
	add := func(b []byte, off int64) {
		log.Batch(b).SetBaseOffset(off)
		p = append(p, b...)
	}
	data := func(off int64) []byte {
		return log.BuildBatch(nil, log.BatchOptions{ProducerID: -1, BaseSequence: -1}, []log.Record{{Value: []byte(fmt.Sprint(off)), Timestamp: 1000 + off}})
	}
	ctl := func(off int64) []byte {
		return encodeControl(&raft.Log{Index: uint64(off), Term: 3, Type: raft.LogNoop, AppendedAt: time.UnixMilli(2000 + off)})
	}
	for off, k := range "dcccdcd" + "cc" {
		if k == 'd' {
			add(data(int64(off)), int64(off))
		} else {
			add(ctl(int64(off)), int64(off))
		}
	}
	type span struct {
		base, last int64
		count      int32
		maxTs      int64
	}
	var got []span
	log.Batches(emptyControlBatches(p), func(b log.Batch) bool {
		if b.IsControl() || b.CRC() != b.ComputeCRC() {
			t.Fatalf("batch at %d: control %v, CRC %x computed %x", b.BaseOffset(), b.IsControl(), b.CRC(), b.ComputeCRC())
		}
		got = append(got, span{b.BaseOffset(), b.LastOffset(), b.RecordCount(), b.MaxTimestamp()})
		return true
	})
	want := []span{{0, 0, 1, 1000}, {1, 3, 0, 2003}, {4, 4, 1, 1004}, {5, 5, 0, 2005}, {6, 6, 1, 1006}, {7, 8, 0, 2008}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

// A power loss at any write of the dense layout's store (its log, its
// entries file, its anchor), kind or tearing unsynced bytes, leaves a
// store that opens and holds, at each index, an entry stored there: the
// log's batches and the entries file's records still merge by index.
func TestDenseStoreCrashAtEveryWrite(t *testing.T) {
	type version struct {
		term uint64
		typ  raft.LogType
		data []byte
	}
	script := func(t *testing.T, fs *vfs.MemFS, stored map[uint64][]version) {
		l, s := openTestStore(t, fs, t.TempDir(), true)
		defer l.Close()
		s.leader = func() bool { return true }
		store := func(ents []*raft.Log) {
			for _, e := range ents {
				stored[e.Index] = append(stored[e.Index], version{e.Term, e.Type, bytes.Clone(e.Data)})
			}
			if err := s.StoreLogs(ents); err != nil {
				t.Fatal(err)
			}
		}
		store(raftEntries(1, 6, 1))
		store(raftEntries(7, 5, 2))
		if err := s.DeleteRange(9, 11); err != nil {
			t.Fatal(err)
		}
		store(raftEntries(9, 6, 3))
		s.applied = func() uint64 { return 10 }
		if err := s.DeleteRange(1, 6); err != nil {
			t.Fatal(err)
		}
		store(raftEntries(15, 3, 3))
	}
	setup := func() *vfs.MemFS {
		fs := vfs.NewMem()
		fs.MkdirAll("/r")
		fs.SyncDir("/")
		return fs
	}
	fs := setup()
	stored := map[uint64][]version{}
	script(t, fs, stored)
	ops := fs.Ops()
	crashes, checked := 0, 0
	for op := 1; op <= ops; op++ {
		for _, torn := range []bool{false, true} {
			fs := setup()
			var crashed *vfs.MemFS
			fs.SetHook(func(n int, kind, name string) error {
				if n == op && crashed == nil {
					opts := vfs.CrashOptions{}
					if torn {
						opts = vfs.CrashOptions{Rand: rand.New(rand.NewPCG(uint64(op), 1)), Torn: true}
					}
					crashed = fs.CrashClone(opts)
				}
				return nil
			})
			script(t, fs, map[uint64][]version{})
			if crashed == nil {
				continue
			}
			crashes++
			l, s := openTestStore(t, crashed, t.TempDir(), true)
			first, _ := s.FirstIndex()
			last, _ := s.LastIndex()
			// Nothing that survived is dropped: the store holds every
			// batch from the anchor on and every record at or below the
			// log end (counted apart from the merge).
			if a, ok, err := readAnchor(crashed, "/r"); err == nil && ok {
				survived := 0
				l.WalkBatches(a.offset, func(log.Batch) bool { survived++; return true })
				for _, se := range s.side.ents {
					if se.Index >= a.index && se.offset <= l.EndOffset() {
						survived++
					}
				}
				held := 0
				if last > 0 {
					held = int(last - first + 1)
				}
				if held != survived {
					t.Fatalf("crash at op %d (torn %v): the store holds %d entries, %d survived on disk", op, torn, held, survived)
				}
			}
			for i := first; i <= last && last > 0; i++ {
				var e raft.Log
				if err := s.GetLog(i, &e); err != nil {
					t.Fatalf("crash at op %d (torn %v): entry %d: %v", op, torn, i, err)
				}
				ok := false
				for _, v := range stored[i] {
					data := e.Data
					if e.Type == raft.LogCommand {
						data = bytes.Clone(e.Data)
						log.Batch(data).SetBaseOffset(0)
						log.Batch(data).SetLeaderEpoch(0)
					}
					ok = ok || (v.term == e.Term && v.typ == e.Type && bytes.Equal(v.data, data))
				}
				if !ok {
					t.Fatalf("crash at op %d (torn %v): entry %d is %+v, never stored there", op, torn, i, e)
				}
				checked++
			}
			l.Close()
		}
	}
	if crashes < 2*(ops-2) || checked < crashes {
		t.Fatalf("%d crashes over %d operations, %d entries checked", crashes, ops, checked)
	}
	t.Logf("%d crashes over %d operations, %d entries checked", crashes, ops, checked)
}

// A replica keeps the layout it was written in: one written before the
// dense layout existed opens legacy, and asking for the other layout of
// a replica on disk is refused (its group's replicas would give the same
// entries different offsets). A new replica takes the layout asked for.
func TestStoreLayoutIsKept(t *testing.T) {
	for _, lay := range layouts {
		t.Run(lay.name, func(t *testing.T) {
			fs := vfs.NewMem()
			l, s := openTestStore(t, fs, t.TempDir(), lay.dense)
			if (s.side != nil) != lay.dense {
				t.Fatalf("a new replica asked to be dense=%v has an entries file: %v", lay.dense, s.side != nil)
			}
			if err := s.StoreLogs(raftEntries(1, 3, 1)); err != nil {
				t.Fatal(err)
			}
			l.Close()
			l, err := log.Open("/r/log", log.WithFS(fs), log.WithIndexDir(t.TempDir()))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if _, _, err := openLogStore(l, fs, "/r", nil, !lay.dense); err == nil {
				t.Fatalf("a %s replica opened in the other layout", lay.name)
			}
			s, _, err = openLogStore(l, fs, "/r", nil, lay.dense)
			if err != nil {
				t.Fatal(err)
			}
			if last, _ := s.LastIndex(); last != 3 {
				t.Fatalf("last index %d after reopening", last)
			}
		})
	}
}

// TestStoreStopsOnItsOwnWriteFailure: a write of the store's own files
// (here the anchor of a new run of entries, on a full disk) stops the
// store as a failed log write stops the log: it stores nothing more, and
// the replica reports the error so that the node reopens it.
func TestStoreStopsOnItsOwnWriteFailure(t *testing.T) {
	fs := vfs.NewMem()
	l, err := log.Open("/r/log", log.WithFS(fs), log.WithIndexDir(t.TempDir()), log.WithConfig(log.Config{SegmentBytes: 1024, SegmentIndexBytes: 4096}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	disk := &errorfs.DiskFull{}
	s, _, err := openLogStore(l, errorfs.Wrap(fs, disk), "/r", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	disk.Set(true)
	if err := s.StoreLogs(raftEntries(1, 4, 1)); !errors.Is(err, errorfs.ErrNoSpace) {
		t.Fatalf("store on a full disk: %v", err)
	}
	if !errors.Is(s.writeErr(), errorfs.ErrNoSpace) {
		t.Fatalf("write error after the failure: %v", s.writeErr())
	}
	disk.Set(false)
	if err := s.StoreLogs(raftEntries(1, 4, 1)); err == nil {
		t.Fatal("the store took entries after a failed write, before a reopen")
	}
}

// TestStableStoreWaitsForADescriptor: a change that finds the process out
// of file descriptors tries again rather than failing (raft panics on a
// term it cannot save); another error fails at once.
func TestStableStoreWaitsForADescriptor(t *testing.T) {
	mem := vfs.NewMem()
	mem.MkdirAll("/s")
	mem.SyncDir("/")
	var mu sync.Mutex
	refusals, fail := 3, error(syscall.EMFILE)
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		mu.Lock()
		defer mu.Unlock()
		if op.Kind != errorfs.OpOpenRW || refusals == 0 {
			return nil
		}
		refusals--
		return fail
	})
	s, err := openStableStore(errorfs.Wrap(mem, inj), "/s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatalf("a change out of descriptors three times: %v", err)
	}
	if v, _ := s.GetUint64([]byte("CurrentTerm")); v != 7 {
		t.Fatalf("term %d, want 7", v)
	}
	mu.Lock()
	refusals, fail = 1, errors.New("test: another error")
	mu.Unlock()
	if err := s.SetUint64([]byte("CurrentTerm"), 8); err == nil {
		t.Fatal("a change whose open failed otherwise succeeded")
	}
}
