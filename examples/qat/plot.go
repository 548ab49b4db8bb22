package main

import (
	"image/color"
	"io"
	mathrand "math/rand"
	"math/rand/v2"

	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/quanta-ml/quanta/internal/plotstyle"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// randV1 derives a math/rand generator (what datasets.InMemoryDataset takes) from rng.
func randV1(rng *rand.Rand) *mathrand.Rand {
	return mathrand.New(mathrand.NewSource(int64(rng.Uint64())))
}

// palette colours the float run, then the QAT runs.
var palette = append([]color.RGBA{plotstyle.Baseline()}, plotstyle.Colors(5)...)

// plotCurves writes the test-accuracy curves as a PNG file, whatever path's extension: the float
// run, then each QAT run starting at its PTQ accuracy where the float run ended (a dotted
// vertical line).
func plotCurves(path string, curves []curve, floatSteps int) error {
	p := plot.New()
	p.Title.Text = "Test accuracy: float training, then QAT from the float weights"
	p.X.Label.Text = "training step"
	p.Y.Label.Text = "test accuracy"
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top, p.Legend.Left = false, false
	p.Add(plotter.NewGrid())
	for i, c := range curves {
		xys := make(plotter.XYs, len(c.points))
		for j, pt := range c.points {
			xys[j] = plotter.XY{X: float64(pt.step), Y: pt.acc}
		}
		if _, err := plotstyle.AddLine(p, c.name, xys, palette[i%len(palette)]); err != nil {
			return errors.Wrapf(err, "plotting %s", c.name)
		}
	}
	boundary, err := plotter.NewLine(plotter.XYs{{X: float64(floatSteps), Y: 0}, {X: float64(floatSteps), Y: 1}})
	if err != nil {
		return errors.Wrap(err, "plotting the QAT start")
	}
	boundary.Dashes = []vg.Length{vg.Points(2), vg.Points(3)}
	boundary.Color = color.Gray{Y: 0x80}
	p.Add(boundary)
	p.Legend.Add("QAT starts (PTQ accuracy)", boundary)
	// A PNG whatever path's extension (plot.Save picks the format from it, and for an unknown
	// one fails after creating the file), replaced whole (fileio.WriteAtomic): an interrupted run
	// leaves no truncated file.
	png, err := p.WriterTo(8*vg.Inch, 5*vg.Inch, "png")
	if err != nil {
		return errors.Wrap(err, "plotting the curves")
	}
	return fileio.WriteAtomic("writing "+path, path, func(w io.Writer) error {
		_, err := png.WriteTo(w)
		return err
	})
}
