package main

import (
	"io"

	"github.com/quanta-ml/quanta/internal/fileio"
	"gonum.org/v1/plot/vg/vgimg"
)

// savePNG writes the canvas as a PNG file, replaced whole (fileio.WriteAtomic): an interrupted
// run leaves no truncated file.
func savePNG(img *vgimg.Canvas, path string) error {
	return fileio.WriteAtomic("savePNG", path, func(w io.Writer) error {
		_, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w)
		return err
	})
}
