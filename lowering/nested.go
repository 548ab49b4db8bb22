package lowering

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
)

// NestedScales are block scales stored double-quantized (QLoRA's double quantization,
// bitsandbytes' compress_statistics), as graph nodes:
//
//   - Codes: uint8, the shape of the scales they stand for (e.g. (..., numBlocks)).
//   - Absmax: float32 (ceil(size(Codes)/BlockSize)), one second-level scale per BlockSize
//     consecutive codes of the flattened Codes (row-major), across rows.
//   - Offset: float32 scalar, added to every decoded scale.
//   - Map: the value of each 8-bit code.
//
// Scale i is Map[Codes[i]]·Absmax[flat(i)/BlockSize] + Offset, a float32 product rounded, then a
// float32 sum rounded (bitsandbytes' pure-PyTorch decode).
type NestedScales struct {
	Codes, Absmax, Offset *graph.Node
	Map                   [256]float32
	BlockSize             int
}

// String describes the scales for messages.
func (s NestedScales) String() string {
	shape := func(n *graph.Node) string {
		if n == nil {
			return "nil"
		}
		return n.Shape().String()
	}
	return fmt.Sprintf("double-quantized scales (codes %s, absmax %s, offset %s, block %d)", shape(s.Codes), shape(s.Absmax),
		shape(s.Offset), s.BlockSize)
}

// check panics, naming op, if the components are inconsistent.
func (s NestedScales) check(op string) {
	ok := s.Codes != nil && s.Absmax != nil && s.Offset != nil && s.BlockSize > 0
	if ok {
		cs, as, os := s.Codes.Shape(), s.Absmax.Shape(), s.Offset.Shape()
		ok = cs.DType == dtypes.Uint8 && as.DType == dtypes.Float32 && os.DType == dtypes.Float32 && as.Rank() == 1 &&
			os.Rank() == 0 && as.Dim(0) == (cs.Size()+s.BlockSize-1)/s.BlockSize
	}
	if !ok {
		panic(errors.Errorf("%s: %s are inconsistent; accepted: uint8 codes, float32 absmax (ceil(codes/block)), float32 scalar "+
			"offset, a positive block size", op, s))
	}
}

// Decode returns the float32 scales, with the shape of Codes: the codes looked up in Map (one
// gather), times their second-level scale, plus the offset.
func (s NestedScales) Decode() *graph.Node {
	s.check("lowering.NestedScales.Decode")
	g := s.Codes.Graph()
	cs := s.Codes.Shape()
	n := cs.Size()
	idx := graph.Reshape(graph.ConvertDType(s.Codes, dtypes.Int32), n, 1)
	values := graph.Gather(graph.Const(g, s.Map[:]), idx) // (n)
	nb := s.Absmax.Shape().Dim(0)
	if pad := nb*s.BlockSize - n; pad > 0 {
		values = zeroPad(values, 0, pad)
	}
	keep := func(x *graph.Node) *graph.Node { // drops the padding (the gradient flows through it)
		if x.Shape().Dim(0) != n {
			return sliceActivations(x, 0, 0, n)
		}
		return x
	}
	if !g.Backend().Capabilities().Operations[backends.OpTypeBitcast] {
		// A backend without Bitcast (GoMLX's pure-Go one) computes each float32 op as written.
		product := graph.Mul(graph.Reshape(values, nb, s.BlockSize), graph.InsertAxes(s.Absmax, -1))
		return graph.Reshape(graph.Add(keep(graph.Reshape(product, nb*s.BlockSize)), s.Offset), cs.Dimensions...)
	}
	// XLA contracts a float32 multiply and add into one fused multiply-add (one rounding where
	// bitsandbytes has two) and sees through float conversions: the product is computed in
	// float64 (exact) and rounded to float32 precision with integer ops, which it keeps; the sum
	// of two float32 values is then exact in float64 and rounded once.
	wide := func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtypes.Float64) }
	product := roundToFloat32(graph.Mul(wide(graph.Reshape(values, nb, s.BlockSize)), wide(graph.InsertAxes(s.Absmax, -1))))
	sum := graph.Add(keep(graph.Reshape(product, nb*s.BlockSize)), wide(s.Offset))
	return graph.Reshape(graph.ConvertDType(sum, dtypes.Float32), cs.Dimensions...)
}

// roundToFloat32 rounds float64 values to float32 precision (to nearest, ties to even), keeping
// them in float64, with integer ops on their bits: normal float32 magnitudes only. The rounding
// has the gradient of the identity (GoMLX defines none for Bitcast), as ste.Apply: the rounded
// value under a StopGradient, plus x - StopGradient(x), which is zero.
func roundToFloat32(x *graph.Node) *graph.Node {
	g := x.Graph()
	const dropped = 52 - 23 // mantissa bits float32 lacks
	i64 := func(v int64) *graph.Node { return graph.Scalar(g, dtypes.Int64, v) }
	bits := graph.Bitcast(x, dtypes.Int64)
	odd := graph.Where(graph.NotEqual(graph.BitwiseAnd(bits, i64(1<<dropped)), i64(0)), i64(1), i64(0))
	bits = graph.Add(bits, graph.Add(i64(1<<(dropped-1)-1), odd))
	bits = graph.BitwiseAnd(bits, i64(^(1<<dropped - 1)))
	return graph.Add(graph.StopGradient(graph.Bitcast(bits, dtypes.Float64)), graph.Sub(x, graph.StopGradient(x)))
}

