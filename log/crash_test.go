package log

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/raftlog/raftlog/log/vfs"
)

// crashPoint is the state captured at one file-system operation of a
// workload: what a power loss right then would leave, and what the
// workload knew at that moment.
type crashPoint struct {
	op      int
	kind    string
	fs      *vfs.MemFS
	indexes map[string][]byte // the index directory at the crash
	// Every version of the log the workload may have had on disk: each a
	// list of batches from offset 0. The recovered log must be a prefix of
	// one of them.
	histories [][]Batch
	durable   int // batches of histories[last] known synced
	start     int64
}

// crashModel is the workload's view of what it wrote.
type crashModel struct {
	versions [][]Batch // earlier versions (before a truncation), then the current one
	durable  int
	start    int64
	// Background tasks of the log (sealed segments' fsyncs), queued and
	// run at points the seeded rng picks, so that a crash point falls
	// before, between and after them, and every run is the same.
	bg  []func()
	rng *rand.Rand
}

// runBackground runs some queued background tasks, all of them when all
// is set, oldest first or not.
func (m *crashModel) runBackground(all bool) {
	for len(m.bg) > 0 && (all || m.rng.IntN(2) == 0) {
		i := 0
		if !all {
			i = m.rng.IntN(len(m.bg))
		}
		fn := m.bg[i]
		m.bg = append(m.bg[:i], m.bg[i+1:]...)
		fn()
	}
}

func (m *crashModel) current() []Batch { return m.versions[len(m.versions)-1] }

func snapshotDir(t testing.TB, dir string) map[string][]byte {
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	snap := make(map[string][]byte, len(ents))
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		snap[e.Name()] = b
	}
	return snap
}

