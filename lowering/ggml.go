package lowering

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
)

// GGML is a weight stored in one of ggml's block types, as a GGUF file stores a tensor, as a
// graph node:
//
//   - Blocks: uint8 (..., numBlocks, blockBytes), the file's bytes unchanged: each row of the
//     last logical axis is numBlocks consecutive blocks of Type (a (N, K) weight is N rows of
//     K/blockSize blocks: GGUF's layout of a linear weight, whose products are x·Wᵀ).
//   - Type: one of gguf.BlockTypes (package gguf documents the layouts).
//
// Element (..., i) of the weight is element i%blockSize of block i/blockSize of its row, with
// ggml's value (dequantize_row_*) bit for bit: the decode in the graph computes ggml's
// products, all exact in float32, and ggml's one final addition. A kernel takes Blocks as one
// operand, reshaped to (rows, numBlocks·blockBytes).
type GGML struct {
	Blocks *graph.Node
	Type   gguf.Type
}

var _ Layout = GGML{}

func (w GGML) anyNode() *graph.Node { return w.Blocks }

// kind is "ggml-" and the type's name in ggml's lower case (e.g. "ggml-q4_k").
func (w GGML) kind() string { return "ggml-" + strings.ToLower(w.Type.String()) }

// Dimensions returns the logical dimensions of the weight.
func (w GGML) Dimensions() []int {
	bs := w.Blocks.Shape()
	return append(slices.Clone(bs.Dimensions[:bs.Rank()-2]), bs.Dim(-2)*w.Type.BlockSize())
}

func (w GGML) check(op string) {
	if w.Blocks == nil {
		panic(errors.Errorf("%s: GGML needs a Blocks node", op))
	}
	bs := w.Blocks.Shape()
	if !w.Type.IsBlock() || bs.DType != dtypes.Uint8 || bs.Rank() < 2 || bs.Dim(-1) != w.Type.BlockBytes() {
		panic(errors.Errorf("%s: blocks %s of type %s are inconsistent; accepted: uint8 (..., numBlocks, blockBytes) of a "+
			"type of gguf.BlockTypes (%v), blockBytes its BlockBytes", op, bs, w.Type, gguf.BlockTypes()))
	}
}

func (w GGML) activationsError(dtype dtypes.DType) string {
	if dtype.IsFloat() && !dtype.IsComplex() {
		return ""
	}
	return "a float activation dtype"
}

// scaleDType is float32: the decoded scales of every block type are float32.
func (w GGML) scaleDType() dtypes.DType { return dtypes.Float32 }

// separableScale is nil: block scales vary along the block axis.
func (w GGML) separableScale() *graph.Node { return nil }

// Dequantize returns the dense weight in dtype, with its logical dimensions: ggml's float32
// values, converted.
func (w GGML) Dequantize(dtype dtypes.DType) *graph.Node {
	w.check("lowering.GGML.Dequantize")
	return graph.ConvertDType(w.decodeFloat32(), dtype)
}

func (w GGML) decode(p *product, _ bool) *graph.Node {
	return graph.ConvertDType(w.decodeFloat32(), p.cdt)
}

// slice slices a leading axis (whole rows of blocks); the block axis is not sliced.
func (w GGML) slice(axis, start, end int) (Layout, bool) {
	if axis == len(w.Dimensions())-1 {
		return nil, false
	}
	w.Blocks = sliceAxis(w.Blocks, axis, start, end)
	return w, true
}

func (w GGML) serves(Strategy, *product) bool { return false }

func (w GGML) requirement(Strategy) string { return "no GGML weight" }

func (w GGML) lower(s Strategy, _ *product) *graph.Node {
	panic(errors.Errorf("lowering: %s has no %s formulation", w, s))
}

// String describes the weight for messages.
func (w GGML) String() string {
	return fmt.Sprintf("ggml %s weight %v (blocks %s)", w.Type, w.Dimensions(), w.Blocks.Shape())
}

