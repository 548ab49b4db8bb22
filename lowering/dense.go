package lowering

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/kernelreg"
)

// denseKernelMaxRows is the most activation rows for which DenseMatMul calls quanta's float32
// kernel: up to there it streamed a dense weight faster than XLA's dot on the benchmark shapes
// (docs/performance.md); beyond, XLA's blocked product reuses each weight load for more rows.
// DenseMatMulTransposed calls its kernel at any row count: XLA's dot of a transposed weight
// measured slower than the kernel at every count (docs/performance.md).
const denseKernelMaxRows = 16

// denseTarget and denseTransposedTarget are the float32 kernels' custom calls, as the kernel
// table declares them: x·W of a weight (K, N) and x·Wᵀ of a weight (N, K).
var (
	denseTarget           = kernelreg.TargetNamed("quanta_f32_kn")
	denseTransposedTarget = kernelreg.TargetNamed("quanta_f32_nk")
)

// denseLayout is the layout name Built counts DenseMatMul's and DenseMatMulTransposed's products
// under.
const denseLayout = "dense"

// DenseMatMul returns x·w for activations x (M, K) and a dense weight w (K, N) of the same float
// dtype: graph.Dot, or, on a backend with quanta's kernels, float32 operands and at most
// denseKernelMaxRows rows in an unsharded graph, quanta's float32 kernel as a custom call (the
// dot kept as the formulation GoMLX differentiates). Built counts it as layout "dense" with
// Kernel or Materialize. It panics if x and w are not rank-2 float tensors of one dtype with
// x's columns matching w's rows.
func DenseMatMul(x, w *graph.Node) *graph.Node {
	const op = "lowering.DenseMatMul"
	checkDense(op, x, w, 0, "x (M, K) and w (K, N)")
	return denseProduct(op, x, w, graph.Dot(x, w), denseTarget, denseKernelMaxRows)
}

// DenseMatMulTransposed returns x·wᵀ for activations x (M, K) and a dense weight w (N, K) of the
// same float dtype, PyTorch's Linear.weight layout: graph.DotGeneral contracting both last axes,
// or, on a backend with quanta's kernels, float32 operands in an unsharded graph, quanta's
// float32 kernel, whatever the rows. Its one-row product reads each stored row of w as one
// stream, without the partial sums across threads that x·W needs, which makes this the faster
// layout for decoding (docs/performance.md). Built counts it as DenseMatMul does. It panics if x
// and w are not rank-2 float tensors of one dtype whose last axes match.
func DenseMatMulTransposed(x, w *graph.Node) *graph.Node {
	const op = "lowering.DenseMatMulTransposed"
	checkDense(op, x, w, 1, "x (M, K) and w (N, K)")
	return denseProduct(op, x, w, graph.DotGeneral(x, []int{1}, nil, w, []int{1}, nil), denseTransposedTarget, math.MaxInt)
}

// checkDense panics, naming op and what is accepted, unless x and w are rank-2 tensors of one
// float dtype and x's columns match w's axis wK.
func checkDense(op string, x, w *graph.Node, wK int, accepted string) {
	if x == nil || w == nil {
		panic(errors.Errorf("%s: nil operand; accepted: %s float tensors", op, accepted))
	}
	xs, ws := x.Shape(), w.Shape()
	if xs.Rank() != 2 || ws.Rank() != 2 || xs.DType != ws.DType || !xs.DType.IsFloat() || xs.Dim(1) != ws.Dim(wK) {
		panic(errors.Errorf("%s: x %s, w %s; accepted: %s of one float dtype", op, xs, ws, accepted))
	}
}

// denseProduct returns y, the graph's product of x and w, or, where the float32 kernel target
// serves x (at most maxRows rows), the kernel's call with the graph's product as its formulation.
func denseProduct(op string, x, w, y *graph.Node, target kernelreg.Target, maxRows int) *graph.Node {
	if !denseKernelServes(x, target, maxRows) {
		stats.record(denseLayout, Materialize)
		return y
	}
	operands := append([]*graph.Node{x}, target.Args(map[string]*graph.Node{"w": w})...)
	if err := kernelsOf(x).Emit(y, target.Name, operands, nil); err != nil {
		panic(errors.WithMessagef(err, "%s: emitting the %s kernel for x %s, w %s", op, target.Name, x.Shape(), w.Shape()))
	}
	stats.record(denseLayout, Kernel)
	return y
}

// denseKernelServes reports whether the float32 kernel target serves activations x of at most
// maxRows rows (see DenseMatMul).
func denseKernelServes(x *graph.Node, target kernelreg.Target, maxRows int) bool {
	if x.DType() != dtypes.Float32 || x.Shape().Dim(0) > maxRows ||
		x.Graph().DistributedStrategy() != distributed.None {
		return false
	}
	k := kernelsOf(x)
	return k != nil && k.Targets[target.Name]
}
