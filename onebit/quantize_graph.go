package onebit

import (
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
)

// QuantizeBinaryNode is QuantizeBinary inside a graph, for quantization-aware training and for
// quantizing values computed in the graph. It panics, as graph-building functions do, on a first
// dimension that is not a multiple of 4 or an invalid option.
func QuantizeBinaryNode(x *graph.Node, opts ...Option) *Array {
	return &Array{quantizeNode("onebit.QuantizeBinaryNode", ruleBinary, x, opts)}
}

// QuantizeTernaryNode is QuantizeTernary inside a graph. The threshold (0.5·std) and the scales are
// computed in float32 (the host version uses float64), so values within float32 rounding of the
// threshold may fall on the other side.
func QuantizeTernaryNode(x *graph.Node, opts ...Option) *Array {
	return &Array{quantizeNode("onebit.QuantizeTernaryNode", ruleTernary, x, opts)}
}

func quantizeNode(what string, r rule, x *graph.Node, opts []Option) core {
	var cfg config
	for _, opt := range opts {
		opt(&cfg)
	}
	if x == nil {
		panic(errors.Errorf("%s: nil node", what))
	}
	dims := x.Shape().Dimensions
	fail := func(err error) {
		panic(errors.WithMessagef(err, "%s(%s)", what, x.Shape()))
	}
	if !x.DType().IsFloat() {
		fail(errors.Errorf("dtype %s not accepted; accepted: a float dtype", x.DType()))
	}
	if err := TwoBit.checkPackable(what, dims); err != nil {
		fail(err)
	}
	if r == ruleBinary && cfg.bitNet {
		fail(errors.New("BitNet is a ternary rule; accepted with QuantizeTernaryNode"))
	}
	scaled := cfg.scaled || cfg.bitNet
	var scaleAxes []int
	if scaled {
		var err error
		if scaleAxes, err = normalizeAxes(cfg.scaleAxes, len(dims)); err != nil {
			fail(err)
		}
	}
	dtype := cfg.dtype
	if dtype == dtypes.InvalidDType {
		dtype = dtypes.Int8
		if scaled {
			dtype = x.DType()
		}
	}
	if err := checkDType(what, dtype, scaled); err != nil {
		fail(err)
	}

	g := x.Graph()
	xf := graph.ConvertDType(x, dtypes.Float32)
	one, minusOne, zero := graph.Scalar(g, dtypes.Int8, 1), graph.Scalar(g, dtypes.Int8, -1), graph.Scalar(g, dtypes.Int8, 0)
	var scale, values *graph.Node
	if scaled {
		scale = graph.ReduceAndKeep(graph.Abs(xf), graph.ReduceMean, scaleAxes...)
	}
	switch {
	case r == ruleBinary:
		values = graph.Where(graph.LessThan(xf, graph.ScalarZero(g, dtypes.Float32)), minusOne, one)
	case cfg.bitNet:
		safe := graph.Where(graph.GreaterThan(scale, graph.ScalarZero(g, dtypes.Float32)), scale, graph.OnesLike(scale))
		rounded := graph.ClipScalar(graph.Round(graph.Div(xf, safe)), -1, 1)
		positive := graph.BroadcastToDims(graph.GreaterThan(scale, graph.ScalarZero(g, dtypes.Float32)), dims...)
		values = graph.Where(positive, graph.ConvertDType(rounded, dtypes.Int8), zero)
	default:
		centered := graph.Sub(xf, graph.ReduceAllMean(xf))
		threshold := graph.MulScalar(graph.Sqrt(graph.ReduceAllMean(graph.Square(centered))), 0.5)
		values = graph.Where(graph.GreaterThan(xf, threshold), one,
			graph.Where(graph.LessThan(xf, graph.Neg(threshold)), minusOne, zero))
	}
	c := core{
		layout: TwoBit,
		packed: implicitarray.NodeComponent(packValues(TwoBit, values)),
		shape:  shapes.Make(dtype, dims...),
	}
	if scaled {
		c.scaleAxes = slices.Clone(scaleAxes)
		c.scale = implicitarray.NodeComponent(scale)
	}
	return c
}
