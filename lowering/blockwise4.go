package lowering

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
)

// Blockwise4 is a weight stored as 4-bit codes of a 16-entry codebook with one scale per block
// of its last axis (NF4's layout), as graph nodes:
//
//   - Packed: uint8 (..., numBlocks, blockSize/2), two codes a byte, the first in the high nibble.
//   - Scales: float (..., numBlocks), the block scale (NF4's absmax).
//   - Codebook: the value of each code.
//   - Dim: the logical size of the last axis; numBlocks·blockSize − Dim trailing elements are
//     padding and are dropped.
//
// Element (..., i) of the weight is Codebook[code] · Scales[..., i/blockSize].
type Blockwise4 struct {
	Packed, Scales *graph.Node
	Codebook       [16]float32
	Dim            int
}

var _ Layout = Blockwise4{}

func (w Blockwise4) anyNode() *graph.Node { return w.Packed }

func (w Blockwise4) kind() string { return "blockwise4" }

// BlockSize is the number of elements per block.
func (w Blockwise4) BlockSize() int { return 2 * w.Packed.Shape().Dim(-1) }

// Dimensions returns the logical dimensions of the weight.
func (w Blockwise4) Dimensions() []int {
	ps := w.Packed.Shape()
	return append(slices.Clone(ps.Dimensions[:ps.Rank()-2]), w.Dim)
}

func (w Blockwise4) check(op string) {
	if w.Packed == nil || w.Scales == nil {
		panic(errors.Errorf("%s: Blockwise4 needs Packed and Scales nodes", op))
	}
	ps, ss := w.Packed.Shape(), w.Scales.Shape()
	ok := ps.DType == dtypes.Uint8 && ss.DType.IsFloat() && ps.Rank() >= 2 && ss.Rank() == ps.Rank()-1
	for i := 0; ok && i < ss.Rank(); i++ {
		ok = ps.Dimensions[i] == ss.Dimensions[i]
	}
	if ok {
		padded := ps.Dim(-2) * 2 * ps.Dim(-1)
		ok = w.Dim > padded-2*ps.Dim(-1) && w.Dim <= padded
	}
	if !ok {
		panic(errors.Errorf("%s: packed %s, scales %s and last dimension %d are inconsistent; accepted: packed uint8 "+
			"(..., numBlocks, blockSize/2), scales float (..., numBlocks), (numBlocks-1)·blockSize < dim <= numBlocks·blockSize",
			op, ps, ss, w.Dim))
	}
}

func (w Blockwise4) activationsError(dtype dtypes.DType) string {
	if dtype.IsFloat() && !dtype.IsComplex() {
		return ""
	}
	return "a float activation dtype"
}

func (w Blockwise4) scaleDType() dtypes.DType { return w.Scales.DType() }

// separableScale is nil: block scales vary along the block axis.
func (w Blockwise4) separableScale() *graph.Node { return nil }

// Dequantize returns the dense weight in dtype, with its logical dimensions: code value × scale
// computed in float32 (float64 for float64 scales or dtype), then converted.
func (w Blockwise4) Dequantize(dtype dtypes.DType) *graph.Node {
	w.check("lowering.Blockwise4.Dequantize")
	cdt := computeDType(w.Scales.DType(), w)
	if dtype == dtypes.Float64 {
		cdt = dtypes.Float64
	}
	return graph.ConvertDType(w.tableDecode(cdt), dtype)
}

// decode uses the arithmetic decode where XLA CPU fuses it into one loop (library fusions off),
// the gather table elsewhere.
func (w Blockwise4) decode(p *product, _ bool) *graph.Node {
	if p.platform.base() == XLACPUFusedLoops {
		return w.polyDecode(p.cdt)
	}
	return w.tableDecode(p.cdt)
}

func (w Blockwise4) slice(axis, start, end int) (Layout, bool) {
	if axis == len(w.Dimensions())-1 {
		return nil, false
	}
	w.Packed, w.Scales = sliceAxis(w.Packed, axis, start, end), sliceAxis(w.Scales, axis, start, end)
	return w, true
}

