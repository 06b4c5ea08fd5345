package log

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

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
