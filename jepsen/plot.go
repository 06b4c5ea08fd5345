package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The run's picture, three aligned panels over one time axis: acknowledged
// writes per second (top), write latency (middle, log scale) and the
// faults, one lane per kind (bottom). A run longer than maxPoints seconds
// is drawn per interval of several seconds: the write rate as the band
// from the slowest to the fastest second of the interval with its median
// second as a line, the latency as the interval's p50, p99 and max.

var faultColors = map[string]color.NRGBA{
	"kill":             {R: 230, G: 85, B: 13, A: 255},
	"leader":           {R: 166, G: 54, B: 3, A: 255},
	"pause":            {R: 49, G: 130, B: 189, A: 255},
	"power":            {R: 117, G: 107, B: 177, A: 255},
	"power-all":        {R: 84, G: 39, B: 143, A: 255},
	"member":           {R: 140, G: 140, B: 140, A: 255},
	"partition":        {R: 49, G: 163, B: 84, A: 255},
	"partition-leader": {R: 0, G: 109, B: 44, A: 255},
}

// maxPoints is the most intervals a panel draws: about one per two
// pixels of the picture's width.
const maxPoints = 400

// interval is the seconds per drawn interval of a run of n seconds.
func interval(n int) int { return max(1, (n+maxPoints-1)/maxPoints) }

// perSecond buckets acknowledged writes by the second they were
// acknowledged in: counts and latencies (ms), sorted.
func perSecond(writes []Write) (counts []float64, lat [][]float64) {
	for _, w := range writes {
		if !w.Acked {
			continue
		}
		s := int(w.At + w.Took)
		for len(counts) <= s {
			counts = append(counts, 0)
			lat = append(lat, nil)
		}
		counts[s]++
		lat[s] = append(lat[s], w.Took*1000)
	}
	for _, l := range lat {
		sort.Float64s(l)
	}
	return counts, lat
}

// span is one drawn interval: its middle, the slowest, median and fastest
// second's write rate, and the latencies (ms) of its writes, sorted.
type span struct {
	mid         float64
	lo, med, hi float64
	latencies   []float64
}

