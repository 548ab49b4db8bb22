package main

import (
	"compress/gzip"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"

	"github.com/pkg/errors"
)

// fashionDir is where Debian's dataset-fashion-mnist package puts the files (make assets
// installs it).
const fashionDir = "/usr/share/datasets/fashion-mnist"

// dataset is a set of 28×28 images, scaled to [0, 1], and their labels.
type dataset struct {
	images [][]float32 // [n][784]
	labels []int32
}

// loadFashionMNIST reads the training or test split.
func loadFashionMNIST(dir string, train bool) (*dataset, error) {
	prefix := "t10k"
	if train {
		prefix = "train"
	}
	images, err := readIDX(filepath.Join(dir, prefix+"-images-idx3-ubyte.gz"), 2051)
	if err != nil {
		return nil, err
	}
	labels, err := readIDX(filepath.Join(dir, prefix+"-labels-idx1-ubyte.gz"), 2049)
	if err != nil {
		return nil, err
	}
	n := len(labels)
	if len(images) != n*784 {
		return nil, errors.Errorf("fashion-mnist %s: %d image bytes for %d labels", prefix, len(images), n)
	}
	d := &dataset{images: make([][]float32, n), labels: make([]int32, n)}
	for i := range n {
		img := make([]float32, 784)
		for j, b := range images[i*784 : (i+1)*784] {
			img[j] = float32(b) / 255
		}
		d.images[i], d.labels[i] = img, int32(labels[i])
	}
	return d, nil
}

// readIDX returns the payload of a gzipped IDX file after checking its magic number.
func readIDX(path string, magic uint32) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errors.Wrapf(err, "fashion-mnist missing (run make assets, or apt-get install dataset-fashion-mnist)")
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, errors.Wrapf(err, "reading %s", path)
	}
	data, err := io.ReadAll(z)
	if err != nil {
		return nil, errors.Wrapf(err, "reading %s", path)
	}
	if len(data) < 8 || binary.BigEndian.Uint32(data) != magic {
		return nil, errors.Errorf("%s: not an IDX file with magic %d", path, magic)
	}
	dims := int(data[3])
	return data[4+4*dims:], nil
}

// subset returns the examples whose label is in [from, from+count), relabelled from 0.
func (d *dataset) subset(from, count int32) *dataset {
	out := &dataset{}
	for i, l := range d.labels {
		if l >= from && l < from+count {
			out.images = append(out.images, d.images[i])
			out.labels = append(out.labels, l-from)
		}
	}
	return out
}

// batch returns the images and labels at idx.
func (d *dataset) batch(idx []int) ([][]float32, []int32) {
	x := make([][]float32, len(idx))
	y := make([]int32, len(idx))
	for i, j := range idx {
		x[i], y[i] = d.images[j], d.labels[j]
	}
	return x, y
}
