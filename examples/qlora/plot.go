package main

import (
	"image/color"

	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/plotstyle"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// named is a run's curves and its name in the legends.
type named struct {
	name string
	c    curves
}

var palette = []color.RGBA{{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, {R: 0xd6, G: 0x27, B: 0x28, A: 0xff}}

// plotCurves writes a PNG with two panels: the training loss (a moving average over 20 steps)
// and the test accuracy, one line per run.
func plotCurves(path string, runs []named) error {
	loss, acc := plot.New(), plot.New()
	loss.Title.Text, acc.Title.Text = "Training loss (20-step moving average)", "Test accuracy, classes 5-9"
	for _, p := range []*plot.Plot{loss, acc} {
		p.X.Label.Text = "fine-tuning step"
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
	}
	loss.Y.Label.Text, acc.Y.Label.Text = "cross-entropy (log scale)", "accuracy"
	loss.Y.Scale, loss.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	acc.Legend.Top = false // bottom right, below the curves
	for i, r := range runs {
		for _, panel := range []struct {
			p      *plot.Plot
			points []point
		}{{loss, movingAverage(r.c.loss, 20)}, {acc, r.c.acc}} {
			xys := make(plotter.XYs, len(panel.points))
			for j, pt := range panel.points {
				xys[j] = plotter.XY{X: pt.x, Y: pt.y}
			}
			line, err := plotstyle.AddLine(panel.p, r.name, xys, palette[i%len(palette)])
			if err != nil {
				return errors.Wrapf(err, "plotting %s", r.name)
			}
			if i > 0 {
				line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			}
		}
	}
	img := vgimg.New(12*vg.Inch, 4.5*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 2, PadTop: vg.Millimeter * 2,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{{loss, acc}}, tiles, dc)
	loss.Draw(canvases[0][0])
	acc.Draw(canvases[0][1])
	return errors.Wrapf(savePNG(img, path), "writing %s", path)
}

// movingAverage smooths points over a trailing window.
func movingAverage(points []point, window int) []point {
	out := make([]point, len(points))
	sum := 0.0
	for i, p := range points {
		sum += p.y
		if i >= window {
			sum -= points[i-window].y
		}
		out[i] = point{p.x, sum / float64(min(i+1, window))}
	}
	return out
}
