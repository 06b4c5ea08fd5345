package main

import (
	"fmt"
	"io"
	"time"

	"github.com/raftlog/raftlog/cmd/raftlog/internal/bench"
	"github.com/schollz/progressbar/v3"
)

// benchBar shows a run's progress towards whichever of its bounds (the
// duration, the record count) comes first, with the counts so far.
type benchBar struct {
	bar   *progressbar.ProgressBar
	w     io.Writer
	kind  string
	c     bench.Config
	start time.Time
}

const benchBarMax = 1000

func newBenchBar(kind string, c bench.Config, w io.Writer) *benchBar {
	return &benchBar{
		bar: progressbar.NewOptions(benchBarMax,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(kind),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionShowDescriptionAtLineEnd(),
			progressbar.OptionSetRenderBlankState(true)),
		w: w, kind: kind, c: c, start: time.Now(),
	}
}

// update is a bench.Config.Progress.
func (b *benchBar) update(records, bytes int64) {
	el := time.Since(b.start)
	frac := el.Seconds() / b.c.Duration.Seconds()
	if b.c.Records > 0 {
		frac = max(frac, float64(records)/float64(b.c.Records))
	}
	s := max(el.Seconds(), 1e-3)
	b.bar.Describe(fmt.Sprintf("%s %d records, %.0f records/s, %.1f MB/s", b.kind, records, float64(records)/s, float64(bytes)/1e6/s))
	// Only finish() fills the bar: a full bar stops rendering.
	b.bar.Set(int(min(frac, 0.999) * benchBarMax))
}

// finish shows the full bar with the last counts and ends its line.
func (b *benchBar) finish() {
	b.bar.Finish()
	fmt.Fprintln(b.w)
}
