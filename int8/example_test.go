package int8_test

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/runtime"
)

// Quantize a weight on the host, then run x @ w through implicitarray.Exec: the product uses the
// int8 codes directly (the scale multiplies the activations first, since the default axis -1
// gives one scale per contracting row).
func Example() {
	weights := [][]float32{{1, 2, 3}, {-0.5, 0.25, 0}, {4, -4, 2}}
	w := qint8.MustQuantize(tensors.FromValue(weights))
	fmt.Println("codes of row 0:", tensors.MustCopyFlatData[int8](w.Weight().Tensor())[:3])

	backend := runtime.MustBackend()
	matmul := implicitarray.MustNewExec(backend, func(x *graph.Node, w *qint8.Array) *graph.Node {
		return implicitarray.MatMul(x, w).(*graph.Node)
	})
	x := [][]float32{{1, 1, 1}, {0.5, -2, 3}}
	y := matmul.MustCall1(tensors.FromValue(x), w).(*tensors.Tensor).Value().([][]float32)

	maxErr := 0.0
	for i := range x {
		for j := range weights[0] {
			exact := 0.0
			for k := range weights {
				exact += float64(x[i][k]) * float64(weights[k][j])
			}
			maxErr = math.Max(maxErr, math.Abs(float64(y[i][j])-exact))
		}
	}
	fmt.Printf("max |x@w - x@W| = %.2f\n", maxErr)
	// Output:
	// codes of row 0: [42 85 127]
	// max |x@w - x@W| = 0.05
}