// Blockwise4DQ is a Blockwise4 weight whose block scales are double-quantized (NF4 with
// QLoRA's double quantization): Packed, Codebook and Dim as in Blockwise4, Scales nested. Its
// products decode the scales in the graph (1/blockSize of the weight) and then run as
// Blockwise4's: every strategy that serves a Blockwise4 product serves it, and Choose picks as it
// does for Blockwise4. The weight itself is never decoded more than Blockwise4's strategies do.
type Blockwise4DQ struct {
	Packed   *graph.Node
	Scales   NestedScales
	Codebook [16]float32
	Dim      int
}

var _ Layout = Blockwise4DQ{}

func (w Blockwise4DQ) kind() string { return "blockwise4-dq" }

func (w Blockwise4DQ) anyNode() *graph.Node { return w.Packed }

// BlockSize is the number of elements per block.
func (w Blockwise4DQ) BlockSize() int { return 2 * w.Packed.Shape().Dim(-1) }

// Dimensions returns the logical dimensions of the weight.
func (w Blockwise4DQ) Dimensions() []int {
	ps := w.Packed.Shape()
	return append(slices.Clone(ps.Dimensions[:ps.Rank()-2]), w.Dim)
}

func (w Blockwise4DQ) check(op string) {
	if w.Packed == nil {
		panic(errors.Errorf("%s: Blockwise4DQ needs a Packed node", op))
	}
	w.Scales.check(op)
	ps, cs := w.Packed.Shape(), w.Scales.Codes.Shape()
	ok := ps.Rank() >= 2 && cs.Rank() == ps.Rank()-1
	for i := 0; ok && i < cs.Rank(); i++ {
		ok = ps.Dimensions[i] == cs.Dimensions[i]
	}
	if ok {
		padded := ps.Dim(-2) * 2 * ps.Dim(-1)
		ok = ps.DType == dtypes.Uint8 && w.Dim > padded-2*ps.Dim(-1) && w.Dim <= padded
	}
	if !ok {
		panic(errors.Errorf("%s: packed %s, scale codes %s and last dimension %d are inconsistent; accepted: packed uint8 "+
			"(..., numBlocks, blockSize/2), codes uint8 (..., numBlocks), (numBlocks-1)·blockSize < dim <= numBlocks·blockSize",
			op, ps, cs, w.Dim))
	}
}

// decoded returns the Blockwise4 with the scales decoded to float32.
func (w Blockwise4DQ) decoded() Blockwise4 {
	return Blockwise4{Packed: w.Packed, Scales: w.Scales.Decode(), Codebook: w.Codebook, Dim: w.Dim}
}
func (w Blockwise4DQ) activationsError(dtype dtypes.DType) string {
	return Blockwise4{}.activationsError(dtype)
}

func (w Blockwise4DQ) scaleDType() dtypes.DType { return dtypes.Float32 }

func (w Blockwise4DQ) separableScale() *graph.Node { return nil }

// Dequantize returns the dense weight in dtype: the scales decoded (float32), then code value ×
// scale in float32 (float64 for dtype float64), then converted.
func (w Blockwise4DQ) Dequantize(dtype dtypes.DType) *graph.Node {
	w.check("lowering.Blockwise4DQ.Dequantize")
	return w.decoded().Dequantize(dtype)
}

func (w Blockwise4DQ) decode(p *product, unit bool) *graph.Node { return w.decoded().decode(p, unit) }

// slice decodes the scales, then slices as Blockwise4 (the second-level blocks run across rows,
// so the codes alone cannot be sliced).
func (w Blockwise4DQ) slice(axis, start, end int) (Layout, bool) {
	return w.decoded().slice(axis, start, end)
}

func (w Blockwise4DQ) serves(s Strategy, p *product) bool { return Blockwise4{}.serves(s, p) }

func (w Blockwise4DQ) requirement(s Strategy) string { return Blockwise4{}.requirement(s) }

func (w Blockwise4DQ) lower(s Strategy, p *product) *graph.Node { return w.decoded().lower(s, p) }

// String describes the weight for messages.
func (w Blockwise4DQ) String() string {
	return fmt.Sprintf("blockwise4-dq weight %v (packed %s, %s)", w.Dimensions(), w.Packed.Shape(), w.Scales)
}

