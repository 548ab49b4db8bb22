package assets

import (
	"compress/gzip"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"

	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/fileio"
)

// FashionMNISTDir is where Debian's dataset-fashion-mnist package puts Fashion-MNIST's four .gz
// files (make assets installs it).
const FashionMNISTDir = "/usr/share/datasets/fashion-mnist"

// FashionMNISTPixels is the size of one image: 28×28 bytes, row-major.
const FashionMNISTPixels = 28 * 28

// ReadFashionMNIST reads split "train" or "t10k" of Fashion-MNIST from dir
// ("<split>-images-idx3-ubyte.gz" and "<split>-labels-idx1-ubyte.gz"): n images of
// FashionMNISTPixels bytes each, one after the other, and their n labels, 0 to 9.
func ReadFashionMNIST(dir, split string) (images, labels []byte, err error) {
	images, dims, err := readIDX(filepath.Join(dir, split+"-images-idx3-ubyte.gz"), 3)
	if err != nil {
		return nil, nil, err
	}
	labels, ldims, err := readIDX(filepath.Join(dir, split+"-labels-idx1-ubyte.gz"), 1)
	if err != nil {
		return nil, nil, err
	}
	if dims[0] != ldims[0] || dims[1]*dims[2] != FashionMNISTPixels {
		return nil, nil, errors.Errorf("Fashion-MNIST %s: %v images, %v labels; want n×28×28 and n", split, dims, ldims)
	}
	for i, l := range labels {
		if l > 9 {
			return nil, nil, errors.Errorf("Fashion-MNIST %s: label %d is %d; accepted: 0..9", split, i, l)
		}
	}
	return images, labels, nil
}

// readIDX reads a gzipped IDX file of unsigned bytes (type 0x08) with rank dimensions.
func readIDX(path string, rank int) ([]byte, []int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, errors.Wrap(err, "Fashion-MNIST (Debian's dataset-fashion-mnist: make assets installs it)")
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, nil, errors.Wrapf(err, "Fashion-MNIST: %s", path)
	}
	raw, err := io.ReadAll(z)
	if err != nil {
		return nil, nil, errors.Wrapf(err, "Fashion-MNIST: %s", path)
	}
	header := 4 + 4*rank
	if len(raw) < header || raw[0] != 0 || raw[1] != 0 || raw[2] != 0x08 || int(raw[3]) != rank {
		return nil, nil, errors.Errorf("Fashion-MNIST: %s is not an IDX file of unsigned bytes with %d dimensions", path, rank)
	}
	dims := make([]int, rank)
	for i := range dims {
		dims[i] = int(binary.BigEndian.Uint32(raw[4+4*i:]))
	}
	if size, ok := fileio.Elements(dims, uint64(len(raw)-header)); !ok || size != uint64(len(raw)-header) {
		return nil, nil, errors.Errorf("Fashion-MNIST: %s holds %d bytes of data for dimensions %v", path, len(raw)-header, dims)
	}
	return raw[header:], dims, nil
}
