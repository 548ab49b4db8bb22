package main

import (
	"image/color"
	"math"

	"github.com/pkg/errors"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

var palette = []color.RGBA{
	{R: 0x33, G: 0x33, B: 0x33, A: 0xff}, // float
	{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff},
}

// plot writes the test-accuracy curves as a PNG: the float run, then each format's QAT run from
// its PTQ accuracy where the float run ended.
func (r *results) plot(path string) error {
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
		line, err := plotter.NewLine(xys)
		if err != nil {
			return errors.Wrapf(err, "fashion: plotting %s", name)
		}
		line.Color = palette[i%len(palette)]
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(name, line)
		return nil
	}
	if err := add(0, "float32", r.FloatCurve); err != nil {
		return err
	}
	for i, rw := range r.Rows {
		if err := add(i+1, "QAT "+rw.Format, rw.Curve); err != nil {
			return err
		}
	}
	if err := p.Save(9*vg.Inch, 5*vg.Inch, path); err != nil {
		return errors.Wrapf(err, "fashion: writing %s", path)
	}
	return nil
}