// decodeFloat32 decodes every block in the graph: float32 with the logical dimensions.
func (w GGML) decodeFloat32() *graph.Node {
	bs := w.Blocks.Shape()
	lead, nb := bs.Dimensions[:bs.Rank()-2], bs.Dim(-2)
	if bs.Size() == 0 { // no blocks (e.g. a gather of no rows): nothing to slice the fields from
		return graph.Zeros(w.Blocks.Graph(), shapes.Make(dtypes.Float32, w.Dimensions()...))
	}
	// The bytes carry no gradient (GoMLX differentiates their slices with Pad, which the pure-Go
	// backend lacks).
	b := blockBytes{graph.StopGradient(graph.Reshape(w.Blocks, product1(lead)*nb, bs.Dim(-1)))}
	var values *graph.Node
	switch w.Type {
	case gguf.TypeQ4_0:
		values = b.scaled(b.half(0), b.addInt(b.nibbles(2, 16), -8))
	case gguf.TypeQ4_1:
		values = graph.Add(b.scaled(b.half(0), b.nibbles(4, 16)), b.half(2))
	case gguf.TypeQ5_0:
		values = b.scaled(b.half(0), b.addInt(b.fifthBits(b.nibbles(6, 16), 2), -16))
	case gguf.TypeQ5_1:
		values = graph.Add(b.scaled(b.half(0), b.fifthBits(b.nibbles(8, 16), 4)), b.half(2))
	case gguf.TypeQ8_0:
		values = b.scaled(b.half(0), b.signed(b.bytes(2, 32)))
	case gguf.TypeIQ4_NL:
		values = b.scaled(b.half(0), b.iq4nl(b.nibbles(2, 16)))
	case gguf.TypeQ2_K:
		values = b.q2K()
	case gguf.TypeQ3_K:
		values = b.q3K()
	case gguf.TypeQ4_K:
		values = b.q45K(b.nibbles4K(16), 4)
	case gguf.TypeQ5_K:
		codes := graph.Add(b.nibbles4K(48), graph.MulScalar(b.bitsOf(b.bytes(16, 32), 8, 1), 16)) // bit e/32 of byte e%32
		values = b.q45K(codes, 4)
	case gguf.TypeQ6_K:
		values = b.q6K()
	}
	return graph.Reshape(values, append(slices.Clone(lead), nb*w.Type.BlockSize())...)
}

// blockBytes is a (blocks, blockBytes) uint8 node, with the decoding steps the block types share.
// Fields come out as int32 (every field fits) and values as float32; bit fields are read with
// integer division and bitwise-and, which every backend has (GoMLX's pure-Go one lacks logical
// shifts and Bitcast).
type blockBytes struct{ n *graph.Node }

func (b blockBytes) i32(v int32) *graph.Node { return graph.Scalar(b.n.Graph(), dtypes.Int32, v) }

// bytes returns bytes [off, off+n) of every block as int32 (blocks, n).
func (b blockBytes) bytes(off, n int) *graph.Node {
	return graph.ConvertDType(graph.SliceAxis(b.n, 1, graph.AxisRange(off, off+n)), dtypes.Int32)
}

// field returns (x / 2^shift) & mask.
func (b blockBytes) field(x *graph.Node, shift int, mask int32) *graph.Node {
	if shift > 0 {
		x = graph.Div(x, b.i32(1<<shift))
	}
	return graph.BitwiseAnd(x, b.i32(mask))
}

// addInt adds a constant to int32 codes.
func (b blockBytes) addInt(x *graph.Node, v int32) *graph.Node { return graph.Add(x, b.i32(v)) }

// signed reads bytes as int8.
func (b blockBytes) signed(x *graph.Node) *graph.Node {
	return graph.Sub(x, graph.MulScalar(graph.Div(x, b.i32(128)), 256))
}

// nibbles returns the 2n codes of n bytes at off: the low nibbles (elements 0..n-1), then the
// high ones (elements n..2n-1), int32 (blocks, 2n).
func (b blockBytes) nibbles(off, n int) *graph.Node {
	q := b.bytes(off, n)
	return graph.Concatenate([]*graph.Node{b.field(q, 0, 15), b.field(q, 4, 15)}, 1)
}

// bitsOf returns bit fields of the bytes x (blocks, n): field j (of count, width bits each) of
// every byte, as (blocks, count·n) in the order (field, byte).
func (b blockBytes) bitsOf(x *graph.Node, count, width int) *graph.Node {
	blocks, n := x.Shape().Dim(0), x.Shape().Dim(1)
	divisors := make([]int32, count)
	for j := range divisors {
		divisors[j] = 1 << (width * j)
	}
	div := graph.Reshape(graph.Const(b.n.Graph(), divisors), 1, count, 1)
	fields := graph.BitwiseAnd(graph.Div(graph.Reshape(x, blocks, 1, n), div), b.i32(1<<width-1))
	return graph.Reshape(fields, blocks, count*n)
}