// FlatBlockwise4 is a weight of any shape stored as Blockwise4 codes whose blocks run over the
// flattened weight (row-major), across rows, as bitsandbytes stores 4-bit weights:
//
//   - Packed: uint8 (numBlocks, blockSize/2), two codes a byte, the first in the high nibble.
//   - Scales: float (numBlocks); or nil, with Nested holding them double-quantized.
//   - Dims: the logical dimensions; numBlocks·blockSize − size(Dims) trailing elements are padding.
//
// Its products decode the weight (DecodeDot, MulReduce, Materialize, which Auto picks among as for
// any layout without a specific strategy): SlicedSum and ProductTable need blocks along one axis.
// A weight whose last dimension is a multiple of the block size is a Blockwise4 with the same
// bytes, which format packages use instead.
type FlatBlockwise4 struct {
	Packed   *graph.Node
	Scales   *graph.Node
	Nested   *NestedScales
	Codebook [16]float32
	Dims     []int
}

var _ Layout = FlatBlockwise4{}

func (w FlatBlockwise4) anyNode() *graph.Node { return w.Packed }

func (w FlatBlockwise4) kind() string {
	if w.Nested != nil {
		return "blockwise4-flat-dq"
	}
	return "blockwise4-flat"
}

// Dimensions returns the logical dimensions of the weight.
func (w FlatBlockwise4) Dimensions() []int { return slices.Clone(w.Dims) }

func (w FlatBlockwise4) size() int { return product1(w.Dims) }

func (w FlatBlockwise4) check(op string) {
	if w.Packed == nil || (w.Scales == nil) == (w.Nested == nil) {
		panic(errors.Errorf("%s: FlatBlockwise4 needs Packed and exactly one of Scales and Nested", op))
	}
	ps := w.Packed.Shape()
	var ss = ps
	if w.Nested != nil {
		w.Nested.check(op)
		ss = w.Nested.Codes.Shape()
	} else {
		ss = w.Scales.Shape()
	}
	ok := ps.DType == dtypes.Uint8 && ps.Rank() == 2 && ss.Rank() == 1 && ss.Dim(0) == ps.Dim(0) && len(w.Dims) > 0 &&
		(w.Nested != nil || ss.DType.IsFloat())
	if ok {
		padded := ps.Dim(0) * 2 * ps.Dim(1)
		ok = w.size() > padded-2*ps.Dim(1) && w.size() <= padded
	}
	if !ok {
		panic(errors.Errorf("%s: packed %s, scales %s and dimensions %v are inconsistent; accepted: packed uint8 (numBlocks, "+
			"blockSize/2), scales (numBlocks), (numBlocks-1)·blockSize < size <= numBlocks·blockSize", op, ps, ss, w.Dims))
	}
}

// rows returns the weight as a rank-1 Blockwise4 over the flattened elements.
func (w FlatBlockwise4) rows() Blockwise4 {
	scales := w.Scales
	if w.Nested != nil {
		scales = w.Nested.Decode()
	}
	return Blockwise4{Packed: w.Packed, Scales: scales, Codebook: w.Codebook, Dim: w.size()}
}

func (w FlatBlockwise4) activationsError(dtype dtypes.DType) string {
	return Blockwise4{}.activationsError(dtype)
}

func (w FlatBlockwise4) scaleDType() dtypes.DType {
	if w.Nested != nil {
		return dtypes.Float32
	}
	return w.Scales.DType()
}

func (w FlatBlockwise4) separableScale() *graph.Node { return nil }

// Dequantize returns the dense weight in dtype, with its logical dimensions: code value × scale
// computed in float32 (float64 for float64 scales or dtype), then converted.
func (w FlatBlockwise4) Dequantize(dtype dtypes.DType) *graph.Node {
	w.check("lowering.FlatBlockwise4.Dequantize")
	return graph.Reshape(w.rows().Dequantize(dtype), w.Dims...)
}

func (w FlatBlockwise4) decode(p *product, unit bool) *graph.Node {
	return graph.Reshape(w.rows().decode(p, unit), w.Dims...)
}

func (w FlatBlockwise4) slice(int, int, int) (Layout, bool) { return nil, false }

func (w FlatBlockwise4) serves(Strategy, *product) bool { return false }

func (w FlatBlockwise4) requirement(s Strategy) string {
	return fmt.Sprintf("weights whose blocks run along one axis (a %s weight, blocks over the flattened weight, is served by "+
		"auto, materialize, decode-dot and mul-reduce)", w.kind())
}

func (w FlatBlockwise4) lower(s Strategy, _ *product) *graph.Node {
	panic(errors.Errorf("lowering: %s cannot lower %s", s, w))
}

// String describes the weight for messages.
func (w FlatBlockwise4) String() string {
	scales := ""
	if w.Nested != nil {
		scales = w.Nested.String()
	} else if w.Scales != nil {
		scales = "scales " + w.Scales.Shape().String()
	}
	packed := "nil"
	if w.Packed != nil {
		packed = w.Packed.Shape().String()
	}
	return fmt.Sprintf("%s weight %v (packed %s, %s)", w.kind(), w.Dims, packed, scales)
}
