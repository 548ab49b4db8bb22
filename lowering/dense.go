package lowering

import (
	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/kernelreg"
)

// denseKernelMaxRows is the most activation rows for which DenseMatMul calls quanta's float32
// kernel: up to there it streamed a dense weight faster than XLA's dot on the benchmark shapes
// (docs/performance.md); beyond, XLA's blocked product reuses each weight load for more rows.
const denseKernelMaxRows = 16

// denseTarget is the float32 kernel's custom call, as the kernel table declares it.
var denseTarget = kernelreg.TargetNamed("quanta_f32_kn")

// denseLayout is the layout name Built counts DenseMatMul's products under.
const denseLayout = "dense"

// DenseMatMul returns x·w for activations x (M, K) and a dense weight w (K, N) of the same float
// dtype: graph.Dot, or, on a backend with quanta's kernels, float32 operands and at most
// denseKernelMaxRows rows in an unsharded graph, quanta's float32 kernel as a custom call (the
// dot kept as the formulation GoMLX differentiates). Built counts it as layout "dense" with
// Kernel or Materialize. It panics if x and w are not rank-2 float tensors of one dtype with
// x's columns matching w's rows.
func DenseMatMul(x, w *graph.Node) *graph.Node {
	const op = "lowering.DenseMatMul"
	if x == nil || w == nil {
		panic(errors.Errorf("%s: nil operand; accepted: x (M, K) and w (K, N) float tensors", op))
	}
	xs, ws := x.Shape(), w.Shape()
	if xs.Rank() != 2 || ws.Rank() != 2 || xs.DType != ws.DType || !xs.DType.IsFloat() || xs.Dim(1) != ws.Dim(0) {
		panic(errors.Errorf("%s: x %s, w %s; accepted: x (M, K) and w (K, N) of one float dtype", op, xs, ws))
	}
	y := graph.Dot(x, w)
	if !denseKernelServes(x) {
		stats.record(denseLayout, Materialize)
		return y
	}
	operands := append([]*graph.Node{x}, denseTarget.Args(map[string]*graph.Node{"w": w})...)
	if err := kernelsOf(x).Emit(y, denseTarget.Name, operands, nil); err != nil {
		panic(errors.WithMessagef(err, "%s: emitting the %s kernel for x %s, w %s", op, denseTarget.Name, xs, ws))
	}
	stats.record(denseLayout, Kernel)
	return y
}

// denseKernelServes reports whether the float32 kernel serves activations x (see DenseMatMul).
func denseKernelServes(x *graph.Node) bool {
	if x.DType() != dtypes.Float32 || x.Shape().Dim(0) > denseKernelMaxRows ||
		x.Graph().DistributedStrategy() != distributed.None {
		return false
	}
	k := kernelsOf(x)
	return k != nil && k.Targets[denseTarget.Name]
}
