package main

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The plot of a small history is a PNG of the stated size, and the fault
// window is drawn in its colour.
func TestPlot(t *testing.T) {
	var writes []Write
	for i := 0; i < 3000; i++ {
		at := float64(i) / 100
		writes = append(writes, Write{Acked: i%7 != 0, At: at, Took: 0.001 + float64(i%50)/1000})
	}
	faults := []fault{{Kind: "partition", Start: 10, End: 15}, {Kind: "kill", Start: 20, End: 22}}
	path := filepath.Join(t.TempDir(), "plot.png")
	if err := writePlot(path, writes, faults); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	if b.Dx() < 800 || b.Dy() < 500 {
		t.Fatalf("plot is %v", b)
	}
	// Somewhere the partition's green shows (more green than red or blue).
	green := 0
	for y := b.Min.Y; y < b.Max.Y; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			r, g, bl, _ := img.At(x, y).RGBA()
			if g > r+0x1000 && g > bl+0x1000 {
				green++
			}
		}
	}
	if green == 0 {
		t.Fatal("no fault window shaded")
	}
}

// A long run is drawn per interval: at most maxPoints of them, each with
// the slowest, median and fastest second of its seconds and the
// latencies of all its writes.
func TestPlotSpans(t *testing.T) {
	counts := make([]float64, 3600)
	lat := make([][]float64, 3600)
	for s := range counts {
		counts[s] = float64(s % 10)
		lat[s] = []float64{float64(s % 10)}
	}
	step := interval(len(counts))
	sps := spans(counts, lat, step)
	if step != 9 || len(sps) != 400 || len(sps) > maxPoints {
		t.Fatalf("step %d, %d intervals", step, len(sps))
	}
	for i, sp := range sps {
		if sp.lo > sp.med || sp.med > sp.hi || len(sp.latencies) != step || sp.mid != float64(i*step)+float64(step)/2 {
			t.Fatalf("interval %d: %+v", i, sp)
		}
	}
	if sp := sps[0]; sp.lo != 0 || sp.hi != 8 || sp.med != 4 {
		t.Fatalf("first interval (rates 0..8): %+v", sp)
	}
	if got := interval(60); got != 1 {
		t.Fatalf("a minute's run drawn per %d s", got)
	}
	if got := faultKinds([]fault{{Kind: "zzz"}, {Kind: "partition"}, {Kind: "kill"}, {Kind: "kill"}}); strings.Join(got, ",") != "kill,partition,zzz" {
		t.Fatalf("lanes %v", got)
	}
}
