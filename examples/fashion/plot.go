package main

import (
	"image/color"
	"io"
	"math"

	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/plotstyle"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// palette colours the float run, then the formats.
var palette = append([]color.RGBA{plotstyle.Baseline()}, plotstyle.Colors(7)...)

// plot draws the test-accuracy curves as a PNG: the float run, then each format's QAT run from its
// PTQ accuracy where the float run ended.
func (r *results) plot() (io.WriterTo, error) {
	p := plot.New()
	p.Title.Text = "Fashion-MNIST test accuracy: float training, then QAT from the float weights"
	p.X.Label.Text = "epoch"
	p.Y.Label.Text = "test accuracy"
	// From just below the lowest accuracy (in steps of 0.05, and at most 0.4, leaving the lower
	// left corner to the legend) to 1.
	lowest := 1.0
	for _, pt := range r.FloatCurve {
		lowest = min(lowest, pt.Accuracy)
	}
	for _, rw := range r.Rows {
		for _, pt := range rw.Curve {
			lowest = min(lowest, pt.Accuracy)
		}
	}
	p.Y.Min, p.Y.Max = max(0, min(math.Floor(lowest*20)/20-0.05, 0.4)), 1
	p.Legend.Top, p.Legend.Left = false, true
	p.Legend.XOffs = vg.Points(10)
	p.Add(plotter.NewGrid())
	add := func(i int, name string, points []point) error {
		xys := make(plotter.XYs, len(points))
		for j, pt := range points {
			xys[j] = plotter.XY{X: pt.Epoch, Y: pt.Accuracy}
		}
		if _, err := plotstyle.AddLine(p, name, xys, palette[i%len(palette)]); err != nil {
			return errors.Wrapf(err, "plotting %s", name)
		}
		return nil
	}
	if err := add(0, "float32", r.FloatCurve); err != nil {
		return nil, err
	}
	for i, rw := range r.Rows {
		if err := add(i+1, "QAT "+rw.Format, rw.Curve); err != nil {
			return nil, err
		}
	}
	png, err := p.WriterTo(9*vg.Inch, 5*vg.Inch, "png")
	return png, errors.Wrap(err, "drawing the curves")
}
