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

// The run's picture: acknowledged writes per second (top) and write
// latency p50/p99/max per second (bottom, log scale), both with the fault
// windows shaded, one colour per kind of fault.

var faultColors = map[string]color.NRGBA{
	"kill":             {R: 230, G: 85, B: 13, A: 60},
	"leader":           {R: 166, G: 54, B: 3, A: 60},
	"pause":            {R: 49, G: 130, B: 189, A: 60},
	"power":            {R: 117, G: 107, B: 177, A: 60},
	"partition":        {R: 49, G: 163, B: 84, A: 60},
	"partition-leader": {R: 0, G: 109, B: 44, A: 60},
}

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

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// shade adds a translucent band per fault over [ymin, ymax].
func shade(p *plot.Plot, faults []fault, ymin, ymax float64) error {
	for _, f := range faults {
		poly, err := plotter.NewPolygon(plotter.XYs{{X: f.Start, Y: ymin}, {X: f.End, Y: ymin}, {X: f.End, Y: ymax}, {X: f.Start, Y: ymax}})
		if err != nil {
			return err
		}
		c, ok := faultColors[f.Kind]
		if !ok {
			c = color.NRGBA{R: 128, G: 128, B: 128, A: 70}
		}
		poly.Color = c
		poly.LineStyle.Width = 0
		p.Add(poly)
	}
	return nil
}

// writePlot draws the run to path as a PNG.
func writePlot(path string, writes []Write, faults []fault) error {
	counts, lat := perSecond(writes)
	thr := plot.New()
	thr.Title.Text = "acknowledged writes per second (faults shaded)"
	thr.X.Label.Text = "seconds"
	thr.Y.Label.Text = "writes/s"
	maxCount := 1.0
	pts := make(plotter.XYs, len(counts))
	for s, n := range counts {
		pts[s] = plotter.XY{X: float64(s) + 0.5, Y: n}
		maxCount = max(maxCount, n)
	}
	if err := shade(thr, faults, 0, maxCount*1.05); err != nil {
		return err
	}
	line, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	line.Color = color.RGBA{A: 255}
	thr.Add(line)
	thr.Y.Min = 0

	lp := plot.New()
	lp.Title.Text = "write latency per second, ms (log scale)"
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
	var lines []*plotter.Line
	for _, sr := range series {
		var xy plotter.XYs
		for s, l := range lat {
			if len(l) == 0 {
				continue
			}
			v := max(quantile(l, sr.q), 0.01)
			xy = append(xy, plotter.XY{X: float64(s) + 0.5, Y: v})
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
		lines = append(lines, ln)
		lp.Legend.Add(sr.name, ln)
	}
	if err := shade(lp, faults, 0.05, maxLat*1.5); err != nil {
		return err
	}
	for _, ln := range lines {
		lp.Add(ln)
	}
	lp.Y.Min, lp.Y.Max = 0.05, maxLat*1.5
	lp.Legend.Top = true
	// Fault kinds in the throughput legend.
	seen := map[string]bool{}
	for _, f := range faults {
		if seen[f.Kind] {
			continue
		}
		seen[f.Kind] = true
		c, ok := faultColors[f.Kind]
		if !ok {
			continue
		}
		sw, _ := plotter.NewPolygon(plotter.XYs{{X: 0, Y: 0}})
		sw.Color = color.NRGBA{R: c.R, G: c.G, B: c.B, A: 200}
		thr.Legend.Add(f.Kind, sw)
	}
	thr.Legend.Top = true
	xmax := float64(len(counts)) + 1
	thr.X.Min, thr.X.Max, lp.X.Min, lp.X.Max = 0, xmax, 0, xmax

	const w, h = 30 * vg.Centimeter, 20 * vg.Centimeter
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadX: vg.Millimeter * 2, PadY: vg.Millimeter * 4}
	canvases := plot.Align([][]*plot.Plot{{thr}, {lp}}, tiles, dc)
	thr.Draw(canvases[0][0])
	lp.Draw(canvases[1][0])
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
