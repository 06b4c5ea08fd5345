package main

import (
	"image/png"
	"os"
	"path/filepath"
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
