package log

import (
	"math/rand/v2"
	"testing"
)

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