// spans groups the seconds into intervals of step seconds.
func spans(counts []float64, lat [][]float64, step int) []span {
	var out []span
	for from := 0; from < len(counts); from += step {
		to := min(from+step, len(counts))
		rates := append([]float64(nil), counts[from:to]...)
		sort.Float64s(rates)
		sp := span{mid: float64(from+to) / 2, lo: rates[0], med: quantile(rates, 0.5), hi: rates[len(rates)-1]}
		for _, l := range lat[from:to] {
			sp.latencies = append(sp.latencies, l...)
		}
		sort.Float64s(sp.latencies)
		out = append(out, sp)
	}
	return out
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// faultKinds are the kinds of faults in the order of their lanes (the
// order of faultColors' names, then any other kind by name).
func faultKinds(faults []fault) []string {
	seen := map[string]bool{}
	for _, f := range faults {
		seen[f.Kind] = true
	}
	var kinds []string
	for _, k := range []string{"kill", "leader", "pause", "power", "power-all", "member", "partition", "partition-leader"} {
		if seen[k] {
			kinds = append(kinds, k)
			delete(seen, k)
		}
	}
	var rest []string
	for k := range seen {
		rest = append(rest, k)
	}
	sort.Strings(rest)
	return append(kinds, rest...)
}

// lanes draws each fault as a bar [start, end] in its kind's lane; a
// fault shorter than minWidth seconds is drawn minWidth wide so that it
// shows.
func lanes(faults []fault, minWidth float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "faults"
	p.X.Label.Text = "seconds"
	kinds := faultKinds(faults)
	lane := map[string]int{}
	var ticks []plot.Tick
	for i, k := range kinds {
		lane[k] = len(kinds) - 1 - i
		ticks = append(ticks, plot.Tick{Value: float64(len(kinds) - 1 - i), Label: k})
	}
	for _, f := range faults {
		y := float64(lane[f.Kind])
		end := max(f.End, f.Start+minWidth)
		bar, err := plotter.NewPolygon(plotter.XYs{{X: f.Start, Y: y - 0.35}, {X: end, Y: y - 0.35}, {X: end, Y: y + 0.35}, {X: f.Start, Y: y + 0.35}})
		if err != nil {
			return nil, err
		}
		c, ok := faultColors[f.Kind]
		if !ok {
			c = color.NRGBA{R: 90, G: 90, B: 90, A: 255}
		}
		bar.Color = c
		bar.LineStyle.Width = 0
		p.Add(bar)
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Min, p.Y.Max = -0.6, float64(max(len(kinds), 1))-0.4
	return p, nil
}

// writePlot draws the run to path as a PNG.
func writePlot(path string, writes []Write, faults []fault) error {
	counts, lat := perSecond(writes)
	step := interval(len(counts))
	sps := spans(counts, lat, step)
	per := "per second"
	if step > 1 {
		per = fmt.Sprintf("per %d s interval", step)
	}

	thr := plot.New()
	thr.X.Label.Text = "seconds"
	thr.Y.Label.Text = "writes/s"
	med := make(plotter.XYs, len(sps))
	for i, sp := range sps {
		med[i] = plotter.XY{X: sp.mid, Y: sp.med}
	}
	if step > 1 {
		thr.Title.Text = fmt.Sprintf("acknowledged writes per second: median second of each %d s (line), slowest to fastest second (band)", step)
		band := make(plotter.XYs, 0, 2*len(sps))
		for _, sp := range sps {
			band = append(band, plotter.XY{X: sp.mid, Y: sp.hi})
		}
		for i := len(sps) - 1; i >= 0; i-- {
			band = append(band, plotter.XY{X: sps[i].mid, Y: sps[i].lo})
		}
		if len(band) >= 3 {
			poly, err := plotter.NewPolygon(band)
			if err != nil {
				return err
			}
			poly.Color = color.NRGBA{R: 150, G: 150, B: 150, A: 110}
			poly.LineStyle.Width = 0
			thr.Add(poly)
			thr.Legend.Add("slowest–fastest second", poly)
		}
	} else {
		thr.Title.Text = "acknowledged writes per second"
	}
	if len(med) > 0 {
		line, err := plotter.NewLine(med)
		if err != nil {
			return err
		}
		line.Color = color.RGBA{A: 255}
		thr.Add(line)
		if step > 1 {
			thr.Legend.Add("median second", line)
		}
	}
	thr.Y.Min = 0
	thr.Legend.Top = true

	lp := plot.New()
	lp.Title.Text = "write latency " + per + ", ms (log scale)"
	lp.X.Label.Text = "seconds"
	lp.Y.Label.Text = "ms"
	lp.Y.Scale = plot.LogScale{}
	lp.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	maxLat := 1.0
	series := []struct {
		name string
		q    float64
		c    color.RGBA
	}{{"p50", 0.5, color.RGBA{B: 200, A: 255}}, {"p99", 0.99, color.RGBA{R: 220, G: 120, A: 255}}, {"max", 1, color.RGBA{R: 200, A: 255}}}
	for _, sr := range series {
		var xy plotter.XYs
		for _, sp := range sps {
			if len(sp.latencies) == 0 {
				continue
			}
			v := max(quantile(sp.latencies, sr.q), 0.01)
			xy = append(xy, plotter.XY{X: sp.mid, Y: v})
			maxLat = max(maxLat, v)
		}
		if len(xy) == 0 {
			continue
		}
		ln, err := plotter.NewLine(xy)
		if err != nil {
			return err
		}
		ln.Color = sr.c
		lp.Add(ln)
		lp.Legend.Add(sr.name, ln)
	}
	lp.Y.Min, lp.Y.Max = 0.05, maxLat*1.5
	lp.Legend.Top = true

	xmax := float64(len(counts)) + 1
	fp, err := lanes(faults, xmax/1000)
	if err != nil {
		return err
	}
	for _, p := range []*plot.Plot{thr, lp, fp} {
		p.X.Min, p.X.Max = 0, xmax
	}

	const w, h = 30 * vg.Centimeter, 30 * vg.Centimeter
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 3, Cols: 1, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadX: vg.Millimeter * 2, PadY: vg.Millimeter * 4}
	canvases := plot.Align([][]*plot.Plot{{thr}, {lp}, {fp}}, tiles, dc)
	thr.Draw(canvases[0][0])
	lp.Draw(canvases[1][0])
	fp.Draw(canvases[2][0])
	return savePNG(img, path)
}

func savePNG(img *vgimg.Canvas, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// replot draws dir/plot.png again from dir/history.json.
func replot(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "history.json"))
	if err != nil {
		return err
	}
	var h struct {
		Writes []Write
		Faults []fault
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return fmt.Errorf("history.json: %w", err)
	}
	return writePlot(filepath.Join(dir, "plot.png"), h.Writes, h.Faults)
}