// fifthBits adds 16 times bit j of the little-endian uint32 at off to code j of codes (32).
func (b blockBytes) fifthBits(codes *graph.Node, off int) *graph.Node {
	qh := b.bytes(off, 4) // bit j is bit j%8 of byte j/8
	bits := graph.Reshape(graph.Transpose(graph.Reshape(b.bitsOf(qh, 8, 1), -1, 8, 4), 1, 2), -1, 32)
	return graph.Add(codes, graph.MulScalar(bits, 16))
}

// half decodes the little-endian IEEE half at off as float32 (blocks, 1): (mantissa, with its
// implicit bit when the exponent is not 0) times 2^(exponent−25) (2^−24 for subnormals) from a
// 32-entry table, exact; exponent 31 is ±inf, or NaN with a mantissa.
func (b blockBytes) half(off int) *graph.Node {
	g := b.n.Graph()
	h := graph.Add(b.bytes(off, 1), graph.MulScalar(b.bytes(off+1, 1), 256))
	exp, mant := b.field(h, 10, 31), b.field(h, 0, 1023)
	implicit := graph.MulScalar(graph.Min(exp, b.i32(1)), 1024)
	var scale [32]float32
	scale[0] = 0x1p-24
	for e := 1; e < 31; e++ {
		scale[e] = float32(math.Ldexp(1, e-25))
	}
	scale[31] = float32(math.Inf(1))
	pow := graph.Reshape(graph.Gather(graph.Const(g, scale[:]), graph.Reshape(exp, -1, 1)), -1, 1)
	mag := graph.Mul(graph.ConvertDType(graph.Add(mant, implicit), dtypes.Float32), pow)
	isNaN := graph.LogicalAnd(graph.Equal(exp, b.i32(31)), graph.NotEqual(mant, b.i32(0)))
	mag = graph.Where(isNaN, graph.BroadcastToDims(graph.Scalar(g, dtypes.Float32, math.NaN()), mag.Shape().Dimensions...), mag)
	return graph.Where(graph.Equal(b.field(h, 15, 1), b.i32(1)), graph.Neg(mag), mag)
}

// scaled is d times the codes (blocks, n): float32 (blocks, n).
func (b blockBytes) scaled(d, codes *graph.Node) *graph.Node {
	return graph.Mul(d, graph.ConvertDType(codes, dtypes.Float32))
}

