package onebit

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/xlafloat"
)

// QuantizeBinaryNode is QuantizeBinary inside a graph, for quantizing values computed in the
// graph. It panics, as graph-building functions do, on a first dimension that is not a multiple of
// 4 or an invalid option.
func QuantizeBinaryNode(x *graph.Node, opts *Options) *Array {
	q := ruleNode("onebit.QuantizeBinaryNode", ruleBinary, x, opts, true)
	return &Array{q.pack()}
}

// QuantizeTernaryNode is QuantizeTernary inside a graph, with its rules: the variance from float64
// sums, rounded through float32 to x's dtype as TernaryThreshold says, subnormals read as zero.
// (The graph's float64 sums may be ordered differently from the host's, which changes the
// threshold only if the variance lies within float64 rounding of a float32 rounding boundary.)
// The scales of Options.Scale and BitNet, and the BitNet values, are computed as on the host:
// mean|x| from float64 sums, x / mean in float64, the scale rounded to float32.
func QuantizeTernaryNode(x *graph.Node, opts *Options) *Array {
	q := ruleNode("onebit.QuantizeTernaryNode", ruleTernary, x, opts, true)
	return &Array{q.pack()}
}

// FakeQuantizeBinary returns what Materialize(QuantizeBinaryNode(x, opts)) returns, computed
// directly and without packing, so with no constraint on the first dimension: the forward value
// of a straight-through estimator.
func FakeQuantizeBinary(x *graph.Node, opts *Options) *graph.Node {
	return ruleNode("onebit.FakeQuantizeBinary", ruleBinary, x, opts, false).dense()
}

// FakeQuantizeTernary is FakeQuantizeBinary for QuantizeTernaryNode.
func FakeQuantizeTernary(x *graph.Node, opts *Options) *graph.Node {
	return ruleNode("onebit.FakeQuantizeTernary", ruleTernary, x, opts, false).dense()
}

// ruled is a rule applied in a graph: int8 values, the optional float32 scale, and the
// materialization dtype.
type ruled struct {
	values    *graph.Node
	scale     *graph.Node
	scaleAxes []int
	dtype     dtypes.DType
}

func (q ruled) pack() core {
	var scale implicitarray.Component
	var scaleAxes []int
	if q.scale != nil {
		scale, scaleAxes = implicitarray.NodeComponent(q.scale), q.scaleAxes
	}
	return newCore(TwoBit, shapes.Make(q.dtype, q.values.Shape().Dimensions...),
		implicitarray.NodeComponent(packValues(TwoBit, q.values)), scale, scaleAxes)
}

// dense is the materialized value, computed as core.Materialize computes it from the packed bytes.
func (q ruled) dense() *graph.Node {
	if q.scale == nil {
		return graph.ConvertDType(q.values, q.dtype)
	}
	compute := q.dtype
	if compute != dtypes.Float64 {
		compute = dtypes.Float32
	}
	v := graph.ConvertDType(q.values, compute)
	return graph.ConvertDType(graph.Mul(v, graph.ConvertDType(q.scale, compute)), q.dtype)
}

