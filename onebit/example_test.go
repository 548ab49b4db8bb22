package onebit_test

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/onebit"
	"github.com/quanta-ml/quanta/runtime"
)

func Example() {
	// A (4, 2) weight quantized to sign(x) with one absmean scale per output column.
	w := onebit.MustQuantizeBinary(tensors.FromValue([][]float32{
		{0.5, -2}, {-1.5, 1}, {1, -1}, {-1, 0},
	}), &onebit.Options{Scale: true, ScaleAxes: []int{0}})
	fmt.Println(w, "bytes:", w.Bytes())

	// x @ w inside a graph: the packed bytes are never expanded into a float weight.
	exec := implicitarray.MustNewExec(runtime.MustBackend(), func(x *graph.Node, w *onebit.Array) *graph.Node {
		return implicitarray.Materialize(implicitarray.MatMul(x, w))
	})
	out := exec.MustCall1(tensors.FromValue([][]float32{{1, 2, 3, 4}}), w).(*tensors.Tensor)
	fmt.Println(out.Value())
	// Output:
	// onebit.Array(Float32)[4 2] 2bit scale over [0] bytes: 10
	// [[-2 2]]
}

// Which logical rows shard 1 of 2 holds when a 2-bit array of 16 rows is sharded on its first axis.
func ExampleShardRows() {
	fmt.Println(onebit.ShardRows(16, 4, 2, 1))
	// Output: [2 3 6 7 10 11 14 15] <nil>
}
