package quanta_test

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/runtime"
)

// Quantize a weight to NF4 on the host and multiply activations by it in a graph: the product
// reads the packed codes, no dense weight is built. (This is the README's "Using it" snippet.)
func Example() {
	weights := make([][]float32, 512) // a (K, N) = (512, 256) weight
	for k := range weights {
		weights[k] = make([]float32, 256)
		for n := range weights[k] {
			weights[k][n] = float32(math.Sin(float64(k*256 + n)))
		}
	}
	x := tensors.FromValue([][]float32{make([]float32, 512)}) // one row of activations

	backend := runtime.MustBackend()                                                      // XLA CPU/CUDA/TPU, or pure Go
	w := quanta.MustQuantize(tensors.FromValue(weights), quanta.Config{Type: quanta.NF4}) // *nf4.Array, 4.5 bits/weight
	linear := implicitarray.MustNewExec(backend, func(x *graph.Node, w implicitarray.Array) *graph.Node {
		return implicitarray.Materialize(implicitarray.MatMul(x, w)) // fused: no dense W
	})
	defer linear.Finalize()
	y := linear.MustCall1(x, w).(*tensors.Tensor) // quantized weights go in like tensors

	fmt.Println(w)
	fmt.Println(y.Shape())
	// Output:
	// nf4.Array(Float32)[512 256] block 64
	// (Float32)[1 256]
}
