package bench

import (
	"fmt"
	"image/color"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Series is one set of bars, a value per category.
type Series struct {
	Name   string
	Values []float64
}

// Mark is a horizontal line across the chart (a target, say).
type Mark struct {
	Name string
	Y    float64
}

// Chart is a grouped bar chart: for each category, one bar per series.
type Chart struct {
	Title      string
	YLabel     string
	Categories []string
	Series     []Series
	Marks      []Mark
}

var palette = []color.Color{
	color.RGBA{R: 0x9e, G: 0x9e, B: 0x9e, A: 0xff}, // the reference in grey
	color.RGBA{R: 0x42, G: 0x85, B: 0xf4, A: 0xff},
	color.RGBA{R: 0xdb, G: 0x44, B: 0x37, A: 0xff},
	color.RGBA{R: 0x0f, G: 0x9d, B: 0x58, A: 0xff},
	color.RGBA{R: 0xf4, G: 0xb4, B: 0x00, A: 0xff},
}

var markColors = []color.Color{
	color.Black,
	color.RGBA{R: 0xe6, G: 0x7e, B: 0x22, A: 0xff},
	color.RGBA{R: 0x8e, G: 0x44, B: 0xad, A: 0xff},
}

// Save renders the chart to path (the format follows the extension:
// .png, .svg, .pdf) at width × height inches.
func (c Chart) Save(path string, width, height vg.Length) error {
	p := plot.New()
	p.Title.Text = c.Title
	p.Y.Label.Text = c.YLabel
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	n := len(c.Series)
	if n == 0 {
		return fmt.Errorf("chart %q: no series", c.Title)
	}
	w := vg.Points(60 / float64(n))
	for i, s := range c.Series {
		if len(s.Values) != len(c.Categories) {
			return fmt.Errorf("chart %q: series %q has %d values for %d categories", c.Title, s.Name, len(s.Values), len(c.Categories))
		}
		bars, err := plotter.NewBarChart(plotter.Values(s.Values), w)
		if err != nil {
			return fmt.Errorf("series %q: %w", s.Name, err)
		}
		bars.LineStyle.Width = 0
		bars.Color = palette[i%len(palette)]
		bars.Offset = w * vg.Length(float64(i)-float64(n-1)/2)
		p.Add(bars)
		p.Legend.Add(s.Name, bars)
	}
	for i, m := range c.Marks {
		l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: m.Y}, {X: float64(len(c.Categories)) - 0.5, Y: m.Y}})
		if err != nil {
			return err
		}
		l.Color = markColors[i%len(markColors)]
		l.Width = vg.Points(1.5)
		l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(m.Name, l)
	}
	// Headroom above the tallest bar, which would otherwise touch the
	// title.
	top := 0.0
	for _, s := range c.Series {
		if len(s.Values) > 0 {
			top = max(top, slices.Max(s.Values))
		}
	}
	for _, m := range c.Marks {
		top = max(top, m.Y)
	}
	p.Y.Max = top * 1.08
	p.NominalX(c.Categories...)
	p.Add(plotter.NewGrid())
	p.Legend.Padding = vg.Points(2)
	p.Legend.ThumbnailWidth = vg.Points(14)
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.X.Tick.Label.Font.Size = vg.Points(9)
	p.X.Tick.Label.Rotation = 0
	p.X.Tick.Label.XAlign = draw.XCenter
	return p.Save(width, height, path)
}