func ruleNode(what string, r rule, x *graph.Node, opts *Options, packable bool) ruled {
	cfg := config(opts)
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
	if packable {
		if err := TwoBit.checkPackable(what, dims); err != nil {
			fail(err)
		}
	} else if len(dims) == 0 {
		fail(errors.New("a scalar; accepted: rank >= 1"))
	}
	if r == ruleBinary && cfg.BitNet {
		fail(errors.New("BitNet is a ternary rule; accepted with QuantizeTernaryNode"))
	}
	scaled := cfg.Scale || cfg.BitNet
	var scaleAxes []int
	if scaled {
		var err error
		if scaleAxes, err = normalizeAxes(cfg.ScaleAxes, len(dims)); err != nil {
			fail(err)
		}
	}
	dtype := cfg.DType
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
	// xv: the values the rule sees, float32 (float64 for float64 x), with the subnormals XLA CPU
	// reads as zero flushed.
	compute := dtypes.Float32
	if x.DType() == dtypes.Float64 {
		compute = dtypes.Float64
	}
	xv := graph.ConvertDType(x, compute)
	if xlafloat.FlushesInputs(x.DType()) {
		xv = xlafloat.FlushNode(xv)
	}
	one, minusOne, zero := graph.Scalar(g, dtypes.Int8, 1), graph.Scalar(g, dtypes.Int8, -1), graph.Scalar(g, dtypes.Int8, 0)
	// The scale and the BitNet rule are computed as the host computes them: mean|x| from float64
	// sums, the values from x / mean in float64, the stored scale that mean rounded to float32, so
	// that a straight-through forward pass sees the values Quantize stores.
	var x64, mean, scale, values *graph.Node
	if scaled {
		x64 = graph.ConvertDType(xv, dtypes.Float64)
		mean = graph.ReduceAndKeep(graph.Abs(x64), graph.ReduceMean, scaleAxes...)
		scale = graph.ConvertDType(mean, dtypes.Float32)
	}
	switch {
	case r == ruleBinary:
		values = graph.Where(graph.LessThan(xv, graph.ScalarZero(g, compute)), minusOne, one)
	case cfg.BitNet:
		positive := graph.GreaterThan(mean, graph.ScalarZero(g, dtypes.Float64))
		safe := graph.Where(positive, mean, graph.OnesLike(mean))
		rounded := graph.ClipScalar(xlafloat.RoundHalfEvenNode(graph.Div(x64, safe)), -1, 1)
		values = graph.Where(graph.BroadcastToDims(positive, dims...), graph.ConvertDType(rounded, dtypes.Int8), zero)
	default:
		threshold := ternaryThresholdNode(xv, x.DType())
		values = graph.Where(graph.GreaterThan(xv, threshold), one,
			graph.Where(graph.LessThan(xv, graph.Neg(threshold)), minusOne, zero))
	}
	return ruled{values: values, scale: scale, scaleAxes: scaleAxes, dtype: dtype}
}

// ternaryThresholdNode is TernaryThreshold in a graph, from the variance of xv (the loaded values
// of an input of dtype) computed with float64 sums; the result has xv's dtype.
func ternaryThresholdNode(xv *graph.Node, dtype dtypes.DType) *graph.Node {
	g := xv.Graph()
	x64 := graph.ConvertDType(xv, dtypes.Float64)
	centered := graph.Sub(x64, graph.ReduceAllMean(x64))
	variance := graph.ReduceAllMean(graph.Mul(centered, centered))
	if dtype == dtypes.Float64 {
		return graph.MulScalar(graph.Sqrt(variance), 0.5)
	}
	round := xlafloat.FlushNode
	if f, ok := xlafloat.FormatOf(dtype); ok {
		round = func(n *graph.Node) *graph.Node {
			return xlafloat.RoundNode(xlafloat.FlushNode(n), f, f.MinExp, f.MaxExp)
		}
	}
	v := round(graph.ConvertDType(variance, dtypes.Float32))
	std := round(graph.Sqrt(v))
	// Where the variance overflows the dtype: the float64 square root, rounded.
	overflow := graph.GreaterOrEqual(v, graph.Infinity(g, dtypes.Float32, 1))
	std = graph.Where(overflow, round(graph.ConvertDType(graph.Sqrt(variance), dtypes.Float32)), std)
	return round(graph.Mul(std, graph.Scalar(g, dtypes.Float32, 0.5)))
}

// packValues packs an int8 node of values (valid for the packing) into the packing's bytes. The
// first dimension must be a multiple of ValuesPerByte (callers check).
func packValues(l Packing, values *graph.Node) *graph.Node {
	g := values.Graph()
	dims := values.Shape().Dimensions
	groups := l.ValuesPerByte()
	var codes *graph.Node
	if l == OneBit {
		codes = graph.Where(graph.GreaterThan(values, graph.Scalar(g, values.DType(), 0)),
			graph.Scalar(g, dtypes.Uint8, 1), graph.Scalar(g, dtypes.Uint8, 0))
	} else {
		codes = graph.ConvertDType(graph.Add(values, graph.Scalar(g, values.DType(), 1)), dtypes.Uint8)
	}
	split := append([]int{groups, dims[0] / groups}, dims[1:]...)
	codes = graph.Reshape(codes, split...)
	var packed *graph.Node
	for i := range groups {
		c := graph.Squeeze(graph.SliceAxis(codes, 0, graph.AxisElem(i)), 0)
		if i > 0 {
			c = graph.Mul(c, graph.Scalar(g, dtypes.Uint8, 1<<(l.bitsPerValue()*i)))
			packed = graph.Add(packed, c)
		} else {
			packed = c
		}
	}
	return packed
}
