package implicitarray_test

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	. "github.com/quanta-ml/quanta/implicitarray"
)

// positive fills a node of the given dims with positive values that are not all equal.
func positive(g *graph.Graph, dims ...int) *graph.Node {
	size := shapes.Make(dtypes.Float32, dims...).Size()
	idx := graph.Reshape(graph.Iota(g, shapes.Make(dtypes.Float32, size), 0), dims...)
	return graph.AddScalar(graph.MulScalar(graph.ModScalar(idx, 7), 0.25), 0.5)
}

// signed is like positive but with both signs.
func signed(g *graph.Graph, dims ...int) *graph.Node {
	return graph.AddScalar(positive(g, dims...), -1.1)
}

type opCase struct {
	name string
	dims [][]int
	// build returns the op on the implicit x and the same op on its dense equivalent xd.
	build func(g *graph.Graph, x Value, xd *graph.Node) (Value, *graph.Node)
}

func binaryCase(name string, op func(a, b Value) Value, dense func(a, b *graph.Node) *graph.Node) opCase {
	return opCase{name, [][]int{{3}, {2, 5}}, func(g *graph.Graph, x Value, xd *graph.Node) (Value, *graph.Node) {
		y := signed(g, xd.Shape().Dimensions...)
		return op(x, y), dense(xd, y)
	}}
}

func unaryCase(name string, dims [][]int, op func(Value) Value, dense func(*graph.Node) *graph.Node) opCase {
	return opCase{name, dims, func(g *graph.Graph, x Value, xd *graph.Node) (Value, *graph.Node) {
		return op(x), dense(xd)
	}}
}

var elementDims = [][]int{{3}, {2, 5}}

var opCases = []opCase{
	binaryCase("add", Add, graph.Add),
	binaryCase("sub", Sub, graph.Sub),
	binaryCase("mul", Mul, graph.Mul),
	binaryCase("div", Div, graph.Div),
	binaryCase("max", Max, graph.Max),
	binaryCase("min", Min, graph.Min),
	binaryCase("lt", LessThan, graph.LessThan),
	binaryCase("le", LessOrEqual, graph.LessOrEqual),
	binaryCase("gt", GreaterThan, graph.GreaterThan),
	binaryCase("ge", GreaterOrEqual, graph.GreaterOrEqual),
	binaryCase("eq", Equal, graph.Equal),
	binaryCase("ne", NotEqual, graph.NotEqual),
	{"pow", elementDims, func(g *graph.Graph, x Value, xd *graph.Node) (Value, *graph.Node) {
		y := positive(g, xd.Shape().Dimensions...)
		return Pow(Abs(x), y), graph.Pow(graph.Abs(xd), y)
	}},
	unaryCase("neg", elementDims, Neg, graph.Neg),
	unaryCase("abs", elementDims, Abs, graph.Abs),
	unaryCase("exp", elementDims, Exp, graph.Exp),
	unaryCase("log", elementDims, func(v Value) Value { return Log(Abs(v)) },
		func(n *graph.Node) *graph.Node { return graph.Log(graph.Abs(n)) }),
	unaryCase("sqrt", elementDims, func(v Value) Value { return Sqrt(Abs(v)) },
		func(n *graph.Node) *graph.Node { return graph.Sqrt(graph.Abs(n)) }),
	unaryCase("integer_pow", elementDims, func(v Value) Value { return IntegerPow(v, 3) },
		func(n *graph.Node) *graph.Node { return graph.Mul(graph.Mul(n, n), n) }),
	unaryCase("reshape", [][]int{{6}, {2, 3, 4}}, func(v Value) Value { return Reshape(v, -1, 2) },
		func(n *graph.Node) *graph.Node { return graph.Reshape(n, n.Shape().Size()/2, 2) }),
	unaryCase("transpose", [][]int{{2, 3}, {2, 3, 4}},
		func(v Value) Value { return TransposeAllAxes(v, reversed(v.Shape().Rank())...) },
		func(n *graph.Node) *graph.Node { return graph.TransposeAllAxes(n, reversed(n.Rank())...) }),
	// Transpose swaps two axes, as graph.Transpose: on a square matrix it is not the identity.
	unaryCase("transpose-swap", [][]int{{3, 3}, {2, 3, 4}},
		func(v Value) Value { return Transpose(v, 0, -1) },
		func(n *graph.Node) *graph.Node { return graph.Transpose(n, 0, -1) }),
	unaryCase("broadcast_in_dim", [][]int{{3}, {1, 4}},
		func(v Value) Value { return BroadcastInDim(v, broadcastDims(v.Shape()), broadcastAxes(v.Shape())) },
		func(n *graph.Node) *graph.Node {
			return graph.BroadcastToDims(graph.InsertAxes(n, 0), broadcastDims(n.Shape())...)
		}),
	{"concatenate", [][]int{{3}, {2, 4}}, func(g *graph.Graph, x Value, xd *graph.Node) (Value, *graph.Node) {
		y := signed(g, xd.Shape().Dimensions...)
		return Concatenate([]Value{y, x, x}, -1), graph.Concatenate([]*graph.Node{y, xd, xd}, -1)
	}},
	{"gather", [][]int{{5}, {4, 3}}, func(g *graph.Graph, x Value, xd *graph.Node) (Value, *graph.Node) {
		idx := graph.Const(g, [][]int32{{2}, {0}, {3}})
		return Gather(x, idx, false), graph.Gather(xd, idx)
	}},
	{"conv_general", [][]int{{1, 6, 2}, {2, 5, 2}}, func(g *graph.Graph, x Value, xd *graph.Node) (Value, *graph.Node) {
		kernel := signed(g, 3, 2, 4) // spatial, in, out
		axes := graph.ConvolveAxesConfig{InputBatch: 0, InputChannels: 2, InputSpatial: []int{1},
			KernelInputChannels: 1, KernelOutputChannels: 2, KernelSpatial: []int{0},
			OutputBatch: 0, OutputChannels: 2, OutputSpatial: []int{1}}
		return ConvGeneral(x, kernel, axes, []int{1}, [][2]int{{1, 1}}, nil, nil, 1, 1),
			graph.ConvGeneral(xd, kernel, axes, []int{1}, [][2]int{{1, 1}}, nil, nil, 1, 1)
	}},
	unaryCase("convert_element_type", elementDims, func(v Value) Value { return ConvertDType(v, dtypes.Float64) },
		func(n *graph.Node) *graph.Node { return graph.ConvertDType(n, dtypes.Float64) }),
	unaryCase("reduce_sum", [][]int{{3}, {2, 5}}, func(v Value) Value { return ReduceSum(v, -1) },
		func(n *graph.Node) *graph.Node { return graph.ReduceSum(n, -1) }),
	unaryCase("reduce_max", [][]int{{3}, {2, 5}}, func(v Value) Value { return ReduceMax(v) },
		func(n *graph.Node) *graph.Node { return graph.ReduceAllMax(n) }),
	unaryCase("reduce_min", [][]int{{3}, {2, 5}}, func(v Value) Value { return ReduceMin(v, 0) },
		func(n *graph.Node) *graph.Node { return graph.ReduceMin(n, 0) }),
	unaryCase("reduce_prod", [][]int{{3}, {2, 5}}, func(v Value) Value { return ReduceMultiply(v, 0) },
		func(n *graph.Node) *graph.Node { return graph.ReduceMultiply(n, 0) }),
	{"dot_general", [][]int{{4, 3}, {2, 4, 3}}, func(g *graph.Graph, x Value, xd *graph.Node) (Value, *graph.Node) {
		y := signed(g, 3, 2)
		return DotGeneral(x, []int{-1}, nil, y, []int{0}, nil), graph.DotGeneral(xd, []int{-1}, nil, y, []int{0}, nil)
	}},
	{"matmul_rhs", [][]int{{3, 2}, {3, 5}}, func(g *graph.Graph, x Value, xd *graph.Node) (Value, *graph.Node) {
		y := signed(g, 4, 3)
		return MatMul(y, x), graph.MatMul(y, xd)
	}},
	// MatMul broadcasts the batch axes as graph.MatMul (numpy's matmul) does.
	{"matmul_broadcast_rhs", [][]int{{2, 4, 5}, {3, 2, 4, 5}}, func(g *graph.Graph, x Value, xd *graph.Node) (Value, *graph.Node) {
		y := signed(g, 3, 4)
		return MatMul(y, x), graph.MatMul(y, xd)
	}},
	{"matmul_broadcast_batch", [][]int{{2, 4, 5}, {1, 1, 4, 5}, {1, 4, 5}}, func(g *graph.Graph, x Value, xd *graph.Node) (Value, *graph.Node) {
		y := signed(g, 2, 1, 3, 4)
		return MatMul(y, x), graph.MatMul(y, xd)
	}},
	{"matmul_broadcast_lhs", [][]int{{1, 3, 4}, {3, 4}, {2, 1, 3, 4}}, func(g *graph.Graph, x Value, xd *graph.Node) (Value, *graph.Node) {
		y := signed(g, 2, 4, 5)
		return MatMul(x, y), graph.MatMul(xd, y)
	}},
	{"einsum_transposed", [][]int{{5, 3}, {2, 3}}, func(g *graph.Graph, x Value, xd *graph.Node) (Value, *graph.Node) {
		y := signed(g, 4, 3)
		return Einsum("bk,nk->nb", y, x), graph.Einsum("bk,nk->nb", y, xd)
	}},
}

