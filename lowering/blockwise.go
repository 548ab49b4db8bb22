package lowering

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
)

// Blockwise4 is a weight stored as 4-bit codes with one scale per block of its last axis, as
// graph nodes (NF4's layout, shared by any 16-entry codebook format):
//
//   - Packed: uint8 (..., numBlocks, blockSize/2), two codes a byte, the first in the high nibble.
//   - Scales: float (..., numBlocks), the block scale (NF4's absmax).
//   - Codebook: the value of each code.
//   - Dim: the logical size of the last axis; numBlocks*blockSize - Dim trailing elements are
//     zero padding and are dropped.
//
// Element (..., i) of the weight is Codebook[code] * Scales[..., i/blockSize].
type Blockwise4 struct {
	Packed, Scales *graph.Node
	Codebook       [16]float32
	Dim            int
}

// BlockSize is the number of elements per block.
func (w Blockwise4) BlockSize() int { return 2 * w.Packed.Shape().Dim(-1) }

// Dimensions returns the logical dimensions of the weight.
func (w Blockwise4) Dimensions() []int {
	ps := w.Packed.Shape()
	dims := append([]int(nil), ps.Dimensions[:ps.Rank()-2]...)
	return append(dims, w.Dim)
}

// Check panics with a message naming op if the components are inconsistent.
func (w Blockwise4) Check(op string) {
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
			"(..., numBlocks, blockSize/2), scales float (..., numBlocks), (numBlocks-1)*blockSize < dim <= numBlocks*blockSize",
			op, ps, ss, w.Dim))
	}
}

// computeDType is the dtype products are accumulated in: float64 if either side is float64, else
// float32.
func computeDType(dts ...dtypes.DType) dtypes.DType {
	for _, dt := range dts {
		if dt == dtypes.Float64 {
			return dtypes.Float64
		}
	}
	return dtypes.Float32
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
	dims := append([]int(nil), ps.Dimensions[:ps.Rank()-1]...)
	return graph.Reshape(vals, append(dims, 2*ps.Dim(-1))...)
}

// Unpack returns the 4-bit codes of packed (..., numBlocks, blockSize/2) as uint8
// (..., numBlocks, blockSize), in element order (high nibble first). It uses integer division and
// bitwise-and, which every backend implements (the pure-Go backend lacks logical shifts).
func Unpack(packed *graph.Node) *graph.Node {
	g := packed.Graph()
	hi := graph.Div(packed, graph.Scalar(g, dtypes.Uint8, 16))
	lo := graph.BitwiseAnd(packed, graph.Scalar(g, dtypes.Uint8, 15))
	ps := packed.Shape()
	dims := append([]int(nil), ps.Dimensions[:ps.Rank()-1]...)
	return graph.Reshape(graph.Stack([]*graph.Node{hi, lo}, -1), append(dims, 2*ps.Dim(-1))...)
}

// Pack is the inverse of Unpack: codes uint8 (..., numBlocks, blockSize) in [0, 16) become
// (..., numBlocks, blockSize/2) bytes, the even element in the high nibble.
func Pack(codes *graph.Node) *graph.Node {
	cs := codes.Shape()
	if cs.DType != dtypes.Uint8 || cs.Rank() < 1 || cs.Dim(-1)%2 != 0 {
		panic(errors.Errorf("lowering.Pack: codes %s; accepted: uint8 with an even last dimension", cs))
	}
	dims := append([]int(nil), cs.Dimensions[:cs.Rank()-1]...)
	pairs := graph.Reshape(codes, append(dims, cs.Dim(-1)/2, 2)...)
	hi := graph.Squeeze(graph.SliceAxis(pairs, -1, graph.AxisElem(0)), -1)
	lo := graph.Squeeze(graph.SliceAxis(pairs, -1, graph.AxisElem(1)), -1)
	return graph.Add(graph.Mul(hi, graph.Scalar(codes.Graph(), dtypes.Uint8, 16)), lo)
}

// Dequantize returns the dense weight in dtype, with its logical dimensions (padding dropped). The
// products code value × scale are computed in float32 (float64 if the scales are float64) and
// then converted to dtype.
func (w Blockwise4) Dequantize(dtype dtypes.DType) *graph.Node {
	w.Check("lowering.Blockwise4.Dequantize")
	cdt := computeDType(w.Scales.DType())
	return graph.ConvertDType(w.dequantizeIn(cdt), dtype)
}

// dequantizeIn is Dequantize computed and returned in cdt.
func (w Blockwise4) dequantizeIn(cdt dtypes.DType) *graph.Node {
	vals := graph.Mul(decodePairs(w.Packed, w.Codebook, cdt), graph.InsertAxes(graph.ConvertDType(w.Scales, cdt), -1))
	ps := w.Packed.Shape()
	dims := append([]int(nil), ps.Dimensions[:ps.Rank()-2]...)
	flat := graph.Reshape(vals, append(dims, ps.Dim(-2)*2*ps.Dim(-1))...)
	if w.Dim != flat.Shape().Dim(-1) {
		flat = graph.SliceAxis(flat, -1, graph.AxisRange(0, w.Dim))
	}
	return flat
}

// String describes the weight for messages.
func (w Blockwise4) String() string {
	return fmt.Sprintf("Blockwise4{packed %s, scales %s, dim %d}", w.Packed.Shape(), w.Scales.Shape(), w.Dim)
}
