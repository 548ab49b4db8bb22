package nf4_test

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/quanta-ml/quanta/sharding"
)

// ExampleQuantize quantizes a weight on the host, runs x @ w through implicitarray.NewExec (the
// fused NF4 dot_general: no dense weight is built), and compares with the float32 product.
func ExampleQuantize() {
	backend := runtime.MustBackend()
	const k, n = 256, 128
	rng := rand.New(rand.NewPCG(1, 2))
	wValues := make([]float32, k*n)
	for i := range wValues {
		wValues[i] = float32(rng.NormFloat64())
	}
	weight := tensors.FromFlatDataAndDimensions(wValues, k, n)
	w := nf4.MustQuantize(weight, nf4.DefaultBlockSize)
	fmt.Printf("weight %v: %d bytes as NF4, %d as float32\n", w.Shape().Dimensions, w.Bytes(), weight.Shape().Memory())

	xValues := make([]float32, k)
	for i := range xValues {
		xValues[i] = float32(rng.NormFloat64())
	}
	x := tensors.FromFlatDataAndDimensions(xValues, 1, k)
	matmul := implicitarray.MustNewExec(backend, func(x *graph.Node, w *nf4.Array) *graph.Node {
		return implicitarray.MatMul(x, w).(*graph.Node)
	})
	y := matmul.MustCall1(x, w).(*tensors.Tensor)
	exact := graph.MustExecOnce(backend, graph.MatMul, x, weight)

	maxErr, maxAbs := 0.0, 0.0
	for i, v := range y.Value().([][]float32)[0] {
		e := float64(exact.Value().([][]float32)[0][i])
		maxErr, maxAbs = math.Max(maxErr, math.Abs(float64(v)-e)), math.Max(maxAbs, math.Abs(e))
	}
	fmt.Printf("y %v, max error relative to max |y|: %.2f\n", y.Shape().Dimensions, maxErr/maxAbs)
	// Output:
	// weight [256 128]: 18432 bytes as NF4, 131072 as float32
	// y [1 128], max error relative to max |y|: 0.10
}

// An NF4 weight (K, N) = (32, 256) with blocks of 64, sharded column-parallel over 4 devices:
// each device holds one block per row of packed codes and absmax.
func ExampleArray_ComponentSpecs() {
	m := sharding.MustNewMesh([]string{"model"}, []int{4})
	logical := sharding.PartitionSpec{nil, {"model"}}
	w := nf4.MustQuantize(tensors.FromShape(shapes.Make(dtypes.Float32, 32, 256)), 64)
	specs, err := w.ComponentSpecs(m, logical)
	if err != nil {
		panic(err)
	}
	packedShard, _ := sharding.ShardShape(m, specs[0], w.Packed().Shape())
	fmt.Println("packed:", specs[0], packedShard)
	fmt.Println("absmax:", specs[1])

	// With blocks of 128, the 4 shards of 64 elements would split blocks.
	_, err = nf4.MustQuantize(tensors.FromShape(shapes.Make(dtypes.Float32, 32, 256)), 128).ComponentSpecs(m, logical)
	fmt.Println(err != nil)
	// Output:
	// packed: P(None, 'model', None) (Uint8)[32 1 32]
	// absmax: P(None, 'model')
	// true
}

// A weight stored (out, in), as PyTorch stores it, used as x·wᵀ: the transpose moves the block
// axis, so it is lazy, and the product contracts w's own blocks (no second rounding).
func ExampleArray_transposed() {
	backend := runtime.MustBackend()
	w := nf4.MustQuantize(tensors.FromShape(shapes.Make(dtypes.Float32, 128, 256)), nf4.DefaultBlockSize) // (out, in)
	x := tensors.FromShape(shapes.Make(dtypes.Float32, 2, 256))
	product := implicitarray.MustNewExec(backend, func(x *graph.Node, w *nf4.Array) *graph.Node {
		wt := implicitarray.Transpose(w, 0, 1)
		fmt.Printf("Transpose(w, 0, 1): %T %v\n", wt, wt.Shape().Dimensions)
		return implicitarray.Materialize(implicitarray.MatMul(x, wt))
	})
	implicitarray.ResetStats()
	y := product.MustCall1(x, w).(*tensors.Tensor)
	fmt.Println("y:", y.Shape().Dimensions, "re-quantizations:", len(implicitarray.CurrentStats().Requantizations))
	// Output:
	// Transpose(w, 0, 1): *implicitarray.Transposed [256 128]
	// y: [2 128] re-quantizations: 0
}
