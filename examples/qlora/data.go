package main

import "github.com/quanta-ml/quanta/internal/assets"

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
	images, labels, err := assets.ReadFashionMNIST(dir, prefix)
	if err != nil {
		return nil, err
	}
	const pixels = assets.FashionMNISTPixels
	n := len(labels)
	d := &dataset{images: make([][]float32, n), labels: make([]int32, n)}
	for i := range n {
		img := make([]float32, pixels)
		for j, b := range images[i*pixels : (i+1)*pixels] {
			img[j] = float32(b) / 255
		}
		d.images[i], d.labels[i] = img, int32(labels[i])
	}
	return d, nil
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
