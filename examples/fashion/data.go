package main

import (
	"compress/gzip"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"

	"github.com/pkg/errors"
)

// dataset is one split of Fashion-MNIST: images as float32 pixel/255, flattened to 784 values
// each, and labels 0..9.
type dataset struct {
	images []float32 // n × 784, row-major
	labels []int32
}

func (d *dataset) len() int { return len(d.labels) }

const pixels = 28 * 28

// loadSplit reads "<prefix>-images-idx3-ubyte.gz" and "<prefix>-labels-idx1-ubyte.gz" of dir
// (prefix "train" or "t10k"), keeping the first limit examples (0: all).
func loadSplit(dir, prefix string, limit int) (*dataset, error) {
	images, dims, err := readIDX(filepath.Join(dir, prefix+"-images-idx3-ubyte.gz"), 3)
	if err != nil {
		return nil, err
	}
	labels, ldims, err := readIDX(filepath.Join(dir, prefix+"-labels-idx1-ubyte.gz"), 1)
	if err != nil {
		return nil, err
	}
	if dims[0] != ldims[0] || dims[1]*dims[2] != pixels {
		return nil, errors.Errorf("fashion: %s: %v images, %v labels; want n×28×28 and n", prefix, dims, ldims)
	}
	n := dims[0]
	if limit > 0 {
		n = min(n, limit)
	}
	d := &dataset{images: make([]float32, n*pixels), labels: make([]int32, n)}
	for i := range d.images {
		d.images[i] = float32(images[i]) / 255
	}
	for i := range d.labels {
		if labels[i] > 9 {
			return nil, errors.Errorf("fashion: %s label %d is %d; accepted: 0..9", prefix, i, labels[i])
		}
		d.labels[i] = int32(labels[i])
	}
	return d, nil
}

// readIDX reads a gzipped IDX file of unsigned bytes (type 0x08) with rank dimensions.
func readIDX(path string, rank int) ([]byte, []int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, errors.Wrap(err, "fashion: the Fashion-MNIST files (Debian's dataset-fashion-mnist, or -data)")
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, nil, errors.Wrapf(err, "fashion: %s", path)
	}
	raw, err := io.ReadAll(z)
	if err != nil {
		return nil, nil, errors.Wrapf(err, "fashion: %s", path)
	}
	header := 4 + 4*rank
	if len(raw) < header || raw[0] != 0 || raw[1] != 0 || raw[2] != 0x08 || int(raw[3]) != rank {
		return nil, nil, errors.Errorf("fashion: %s is not an IDX file of unsigned bytes with %d dimensions", path, rank)
	}
	dims := make([]int, rank)
	size := 1
	for i := range dims {
		dims[i] = int(binary.BigEndian.Uint32(raw[4+4*i:]))
		size *= dims[i]
	}
	if len(raw)-header != size {
		return nil, nil, errors.Errorf("fashion: %s holds %d bytes of data for dimensions %v", path, len(raw)-header, dims)
	}
	return raw[header:], dims, nil
}
