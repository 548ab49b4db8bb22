// Package plotstyle holds the look that the charts of the examples and of bench share: the
// series colours (Tableau's category colours, a float baseline in dark grey) and the line of a
// curve.
package plotstyle

import (
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Baseline returns the colour of a float baseline's curve: dark grey.
func Baseline() color.RGBA { return color.RGBA{R: 0x33, G: 0x33, B: 0x33, A: 0xff} }

// Colors returns the first n series colours, n at most 7, in a new slice: blue, green, red,
// orange, purple, brown, pink.
func Colors(n int) []color.RGBA {
	return []color.RGBA{
		{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
		{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
		{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff},
	}[:n]
}

// AddLine adds the line through xys, 1.5 points wide in colour c, to p and to its legend as name,
// and returns it for further styling.
func AddLine(p *plot.Plot, name string, xys plotter.XYs, c color.Color) (*plotter.Line, error) {
	line, err := plotter.NewLine(xys)
	if err != nil {
		return nil, err
	}
	line.Color = c
	line.Width = vg.Points(1.5)
	p.Add(line)
	p.Legend.Add(name, line)
	return line, nil
}
