package nf4

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/xlafloat"
	"github.com/quanta-ml/quanta/lowering"
	"slices"
)

// QuantizeNode quantizes x inside its graph with the arithmetic of the host-side Quantize (XLA
// CPU's: absmax in x's dtype, x times the reciprocal of absmax + tiny, rounded and flushed as
// Quantize describes, nearest code by float32 distance — float64 for float64 x — ties to the lower
// code), so it gives Quantize's bytes on every backend: for re-quantizing after a reshape or
// transpose and for quantization-aware training. The result's components are nodes of x's graph.
//
// It panics if x is not a float tensor of rank >= 1 with no zero dimension, or blockSize is not
// an even number from 2 to MaxBlockSize(x's last dimension). Values are not checked: a NaN makes
// its block's codes 0 (as eformer), an Inf its block's absmax Inf; use the host-side Quantize to
// reject them.
func QuantizeNode(x *graph.Node, blockSize int) *Array {
	if x == nil {
		panic(errors.New("nf4.QuantizeNode: nil node"))
	}
	shape := x.Shape()
	if err := checkQuantizable(shape); err != nil {
		panic(errors.WithMessage(err, "nf4.QuantizeNode"))
	}
	if err := checkBlockSize(blockSize, shape); err != nil {
		panic(errors.WithMessage(err, "nf4.QuantizeNode"))
	}
	return quantizeNode(x, blockSize)
}

// quantizeNode is QuantizeNode after the checks; the block size may exceed MaxBlockSize (the
// re-quantization of a reshaped array keeps its block size, and pads as eformer does).
func quantizeNode(x *graph.Node, blockSize int) *Array {
	shape := x.Shape()
	g := x.Graph()
	dt := shape.DType
	dim := shape.Dim(-1)
	nb := numBlocks(dim, blockSize)
	x = zeroPadLastAxis(x, nb*blockSize-dim)
	lead := shape.Dimensions[:shape.Rank()-1]
	blocks := graph.Reshape(x, append(append([]int(nil), lead...), nb, blockSize)...)

	// v: the values XLA computes with (float32 for bfloat16 and float16, flushed where XLA flushes).
	compute := dtypes.Float32
	if dt == dtypes.Float64 {
		compute = dtypes.Float64
	}
	v := graph.ConvertDType(blocks, compute)
	if xlafloat.FlushesInputs(dt) {
		v = xlafloat.FlushNode(v)
	}
	scalar := func(f float64) *graph.Node { return graph.Scalar(g, compute, f) }
	amax := graph.ReduceMax(graph.Abs(v), -1)
	absmax := graph.ConvertDType(amax, dt) // exact: a value of dt
	var r, pre, normalized *graph.Node
	switch dt {
	case dtypes.Float16:
		d := xlafloat.RoundNode(graph.Add(amax, scalar(xlafloat.TinyF16)), xlafloat.F16, xlafloat.F16.MinExp, xlafloat.F16.MaxExp)
		r = xlafloat.RoundNode(graph.Reciprocal(d), xlafloat.F16, xlafloat.F16.MinExp, xlafloat.F16.MaxExp)
		normalized = roundNormalized(graph.Mul(v, graph.InsertAxes(r, -1)), dt)
	default:
		tiny, huge := xlafloat.TinyF32, hugeF32
		if dt == dtypes.Float64 {
			tiny, huge = xlafloat.TinyF64, hugeF64
		}
		d := graph.Add(amax, scalar(tiny))
		if dt == dtypes.BFloat16 {
			d = xlafloat.RoundNode(d, xlafloat.BF16, xlafloat.BF16.MinExp, xlafloat.BF16.MaxExp)
		}
		// The deliberate difference of Quantize: blocks whose reciprocal would be subnormal use
		// 4/d applied to x/4.
		pre = graph.Where(graph.GreaterThan(d, scalar(huge)), scalar(0.25), scalar(1))
		r = graph.Reciprocal(graph.Mul(d, pre))
		scaled := xlafloat.FlushNode(graph.Mul(v, graph.InsertAxes(pre, -1)))
		normalized = xlafloat.FlushNode(graph.Mul(scaled, graph.InsertAxes(r, -1)))
		if dt == dtypes.BFloat16 {
			normalized = roundNormalized(normalized, dt)
		}
	}
	n := graph.InsertAxes(normalized, -1) // (..., nb, bs, 1)
	cbDims := make([]int, n.Rank())
	for i := range cbDims {
		cbDims[i] = 1
	}
	cbDims[len(cbDims)-1] = len(codebook)
	cb := graph.Reshape(graph.ConvertDType(graph.Const(g, codebook[:]), compute), cbDims...)
	diff := graph.Sub(n, cb)
	codes := graph.ArgMin(graph.Abs(diff), -1, dtypes.Uint8)
	packed := lowering.Pack(codes)
	return newNodeArray(packed, absmax, shape, blockSize)
}

// zeroPadLastAxis appends extra zeros to the last axis of x (with a Concatenate: the pure-Go
// backend has no Pad).
func zeroPadLastAxis(x *graph.Node, extra int) *graph.Node {
	if extra == 0 {
		return x
	}
	dims := slices.Clone(x.Shape().Dimensions)
	dims[len(dims)-1] = extra
	zeros := graph.BroadcastToDims(graph.ScalarZero(x.Graph(), x.DType()), dims...)
	return graph.Concatenate([]*graph.Node{x, zeros}, -1)
}

// roundNormalized rounds float32 normalized values (|v| <= 1, a rounding above 1 included) to
// dt's precision, to nearest even. Values below 2^-5 are rounded on the grid of [2^-5, 2^-4): every
// value there is nearest to code 7 either way.
func roundNormalized(v *graph.Node, dt dtypes.DType) *graph.Node {
	f, _ := xlafloat.FormatOf(dt)
	return xlafloat.RoundNode(v, f, -5, 0)
}
