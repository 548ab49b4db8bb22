// Package xlafloat reproduces, on the host and inside GoMLX graphs, the floating-point arithmetic
// XLA CPU applies to the quantizers' float32, bfloat16 and float16 computations, so that quanta's
// host-side and graph-side quantizers give eformer's bytes on every backend:
//
//   - Flush to zero: XLA CPU runs with FTZ and DAZ set, so a float32 (or float64) subnormal,
//     read or produced, is zero. bfloat16 values are computed in float32 and flushed the same
//     way; float16 values are never subnormal in float32, so they are not.
//   - bfloat16 and float16 operations are computed in float32 and rounded to the dtype (to
//     nearest, ties to even) after each operation.
//
// The host functions work on float32 scalars. The graph functions take float32 (or float64)
// nodes and return nodes of the same dtype, built from comparisons, selects, multiplications and
// additions only: the pure-Go backend has no bitcast and converts float32 to bfloat16 by
// truncation, and XLA may drop a float32→bfloat16→float32 convert pair, so neither a bitcast
// nor a convert pair can do the rounding.
package xlafloat

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
	"github.com/x448/float16"
)

const (
	// TinyF32 is the smallest normal float32 (and bfloat16), 2^-126.
	TinyF32 = 0x1p-126
	// TinyF16 is the smallest normal float16, 2^-14.
	TinyF16 = 0x1p-14
	// TinyF64 is the smallest normal float64, 2^-1022.
	TinyF64 = 0x1p-1022
)

// FlushF32 returns x, or a zero of x's sign if x is a float32 subnormal.
func FlushF32(x float32) float32 {
	if x > -TinyF32 && x < TinyF32 {
		return float32(math.Copysign(0, float64(x)))
	}
	return x
}

// FlushF64 returns x, or a zero of x's sign if x is a float64 subnormal.
func FlushF64(x float64) float64 {
	if x > -TinyF64 && x < TinyF64 {
		return math.Copysign(0, x)
	}
	return x
}

// RoundBF16 rounds a float32 to the nearest bfloat16 (ties to even), as XLA converts; NaN stays
// a NaN. bfloat16.FromFloat32 truncates instead.
func RoundBF16(x float32) float32 {
	b := math.Float32bits(x)
	if x != x {
		return math.Float32frombits(b | 0x400000)
	}
	b += 0x7fff + (b>>16)&1
	return math.Float32frombits(b &^ 0xffff)
}

// ToBF16 is the bfloat16 nearest to a float32 (ties to even), as XLA converts: RoundBF16's value.
func ToBF16(x float32) bfloat16.BFloat16 {
	return bfloat16.BFloat16(math.Float32bits(RoundBF16(x)) >> 16)
}

// RoundF16 rounds a float32 to the nearest float16 (ties to even; overflow to ±Inf, float16
// subnormals kept).
func RoundF16(x float32) float32 { return float16.Fromfloat32(x).Float32() }

// Round rounds a float32 result of an operation in dtype the way XLA CPU stores it: flushed for
// float32, rounded (after flushing) for bfloat16, rounded for float16. Other dtypes: x unchanged.
func Round(x float32, dtype dtypes.DType) float32 {
	switch dtype {
	case dtypes.Float32:
		return FlushF32(x)
	case dtypes.BFloat16:
		return RoundBF16(FlushF32(x))
	case dtypes.Float16:
		return RoundF16(x)
	}
	return x
}

// FlushesInputs reports whether XLA CPU reads subnormal values of dtype as zero: float32 and
// bfloat16 (computed in float32) and float64; not float16, whose subnormals are normal float32s.
func FlushesInputs(dtype dtypes.DType) bool {
	return dtype == dtypes.Float32 || dtype == dtypes.BFloat16 || dtype == dtypes.Float64
}

// Format describes a float format by its significand bits (including the implicit one) and its
// exponent range.
type Format struct {
	Bits           int
	MinExp, MaxExp int // exponents of the smallest and largest normal powers of two
}

var (
	// BF16 is bfloat16: 8 significant bits, float32's exponent range.
	BF16 = Format{Bits: 8, MinExp: -126, MaxExp: 127}
	// F16 is float16: 11 significant bits, normal exponents -14..15.
	F16 = Format{Bits: 11, MinExp: -14, MaxExp: 15}
)

// FormatOf returns the format of bfloat16 or float16.
func FormatOf(dtype dtypes.DType) (Format, bool) {
	switch dtype {
	case dtypes.BFloat16:
		return BF16, true
	case dtypes.Float16:
		return F16, true
	}
	return Format{}, false
}

// mulPow2 multiplies x by 2^k in steps of at most 2^±64, each a normal float32.
func mulPow2(x *graph.Node, k int) *graph.Node {
	for k != 0 {
		s := max(-64, min(64, k))
		x = graph.Mul(x, graph.Scalar(x.Graph(), x.DType(), math.Ldexp(1, s)))
		k -= s
	}
	return x
}

