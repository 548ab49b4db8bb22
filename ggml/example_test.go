package ggml_test

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/ggml"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/runtime"
)

// ExampleQuantize stores a linear weight as GGUF does (N rows of K, blocks along K) in Q4_K, with
// the bytes llama.cpp's quantize tool would write, and runs y = x·Wᵀ with the weight decoded in
// the graph, compared with the float32 product.
func ExampleQuantize() {
	backend := runtime.MustBackend()
	const n, k = 128, 512
	rng := rand.New(rand.NewPCG(1, 2))
	wValues := make([]float32, n*k)
	for i := range wValues {
		wValues[i] = float32(rng.NormFloat64())
	}
	weight := tensors.FromFlatDataAndDimensions(wValues, n, k)
	w := ggml.MustQuantize(weight, gguf.TypeQ4_K)
	fmt.Printf("weight %v: %d bytes as %s, %d as float32\n", w.Shape().Dimensions, w.Bytes(), w.Type(), weight.Shape().Memory())

	xValues := make([]float32, k)
	for i := range xValues {
		xValues[i] = float32(rng.NormFloat64())
	}
	x := tensors.FromFlatDataAndDimensions(xValues, 1, k)
	linear := implicitarray.MustNewExec(backend, func(x *graph.Node, w *ggml.Array) *graph.Node {
		return implicitarray.Einsum("mk,nk->mn", x, w).(*graph.Node)
	})
	defer linear.Finalize()
	y := linear.MustCall1(x, w).(*tensors.Tensor)
	exact := graph.MustExecOnce(backend, func(x, w *graph.Node) *graph.Node { return graph.Einsum("mk,nk->mn", x, w) }, x, weight)

	maxErr, maxAbs := 0.0, 0.0
	for i, v := range y.Value().([][]float32)[0] {
		e := float64(exact.Value().([][]float32)[0][i])
		maxErr, maxAbs = math.Max(maxErr, math.Abs(float64(v)-e)), math.Max(maxAbs, math.Abs(e))
	}
	fmt.Printf("y %v, max error relative to max |y|: %.2f\n", y.Shape().Dimensions, maxErr/maxAbs)
	// Output:
	// weight [128 512]: 36864 bytes as Q4_K, 262144 as float32
	// y [1 128], max error relative to max |y|: 0.08
}
