package nf4_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/nf4"
)

// BenchmarkQuantize times the host quantizer on a weight of Llama-7B's attention shape (what a
// model converted at load pays per projection); b.SetBytes counts the float32 input.
func BenchmarkQuantize(b *testing.B) {
	const rows, cols = 4096, 4096
	r := rand.New(rand.NewPCG(1, 2))
	data := make([]float32, rows*cols)
	for i := range data {
		data[i] = float32(r.NormFloat64()) * 0.02
	}
	w := tensors.FromFlatDataAndDimensions(data, rows, cols)
	for _, bs := range []int{64, 128} {
		b.Run(fmt.Sprintf("float32/%dx%d/block=%d", rows, cols, bs), func(b *testing.B) {
			b.SetBytes(int64(4 * len(data)))
			for b.Loop() {
				a, err := nf4.Quantize(w, bs)
				if err != nil {
					b.Fatal(err)
				}
				a.Delete()
			}
		})
	}
}
