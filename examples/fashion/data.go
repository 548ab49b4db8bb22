package main

import "github.com/quanta-ml/quanta/internal/assets"

// dataset is one split of Fashion-MNIST: images as float32 pixel/255, flattened to 784 values
// each, and labels 0..9.
type dataset struct {
	images []float32 // n × 784, row-major
	labels []int32
}

func (d *dataset) len() int { return len(d.labels) }

const pixels = assets.FashionMNISTPixels

// loadSplit reads split prefix ("train" or "t10k") of Fashion-MNIST in dir, keeping the first limit
// examples (0: all).
func loadSplit(dir, prefix string, limit int) (*dataset, error) {
	images, labels, err := assets.ReadFashionMNIST(dir, prefix)
	if err != nil {
		return nil, err
	}
	n := len(labels)
	if limit > 0 {
		n = min(n, limit)
	}
	d := &dataset{images: make([]float32, n*pixels), labels: make([]int32, n)}
	for i := range d.images {
		d.images[i] = float32(images[i]) / 255
	}
	for i := range d.labels {
		d.labels[i] = int32(labels[i])
	}
	return d, nil
}