// restoreDir makes dir hold exactly the files of snap.
func restoreDir(t testing.TB, dir string, snap map[string][]byte) {
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range snap {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// runCrashWorkload runs workload on a fresh MemFS and captures a crash
// point at every mutating file-system operation.
func runCrashWorkload(t *testing.T, cfg Config, opts vfs.CrashOptions, workload func(l *Log, m *crashModel)) []crashPoint {
	fs := vfs.NewMem()
	idx := t.TempDir()
	m := &crashModel{versions: [][]Batch{nil}, rng: rand.New(rand.NewPCG(5, 6))}
	var points []crashPoint
	fs.SetHook(func(op int, kind, name string) error {
		hist := make([][]Batch, len(m.versions))
		for i, v := range m.versions {
			hist[i] = append([]Batch(nil), v...)
		}
		points = append(points, crashPoint{op: op, kind: kind, fs: fs.CrashClone(opts), indexes: snapshotDir(t, idx),
			histories: hist, durable: m.durable, start: m.start})
		return nil
	})
	l, err := Open("/data/t-0", WithFS(fs), WithIndexDir(idx), WithConfig(cfg),
		func(o *options) { o.background = func(fn func()) { m.bg = append(m.bg, fn) } })
	if err != nil {
		t.Fatal(err)
	}
	workload(l, m)
	m.runBackground(true)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	fs.SetHook(nil)
	return points
}

// modelAppend appends p (whole batches) to l and to the model. The model
// learns of the batches before the append starts, since any prefix of
// their bytes may reach the disk.
func modelAppend(t *testing.T, l *Log, m *crashModel, p []byte) {
	t.Helper()
	m.runBackground(false)
	next := l.EndOffset()
	cur := m.current()
	Batches(p, func(b Batch) bool {
		c := append(Batch(nil), b...)
		c.SetBaseOffset(next)
		c.SetLeaderEpoch(3)
		next = c.NextOffset()
		cur = append(cur, c)
		return true
	})
	m.versions[len(m.versions)-1] = cur
	if _, err := appendRaw(l, p, 3); err != nil {
		t.Fatalf("append: %v", err)
	}
}

func modelFlush(t *testing.T, l *Log, m *crashModel) {
	t.Helper()
	m.runBackground(false)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	m.durable = len(m.current())
}

// checkCrashPoint reopens the log from a crash point and checks it.
func checkCrashPoint(t *testing.T, cfg Config, p crashPoint, indexDir string) {
	t.Helper()
	where := fmt.Sprintf("crash at op %d (%s)", p.op, p.kind)
	restoreDir(t, indexDir, p.indexes)
	l, err := Open("/data/t-0", WithFS(p.fs), WithIndexDir(indexDir), WithConfig(cfg))
	if err != nil {
		t.Fatalf("%s: open: %v", where, err)
	}
	defer l.Close()
	if err := l.Verify(); err != nil {
		t.Fatalf("%s: indexes disagree with the log after recovery: %v (recovery %+v)", where, err, l.Recovery())
	}
	got := readAll(t, l)
	start := l.StartOffset()
	matched := false
	var why string
	for vi, hist := range p.histories {
		// The recovered log starts at the log start: skip what is below.
		i := 0
		for i < len(hist) && hist[i].NextOffset() <= start {
			i++
		}
		want := hist[i:]
		if len(got) > len(want) {
			why = fmt.Sprintf("version %d: %d batches recovered, only %d written", vi, len(got), len(want))
			continue
		}
		ok := true
		for j := range got {
			if !bytes.Equal(got[j], want[j]) {
				ok, why = false, fmt.Sprintf("version %d: batch %d (offset %d) differs", vi, j, got[j].BaseOffset())
				break
			}
		}
		if !ok {
			continue
		}
		if vi == len(p.histories)-1 && i+len(got) < p.durable {
			t.Fatalf("%s: lost synced data: %d batches recovered from index %d, %d were synced", where, len(got), i, p.durable)
		}
		matched = true
		break
	}
	if !matched {
		t.Fatalf("%s: recovered log is not a prefix of anything written: %s", where, why)
	}
	if start > p.start {
		t.Fatalf("%s: log start %d past the requested %d", where, start, p.start)
	}
	// The recovered log takes appends and survives a clean reopen.
	if _, err := appendRaw(l, mkBatch(2, 20, 99), 9); err != nil {
		t.Fatalf("%s: append after recovery: %v", where, err)
	}
	want := readAll(t, l)
	if err := l.Close(); err != nil {
		t.Fatalf("%s: close: %v", where, err)
	}
	l2, err := Open("/data/t-0", WithFS(p.fs), WithIndexDir(indexDir), WithConfig(cfg))
	if err != nil {
		t.Fatalf("%s: reopen: %v", where, err)
	}
	defer l2.Close()
	if !l2.Recovery().Clean || l2.Recovery().RebuiltIndexes != 0 {
		t.Fatalf("%s: second open not clean: %+v", where, l2.Recovery())
	}
	if got := readAll(t, l2); len(got) != len(want) {
		t.Fatalf("%s: %d batches after clean reopen, %d before", where, len(got), len(want))
	}
	if err := l2.Verify(); err != nil {
		t.Fatalf("%s: after clean reopen: %v", where, err)
	}
}

var crashVariants = []struct {
	name string
	opts func() vfs.CrashOptions
}{
	{"drop-unsynced", func() vfs.CrashOptions { return vfs.CrashOptions{} }},
	{"keep-random-prefix", func() vfs.CrashOptions { return vfs.CrashOptions{Rand: rand.New(rand.NewPCG(11, 12))} }},
	{"torn", func() vfs.CrashOptions { return vfs.CrashOptions{Rand: rand.New(rand.NewPCG(13, 14)), Torn: true} }},
}

// TestCrashAtEveryWrite crashes a scripted workload (appends of single
// batches and of many batches at once, flushes, rolls, a log start move) at
// every file-system operation, under three kinds of power loss, and checks
// that recovery keeps every synced batch, yields a prefix of what was
// written with no half batch, and leaves indexes that agree with the log.
func TestCrashAtEveryWrite(t *testing.T) {
	cfg := Config{SegmentBytes: 4000, IndexIntervalBytes: 300, SegmentIndexBytes: 480}
	for _, v := range crashVariants {
		t.Run(v.name, func(t *testing.T) {
			points := runCrashWorkload(t, cfg, v.opts(), func(l *Log, m *crashModel) {
				r := rand.New(rand.NewPCG(21, 22))
				for i := 0; i < 24; i++ {
					switch {
					case i%5 == 4:
						var buf []byte
						for j := 0; j < 4; j++ {
							buf = append(buf, rndBatch(r, int64(100*i+j))...)
						}
						modelAppend(t, l, m, buf)
					default:
						modelAppend(t, l, m, rndBatch(r, int64(100*i)))
					}
					if i%4 == 3 {
						modelFlush(t, l, m)
					}
					if i == 15 {
						target := m.current()[3].BaseOffset()
						m.start = target
						if err := l.AdvanceStart(target); err != nil {
							t.Fatal(err)
						}
					}
				}
			})
			if len(points) < 50 {
				t.Fatalf("only %d crash points", len(points))
			}
			idx := t.TempDir()
			for _, p := range points {
				checkCrashPoint(t, cfg, p, idx)
			}
		})
	}
}

// TestCrashDuringTruncation crashes at every operation of a workload that
// truncates a suffix (as a Raft follower does) and appends different
// batches: the recovered log is a prefix of the log before or after the
// cut, never a mix, and the dropped batches never come back once the
// truncation returned.
func TestCrashDuringTruncation(t *testing.T) {
	cfg := Config{SegmentBytes: 3000, IndexIntervalBytes: 200, SegmentIndexBytes: 480}
	for _, v := range crashVariants {
		t.Run(v.name, func(t *testing.T) {
			points := runCrashWorkload(t, cfg, v.opts(), func(l *Log, m *crashModel) {
				r := rand.New(rand.NewPCG(31, 32))
				for i := 0; i < 14; i++ {
					modelAppend(t, l, m, rndBatch(r, int64(i)))
				}
				modelFlush(t, l, m)
				// Cut back into an earlier, sealed segment.
				cur := m.current()
				keep := 4
				cut := cur[keep].BaseOffset()
				m.versions = append(m.versions, append([]Batch(nil), cur[:keep]...))
				if _, err := l.TruncateTo(cut); err != nil {
					t.Fatal(err)
				}
				// Once TruncateTo returned, the old version is gone for good.
				m.versions = m.versions[len(m.versions)-1:]
				m.durable = keep
				for i := 0; i < 8; i++ {
					modelAppend(t, l, m, rndBatch(r, int64(1000+i)))
				}
				modelFlush(t, l, m)
			})
			idx := t.TempDir()
			for _, p := range points {
				checkCrashPoint(t, cfg, p, idx)
			}
		})
	}
}

func TestRegressionCrashDuringReset(t *testing.T) {
	cfg := Config{SegmentBytes: 3000, IndexIntervalBytes: 200, SegmentIndexBytes: 480}
	for _, v := range crashVariants {
		t.Run(v.name, func(t *testing.T) {
			points := runCrashWorkload(t, cfg, v.opts(), func(l *Log, m *crashModel) {
				r := rand.New(rand.NewPCG(41, 42))
				for i := 0; i < 14; i++ {
					modelAppend(t, l, m, rndBatch(r, int64(i)))
				}
				modelFlush(t, l, m)
				doReset := func(off int64) {
					m.versions = append(m.versions, nil)
					m.start = off
					if err := l.Reset(off); err != nil {
						t.Fatal(err)
					}
					m.versions = m.versions[len(m.versions)-1:]
					m.durable = 0
				}
				doReset(m.current()[6].BaseOffset())
				for i := 0; i < 6; i++ {
					modelAppend(t, l, m, rndBatch(r, int64(100+i)))
				}
				modelFlush(t, l, m)
				doReset(l.EndOffset() + 100)
				for i := 0; i < 4; i++ {
					modelAppend(t, l, m, rndBatch(r, int64(200+i)))
				}
				modelFlush(t, l, m)
			})
			idx := t.TempDir()
			for _, p := range points {
				checkCrashPoint(t, cfg, p, idx)
			}
		})
	}
}

func TestRegressionCrashRandomOps(t *testing.T) {
	cfg := Config{SegmentBytes: 1500, IndexIntervalBytes: 150, SegmentIndexBytes: 480}
	for seed := uint64(1); seed <= 3; seed++ {
		for _, v := range crashVariants {
			t.Run(fmt.Sprintf("%d-%s", seed, v.name), func(t *testing.T) {
				var ops []string
				points := runCrashWorkload(t, cfg, v.opts(), func(l *Log, m *crashModel) {
					r := rand.New(rand.NewPCG(seed, 99))
					for i := 0; i < 40; i++ {
						switch k := r.IntN(10); {
						case k < 6:
							modelAppend(t, l, m, rndBatch(r, int64(10*i)))
						case k == 6:
							modelFlush(t, l, m)
							ops = append(ops, "flush")
						case k == 7 || k == 8:
							start, end := l.StartOffset(), l.EndOffset()
							if end <= start {
								continue
							}
							off := start + r.Int64N(end-start)
							segs := l.Segments()
							if off <= segs[0].BaseOffset {
								m.versions = append(m.versions, nil)
								m.start = off
								if _, err := l.TruncateTo(off); err != nil {
									t.Fatal(err)
								}
								m.versions = m.versions[len(m.versions)-1:]
								m.durable = 0
								ops = append(ops, fmt.Sprintf("truncate-reset %d", off))
								continue
							}
							var kept []Batch
							for _, b := range m.current() {
								if b.LastOffset() < off {
									kept = append(kept, b)
								}
							}
							m.versions = append(m.versions, kept)
							if _, err := l.TruncateTo(off); err != nil {
								t.Fatal(err)
							}
							m.versions = m.versions[len(m.versions)-1:]
							m.durable = min(m.durable, len(kept))
							ops = append(ops, fmt.Sprintf("truncate %d", off))
						case k == 9:
							start, end := l.StartOffset(), l.EndOffset()
							if end <= start {
								continue
							}
							off := start + r.Int64N(end-start+1)
							m.start = max(m.start, off)
							if err := l.AdvanceStart(off); err != nil {
								t.Fatal(err)
							}
							ops = append(ops, fmt.Sprintf("advance %d", off))
						}
					}
				})
				t.Logf("ops %v, %d points", ops, len(points))
				idx := t.TempDir()
				for _, p := range points {
					checkCrashPoint(t, cfg, p, idx)
				}
			})
		}
	}
}