func (w Blockwise4) serves(s Strategy, p *product) bool {
	switch s {
	case SlicedSum:
		return p.kMajor()
	case ProductTable:
		return p.rank2()
	}
	return false
}

func (w Blockwise4) requirement(s Strategy) string {
	if s == SlicedSum {
		return "rank-2 weights contracted on their first axis (x·W, blocks along the free axis)"
	}
	return "rank-2 weights with one contracting axis and no batch axes"
}

func (w Blockwise4) lower(s Strategy, p *product) *graph.Node {
	if s == SlicedSum {
		return p.finish(p.fromMN(w.slicedSum(p)))
	}
	return p.finish(p.fromMN(w.productTable(p)))
}

// String describes the weight for messages.
func (w Blockwise4) String() string {
	return fmt.Sprintf("blockwise4 weight %v (packed %s, scales %s)", w.Dimensions(), w.Packed.Shape(), w.Scales.Shape())
}

// pairTable is the (256, 2) table of the two values a packed byte decodes to, in dtype.
func pairTable(g *graph.Graph, codebook [16]float32, dtype dtypes.DType) *graph.Node {
	table := make([][]float64, 256)
	for b := range table {
		table[b] = []float64{float64(codebook[b>>4]), float64(codebook[b&15])}
	}
	return graph.ConvertDType(graph.Const(g, table), dtype)
}

// decodePairs returns the code values of packed (..., numBlocks, blockSize/2) as dtype
// (..., numBlocks, blockSize), unscaled, with one gather of a 256-entry pair table per byte.
func decodePairs(packed *graph.Node, codebook [16]float32, dtype dtypes.DType) *graph.Node {
	ps := packed.Shape()
	idx := graph.Reshape(graph.ConvertDType(packed, dtypes.Int32), ps.Size(), 1)
	vals := graph.Gather(pairTable(packed.Graph(), codebook, dtype), idx) // (n, 2)
	return graph.Reshape(vals, append(slices.Clone(ps.Dimensions[:ps.Rank()-1]), 2*ps.Dim(-1))...)
}

// scaleAndFlatten multiplies code values (..., numBlocks, blockSize) by the block scales and
// returns them with the logical last axis (padding dropped), in cdt.
func (w Blockwise4) scaleAndFlatten(values *graph.Node, cdt dtypes.DType) *graph.Node {
	vals := graph.Mul(values, graph.InsertAxes(graph.ConvertDType(w.Scales, cdt), -1))
	ps := w.Packed.Shape()
	flat := graph.Reshape(vals, append(slices.Clone(ps.Dimensions[:ps.Rank()-2]), ps.Dim(-2)*2*ps.Dim(-1))...)
	if w.Dim != flat.Shape().Dim(-1) {
		flat = graph.SliceAxis(flat, -1, graph.AxisRange(0, w.Dim))
	}
	return flat
}

// tableDecode is the dense weight in cdt, decoded with the gather table.
func (w Blockwise4) tableDecode(cdt dtypes.DType) *graph.Node {
	return w.scaleAndFlatten(decodePairs(w.Packed, w.Codebook, cdt), cdt)
}

// Pack packs 4-bit codes: codes uint8 (..., numBlocks, blockSize) in [0, 16) become
// (..., numBlocks, blockSize/2) bytes, the even element in the high nibble.
func Pack(codes *graph.Node) *graph.Node {
	cs := codes.Shape()
	if cs.DType != dtypes.Uint8 || cs.Rank() < 1 || cs.Dim(-1)%2 != 0 {
		panic(errors.Errorf("lowering.Pack: codes %s; accepted: uint8 with an even last dimension", cs))
	}
	pairs := graph.Reshape(codes, append(slices.Clone(cs.Dimensions[:cs.Rank()-1]), cs.Dim(-1)/2, 2)...)
	hi := graph.Squeeze(graph.SliceAxis(pairs, -1, graph.AxisElem(0)), -1)
	lo := graph.Squeeze(graph.SliceAxis(pairs, -1, graph.AxisElem(1)), -1)
	return graph.Add(graph.Mul(hi, graph.Scalar(codes.Graph(), dtypes.Uint8, 16)), lo)
}