// iq4nl maps IQ4_NL codes to the values of its table.
func (b blockBytes) iq4nl(codes *graph.Node) *graph.Node {
	table := []int32{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
	return graph.Reshape(graph.Gather(graph.Const(b.n.Graph(), table), graph.Reshape(codes, -1, 1)), codes.Shape().Dimensions...)
}

// subBlocks multiplies codes (blocks, subs·size), sub-block s of size elements, by scale[s]
// (blocks, subs) and subtracts offset[s] when given: float32 (blocks, subs·size).
func (b blockBytes) subBlocks(codes, scale, offset *graph.Node) *graph.Node {
	blocks, subs := scale.Shape().Dim(0), scale.Shape().Dim(1)
	q := graph.ConvertDType(graph.Reshape(codes, blocks, subs, -1), dtypes.Float32)
	v := graph.Mul(graph.InsertAxes(scale, -1), q)
	if offset != nil {
		v = graph.Sub(v, graph.InsertAxes(offset, -1))
	}
	return graph.Reshape(v, blocks, -1)
}

// intScale is d (blocks, 1) times integer scales (blocks, n): float32 (blocks, n).
func (b blockBytes) intScale(d, sc *graph.Node) *graph.Node {
	return graph.Mul(d, graph.ConvertDType(sc, dtypes.Float32))
}

// twoBitCodes returns the 256 2-bit codes of the 64 bytes at off, as Q2_K and Q3_K store them:
// element 128h + 32s + l is bits 2s of byte 32h + l.
func (b blockBytes) twoBitCodes(off int) *graph.Node {
	q := b.bytes(off, 64)
	blocks := q.Shape().Dim(0)
	halves := graph.Reshape(q, blocks*2, 32) // (blocks·2, 32): byte l of half h
	return graph.Reshape(b.bitsOf(halves, 4, 2), blocks, 256)
}

// q2K: scales (4-bit scale, 4-bit min) at 0, codes at 16, d at 80, dmin at 82.
func (b blockBytes) q2K() *graph.Node {
	sc := b.bytes(0, 16)
	dl := b.intScale(b.half(80), b.field(sc, 0, 15))
	ml := b.intScale(b.half(82), b.field(sc, 4, 15))
	return b.subBlocks(b.twoBitCodes(16), dl, ml)
}

// q3K: high bits at 0, low codes at 32, 6-bit scales at 96, d at 108.
func (b blockBytes) q3K() *graph.Node {
	low := b.twoBitCodes(32)
	high := b.bitsOf(b.bytes(0, 32), 8, 1) // (blocks, 256): bit m of byte l is element 32m + l
	codes := graph.Sub(low, graph.MulScalar(graph.Sub(b.i32(1), high), 4))
	s := b.bytes(96, 12)
	lo := graph.Concatenate([]*graph.Node{b.field(graph.SliceAxis(s, 1, graph.AxisRange(0, 8)), 0, 15),
		b.field(graph.SliceAxis(s, 1, graph.AxisRange(0, 8)), 4, 15)}, 1) // scale j: byte j%8, nibble j/8
	hi := b.bitsOf(graph.SliceAxis(s, 1, graph.AxisRange(8, 12)), 4, 2) // scale j: byte 8 + j%4, bits 2·(j/4)
	scales := b.addInt(graph.Add(lo, graph.MulScalar(hi, 16)), -32)
	return b.subBlocks(codes, b.intScale(b.half(108), scales), nil)
}

// nibbles4K returns the 256 4-bit codes of the 128 bytes at off as Q4_K and Q5_K store them: 32
// bytes per 64 elements, low nibbles then high.
func (b blockBytes) nibbles4K(off int) *graph.Node {
	q := b.bytes(off, 128)
	blocks := q.Shape().Dim(0)
	chunks := graph.Reshape(q, blocks*4, 32)
	both := graph.Concatenate([]*graph.Node{b.field(chunks, 0, 15), b.field(chunks, 4, 15)}, 1)
	return graph.Reshape(both, blocks, 256)
}

// q45K: d at 0, dmin at 2, the 6-bit scales and mins of 8 sub-blocks of 32 at 4 (ggml's
// get_scale_min_k4), and the codes given.
func (b blockBytes) q45K(codes *graph.Node, off int) *graph.Node {
	s := b.bytes(off, 12)
	b0 := graph.SliceAxis(s, 1, graph.AxisRange(0, 4))
	b1 := graph.SliceAxis(s, 1, graph.AxisRange(4, 8))
	b2 := graph.SliceAxis(s, 1, graph.AxisRange(8, 12))
	top := func(x *graph.Node) *graph.Node { return graph.MulScalar(b.field(x, 6, 3), 16) }
	sc := graph.Concatenate([]*graph.Node{b.field(b0, 0, 63), graph.Add(b.field(b2, 0, 15), top(b0))}, 1)
	m := graph.Concatenate([]*graph.Node{b.field(b1, 0, 63), graph.Add(b.field(b2, 4, 15), top(b1))}, 1)
	return b.subBlocks(codes, b.intScale(b.half(0), sc), b.intScale(b.half(2), m))
}

// q6K: low nibbles at 0, high bit pairs at 128, int8 scales at 192, d at 208. Element 128h + 32j
// + l takes the low (j < 2) or high nibble of ql[64h + 32·(j%2) + l] and bits 2j of qh[32h + l].
func (b blockBytes) q6K() *graph.Node {
	ql := b.bytes(0, 128)
	blocks := ql.Shape().Dim(0)
	halves := graph.Reshape(ql, blocks*2, 64) // (blocks·2, 64): [low 32 | high 32] of half h
	low := graph.Concatenate([]*graph.Node{b.field(halves, 0, 15), b.field(halves, 4, 15)}, 1)
	high := b.bitsOf(graph.Reshape(b.bytes(128, 64), blocks*2, 32), 4, 2)
	codes := b.addInt(graph.Add(low, graph.MulScalar(high, 16)), -32)
	scales := b.intScale(b.half(208), b.signed(b.bytes(192, 16)))
	return b.subBlocks(graph.Reshape(codes, blocks, 256), scales, nil)
}