func reversed(rank int) []int {
	perm := make([]int, rank)
	for i := range perm {
		perm[i] = rank - 1 - i
	}
	return perm
}

// broadcastDims / broadcastAxes add a new leading axis of 2 and broadcast size-1 axes to 4.
func broadcastDims(s shapes.Shape) []int {
	dims := []int{2}
	for _, d := range s.Dimensions {
		if d == 1 {
			d = 4
		}
		dims = append(dims, d)
	}
	return dims
}

func broadcastAxes(s shapes.Shape) []int {
	axes := make([]int, s.Rank())
	for i := range axes {
		axes[i] = i + 1
	}
	return axes
}

func TestOpsMatchDense(t *testing.T) {
	backend := newBackend(t)
	for _, tc := range opCases {
		for _, dims := range tc.dims {
			t.Run(tc.name+shapes.Make(dtypes.Float32, dims...).String(), func(t *testing.T) {
				ResetStats()
				out := run(t, backend, func(g *graph.Graph) []*graph.Node {
					payload := signed(g, dims...)
					x := graphToy[plainTag](payload, 2)
					xd := graph.MulScalar(payload, 2)
					implicitResult, want := tc.build(g, x, xd)
					denseResult, _ := tc.build(g, xd, xd)
					return []*graph.Node{Materialize(implicitResult), Materialize(denseResult), want}
				})
				assertClose(t, out[0], out[2], 1e-5)
				assertClose(t, out[1], out[2], 1e-5)
				if CurrentStats().Materializations["*implicitarray_test.toy[github.com/quanta-ml/quanta/implicitarray_test.plainTag]"] == 0 {
					t.Errorf("the implicit operand was never materialized: %+v", CurrentStats())
				}
			})
		}
	}
}