// productTable is ProductTable for a rank-2 weight, returning (M, N) in p.cdt: per call, the
// products of the activations with both code values of every byte.
func (w Blockwise4) productTable(p *product) *graph.Node {
	x2 := p.toMK(p.activations())
	g := x2.Graph()
	ps := w.Packed.Shape()
	nb, half := ps.Dim(-2), ps.Dim(-1)
	m := x2.Shape().Dim(0)
	pairs := pairTable(g, w.Codebook, p.cdt) // (256, 2)
	scales := graph.ConvertDType(w.Scales, p.cdt)
	if !p.kMajor() {
		// Bytes pair two K positions: T[j, byte, m] = x[m, 2j]·cb[hi] + x[m, 2j+1]·cb[lo].
		n := ps.Dim(0)
		kp := nb * 2 * half
		if pad := kp - x2.Shape().Dim(1); pad > 0 {
			x2 = zeroPad(x2, 1, pad)
		}
		xp := graph.TransposeAllAxes(graph.Reshape(x2, m, kp/2, 2), 1, 2, 0) // (K/2, 2, M)
		table := graph.DotGeneral(pairs, []int{1}, nil, xp, []int{1}, nil)   // (256, K/2, M)
		table = graph.TransposeAllAxes(table, 1, 0, 2)                       // (K/2, 256, M)
		// Index (j, byte) for every packed byte (n, b, i) with j = b·half + i.
		bytes := graph.ConvertDType(graph.Reshape(w.Packed, n, nb*half), dtypes.Int32)
		pos := graph.Iota(g, bytes.Shape(), 1)
		idx := graph.Reshape(graph.Stack([]*graph.Node{pos, bytes}, -1), n*nb*half, 2)
		got := graph.Reshape(graph.Gather(table, idx), n, nb, half, m) // (N, nb, half, M)
		perBlock := graph.ReduceSum(got, 2)                            // (N, nb, M)
		out := graph.ReduceSum(graph.Mul(perBlock, graph.InsertAxes(scales, -1)), 1)
		return graph.TransposeAllAxes(out, 1, 0)
	}
	// Bytes pair two N positions: T[k, byte, :, m] = x[m, k]·(cb[hi], cb[lo]).
	k := ps.Dim(0)
	table := graph.Mul(graph.InsertAxes(pairs, 0, -1), graph.InsertAxes(graph.TransposeAllAxes(x2, 1, 0), 1, 1)) // (K, 256, 2, M)
	bytes := graph.ConvertDType(graph.Reshape(w.Packed, k, nb*half), dtypes.Int32)
	pos := graph.Iota(g, bytes.Shape(), 0)
	idx := graph.Reshape(graph.Stack([]*graph.Node{pos, bytes}, -1), k*nb*half, 2)
	got := graph.Reshape(graph.Gather(table, idx), k, nb, 2*half, m) // (K, nb, bs, M)
	scaled := graph.Mul(got, graph.InsertAxes(scales, -1, -1))
	out := graph.Reshape(graph.ReduceSum(scaled, 0), nb*2*half, m) // (Np, M)
	if out.Shape().Dim(0) != w.Dim {
		out = sliceActivations(out, 0, 0, w.Dim)
	}
	return graph.TransposeAllAxes(out, 1, 0)
}

// zeroPad appends extra zeros to axis of x (with a Concatenate: the pure-Go backend has no Pad).
func zeroPad(x *graph.Node, axis, extra int) *graph.Node {
	dims := slices.Clone(x.Shape().Dimensions)
	dims[axis] = extra
	zeros := graph.BroadcastToDims(graph.ScalarZero(x.Graph(), x.DType()), dims...)
	return graph.Concatenate([]*graph.Node{x, zeros}, axis)
}