// FlushNode returns x (float32 or float64) with its subnormals replaced by zero, as XLA CPU reads
// and writes them. On XLA CPU it changes nothing; on a backend without flush to zero it makes
// the result identical.
func FlushNode(x *graph.Node) *graph.Node {
	tiny := TinyF32
	switch x.DType() {
	case dtypes.Float32:
	case dtypes.Float64:
		tiny = TinyF64
	default:
		panic(errors.Errorf("xlafloat.FlushNode of %s; accepted: float32 or float64", x.Shape()))
	}
	g := x.Graph()
	return graph.Where(graph.LessThan(graph.Abs(x), graph.Scalar(g, x.DType(), tiny)), graph.ZerosLike(x), x)
}

// RoundNode rounds the float32 values of x to format f (to nearest, ties to even; NaN and ±Inf
// kept), returning float32 values of that format: what XLA stores when it converts to bfloat16
// or float16. The caller bounds the magnitudes: values below 2^lo are rounded on the grid of
// 2^lo's binade (pass lo = f.MinExp for the format's subnormals, or a larger lo where values
// that small need no precision), and values at or above 2^(hi+1) are rounded as if in 2^hi's
// binade (pass hi = f.MaxExp for the full range); the cost grows with log2(hi − lo). float16
// values beyond its largest finite value become ±Inf.
func RoundNode(x *graph.Node, f Format, lo, hi int) *graph.Node {
	if x.DType() != dtypes.Float32 {
		panic(errors.Errorf("xlafloat.RoundNode of %s; accepted: float32", x.Shape()))
	}
	if lo > hi || lo < f.MinExp || hi > f.MaxExp {
		panic(errors.Errorf("xlafloat.RoundNode: exponent range [%d, %d] outside the format's [%d, %d]", lo, hi, f.MinExp, f.MaxExp))
	}
	g := x.Graph()
	scalar := func(v float64) *graph.Node { return graph.Scalar(g, dtypes.Float32, v) }
	a := graph.Abs(x)
	// Every power of two below must be a normal float32, 1/2^e included: magnitudes of 2^126 and
	// more are scaled by 1/4 first (rounding commutes with it), so e stays below 126.
	var big *graph.Node
	if hi > 125 {
		big = graph.GreaterOrEqual(a, scalar(0x1p126))
		a = graph.Where(big, graph.Mul(a, scalar(0.25)), a)
		hi = 125
		lo = min(lo, hi)
	}
	// Find p = 2^e, the largest power of two in [2^lo, 2^hi] with p <= a, by binary search on
	// e - lo; p and its inverse are tracked exactly as powers of two.
	p := graph.BroadcastToDims(scalar(math.Ldexp(1, lo)), x.Shape().Dimensions...)
	inv := graph.BroadcastToDims(scalar(math.Ldexp(1, -lo)), x.Shape().Dimensions...)
	span := hi - lo
	step := 1
	for step*2 <= span {
		step *= 2
	}
	limit := scalar(math.Ldexp(1, hi))
	for ; step >= 1; step /= 2 {
		up := mulPow2(p, step)
		take := graph.LogicalAnd(graph.GreaterOrEqual(a, up), graph.LessOrEqual(up, limit))
		p = graph.Where(take, up, p)
		inv = graph.Where(take, mulPow2(inv, -step), inv)
	}
	// m = a / p is in [1, 2) (or below 1 under 2^lo): adding and subtracting 2^(24-bits) rounds it
	// to multiples of 2^(1-bits), to nearest even. The constant is computed as p·inv·2^(24-bits)
	// (p·inv is exactly 1) so that the compiler cannot fold (m + c) - c into m.
	magic := graph.Mul(graph.Mul(p, inv), scalar(math.Ldexp(1, 24-f.Bits)))
	m := graph.Mul(a, inv)
	rounded := graph.Mul(graph.Sub(graph.Add(m, magic), magic), p)
	if big != nil {
		rounded = graph.Where(big, graph.Mul(rounded, scalar(4)), rounded)
	}
	if f.MaxExp < 127 {
		// Beyond the largest finite value (halfway to the next binade rounds up): overflow.
		maxFinite := math.Ldexp(2-math.Ldexp(1, 1-f.Bits), f.MaxExp)
		halfUlp := math.Ldexp(1, f.MaxExp-f.Bits)
		rounded = graph.Where(graph.GreaterOrEqual(a, scalar(maxFinite+halfUlp)), graph.Infinity(g, dtypes.Float32, 1), rounded)
	}
	// Keep NaN (every comparison above was false, so m is NaN already) and the sign.
	return graph.Where(graph.LessThan(x, scalar(0)), graph.Neg(rounded), rounded)
}

// RoundHalfEvenNode rounds x (float32 or float64) to the nearest integer, ties to even, as XLA's
// round_nearest_even does, from Floor and exact comparisons. graph.Round promises the same, but the
// pure-Go backend of GoMLX v0.26 rounds ties away from zero.
func RoundHalfEvenNode(x *graph.Node) *graph.Node {
	g := x.Graph()
	scalar := func(v float64) *graph.Node { return graph.Scalar(g, x.DType(), v) }
	f := graph.Floor(x)
	d := graph.Sub(x, f) // exact: x and its floor share a binade or x is an integer
	up := graph.Add(f, scalar(1))
	even := graph.Equal(graph.Mul(graph.Floor(graph.Mul(f, scalar(0.5))), scalar(2)), f)
	half := scalar(0.5)
	return graph.Where(graph.GreaterThan(d, half), up,
		graph.Where(graph.LessThan(d, half), f, graph.Where(even, f, up)))
}
