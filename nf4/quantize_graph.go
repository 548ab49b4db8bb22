package nf4

import (
	"math"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/lowering"
)

// QuantizeNode quantizes x inside its graph, with the same arithmetic as the host-side Quantize
// (absmax and x / (absmax + tiny) in x's dtype, nearest code by float32 distance — float64 for
// float64 x — ties to the lower code): for re-quantizing after a reshape or transpose and for
// quantization-aware training. The result's components are nodes of x's graph.
//
// It panics if blockSize is not even and positive, or x is not a float tensor of rank >= 1.
// Values are not checked: a NaN makes its block's codes 0 (as eformer), an Inf its block's absmax
// Inf; use the host-side Quantize to reject them.
func QuantizeNode(x *graph.Node, blockSize int) *Array {
	if x == nil {
		panic(errors.New("nf4.QuantizeNode: nil node"))
	}
	if err := checkBlockSize(blockSize); err != nil {
		panic(errors.WithMessagef(err, "nf4.QuantizeNode of %s", x.Shape()))
	}
	shape := x.Shape()
	if err := checkQuantizable(shape); err != nil {
		panic(errors.WithMessage(err, "nf4.QuantizeNode"))
	}
	g := x.Graph()
	dt := shape.DType
	dim := shape.Dim(-1)
	nb := numBlocks(dim, blockSize)
	x = zeroPadLastAxis(x, nb*blockSize-dim)
	lead := shape.Dimensions[:shape.Rank()-1]
	blocks := graph.Reshape(x, append(append([]int(nil), lead...), nb, blockSize)...)
	var absmax, normalized *graph.Node
	distDType := dtypes.Float32
	switch dt {
	case dtypes.Float32, dtypes.Float64:
		// Native arithmetic is IEEE in the dtype.
		absmax = graph.ReduceMax(graph.Abs(blocks), -1)
		tiny := 0x1p-126
		if dt == dtypes.Float64 {
			tiny, distDType = 0x1p-1022, dtypes.Float64
		}
		denom := graph.Add(absmax, graph.Scalar(g, dt, tiny))
		normalized = graph.Div(blocks, graph.InsertAxes(denom, -1))
	default:
		// bfloat16 and float16: computed in float32 with explicit rounding to the dtype, because
		// XLA may keep the excess float32 precision of a convert pair and the pure-Go backend
		// truncates.
		f := graph.ConvertDType(blocks, dtypes.Float32)
		amax := graph.ReduceMax(graph.Abs(f), -1)
		absmax = graph.ConvertDType(amax, dt) // exact: a value of dt
		normalized = roundNormalized(graph.Div(f, graph.InsertAxes(denominator(amax, dt), -1)), dt)
	}
	n := graph.InsertAxes(graph.ConvertDType(normalized, distDType), -1) // (..., nb, bs, 1)
	cbDims := make([]int, n.Rank())
	for i := range cbDims {
		cbDims[i] = 1
	}
	cbDims[len(cbDims)-1] = len(codebook)
	cb := graph.Reshape(graph.ConvertDType(graph.Const(g, codebook[:]), distDType), cbDims...)
	diff := graph.Sub(n, cb)
	codes := graph.ArgMin(graph.Abs(diff), -1, dtypes.Uint8)
	packed := lowering.Pack(codes)
	return newNodeArray(packed, absmax, shape, blockSize)
}

// requantize quantizes dense with like's block size and strategy: the second rounding of a
// reshape, transpose or broadcast that moves the block axis.
func requantize(dense *graph.Node, like *Array) *Array {
	return QuantizeNode(dense, like.blockSize).WithStrategy(like.Strategy())
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

// denominator is absmax + tiny(dt) rounded to dt, for a bfloat16 or float16 absmax held in
// float32: above 2^-100 the rounded sum is absmax itself (tiny is below half an ulp of dt); below,
// the float32 sum is used unrounded (a documented difference from the host in that range).
func denominator(amax *graph.Node, dt dtypes.DType) *graph.Node {
	g := amax.Graph()
	tiny := 0x1p-126
	if dt == dtypes.Float16 {
		tiny = 0x1p-14
		// float16's tiny is large: absmax + 2^-14 must be rounded to float16's 11 bits.
		return roundToBits(graph.Add(amax, graph.Scalar(g, dtypes.Float32, tiny)), 11, -14, 15)
	}
	small := graph.LessThan(amax, graph.Scalar(g, dtypes.Float32, 0x1p-100))
	return graph.Where(small, graph.Add(amax, graph.Scalar(g, dtypes.Float32, tiny)), amax)
}

// roundNormalized rounds normalized values (|v| <= 1) from float32 to dt's precision, to nearest
// even. Values below 2^-5 are rounded coarsely: every value there maps to code 7 either way.
func roundNormalized(v *graph.Node, dt dtypes.DType) *graph.Node {
	bits := 8 // bfloat16 significant bits
	if dt == dtypes.Float16 {
		bits = 11
	}
	return roundToBits(v, bits, -5, 0)
}

// roundToBits rounds float32 values v with |v| < 2^(maxExp+1) to the given number of significant
// bits, to nearest even, with float32 additions: (|v| + M) - M, where M = 2^(k+24-bits) for
// |v| in [2^k, 2^(k+1)), rounds to multiples of 2^(k+1-bits). Values below 2^minExp are rounded
// to multiples of 2^(minExp+1-bits).
func roundToBits(v *graph.Node, bits, minExp, maxExp int) *graph.Node {
	g := v.Graph()
	a := graph.Abs(v)
	scalar := func(x float64) *graph.Node { return graph.Scalar(g, dtypes.Float32, x) }
	m := scalar(math.Ldexp(1, minExp+24-bits))
	for k := minExp + 1; k <= maxExp; k++ {
		m = graph.Where(graph.GreaterOrEqual(a, scalar(math.Ldexp(1, k))), scalar(math.Ldexp(1, k+24-bits)), m)
	}
	rounded := graph.Sub(graph.Add(a, m), m)
	return graph.Where(graph.LessThan(v, scalar(0)), graph.Neg(rounded), rounded)
}
