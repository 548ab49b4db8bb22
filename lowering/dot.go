package lowering

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/runtime"
)

// Strategy names a formulation of a quantized dot_general as dense graph ops.
type Strategy int

const (
	// Auto lets Choose pick by shape class and backend.
	Auto Strategy = iota
	// Materialize is eformer's off-TPU path: build the dense weight, then one DotGeneral. Format
	// packages implement it through implicitarray.Materialize, so it is counted; lowering
	// computes it as DequantizeDot.
	Materialize
	// DequantizeDot decodes the weight (table gather, times the block scale) and runs one dense
	// DotGeneral in the same graph. Serves every axis combination.
	DequantizeDot
	// MulReduce fuses the decode into a broadcast multiply and a reduce-sum over the contracting
	// axis, so a fusing backend streams the packed bytes once and never writes a dense weight.
	// For small M.
	MulReduce
	// BlockFactored contracts each block with the unscaled code values (a DotGeneral batched
	// over blocks), then multiplies by the block scales and sums over blocks. Needs the block
	// axis to be contracted.
	BlockFactored
	// ProductTable builds, per call, a table of activation products indexed by the packed byte
	// (256 entries per byte position), so the inner loop is one gather and one add per two
	// weights. For small M.
	ProductTable
	// SlicedPoly decodes with arithmetic only (the byte's four base-4 digits by integer division
	// and bitwise-and, each nibble's code value by a bivariate cubic in its two digits, within
	// 2.4e-7 of the NF4 codebook in float32) and sums the weighted rows of a few slices of the
	// contraction axis element-wise before one small reduction, so XLA CPU emits parallel loops
	// that never write a dense weight. For one activation row with the blocks free (x @ W in
	// eformer's layout); more rows are computed as DequantizeDot. Fast on XLA CPU only with its
	// library fusions disabled (see runtime.CPUFusedLoops), and on the pure-Go backend.
	SlicedPoly
)

var strategyNames = []string{"auto", "materialize", "dequantize-dot", "mul-reduce", "block-factored", "product-table",
	"sliced-poly"}

// String returns the strategy's name, e.g. "mul-reduce".
func (s Strategy) String() string {
	if s >= 0 && int(s) < len(strategyNames) {
		return strategyNames[s]
	}
	return fmt.Sprintf("Strategy(%d)", int(s))
}

// Strategies lists every strategy but Auto, for benchmarks.
func Strategies() []Strategy {
	return []Strategy{Materialize, DequantizeDot, MulReduce, BlockFactored, ProductTable, SlicedPoly}
}

// Layout says where a rank-2 weight's block axis is relative to the contraction.
type Layout int

const (
	// General: the weight has rank != 2, batch axes, or several contracting axes.
	General Layout = iota
	// BlocksFree: the weight contracts its first axis and its blocks run along the free axis
	// (eformer's x @ W with W (K, N)).
	BlocksFree
	// BlocksContracted: the weight contracts its last axis, the block axis (W (N, K), as in
	// x @ Wᵀ or W @ x).
	BlocksContracted
)

// LayoutOf classifies a weight of the given rank, contracting and batch axes (normalized).
func LayoutOf(rank int, contractingAxes, batchAxes []int) Layout {
	if rank != 2 || len(batchAxes) != 0 || len(contractingAxes) != 1 {
		return General
	}
	if contractingAxes[0] == 0 {
		return BlocksFree
	}
	return BlocksContracted
}

// Applicable reports whether strategy s can compute a product of that layout; DequantizeDot and
// Materialize serve every layout.
func (s Strategy) Applicable(layout Layout) bool {
	switch s {
	case Auto, Materialize, DequantizeDot:
		return true
	case MulReduce, ProductTable:
		return layout != General
	case BlockFactored:
		return layout == BlocksContracted
	case SlicedPoly:
		return layout == BlocksFree
	}
	return false
}

// requirement says which weights a fused strategy serves, for error messages.
func (s Strategy) requirement() string {
	switch s {
	case BlockFactored:
		return "rank-2 weights contracted on their last (block) axis"
	case SlicedPoly:
		return "rank-2 weights contracted on their first axis (blocks free: x @ W)"
	}
	return "rank-2 weights with one contracting axis and no batch axes"
}

// DotGeneral computes graph.DotGeneral(lhs, ..., rhs, ...) where one side is the quantized weight
// w and the other the dense activation x: with weightOnLeft the weight is lhs. Axes may be
// negative. Products accumulate in float32 (float64 when x or the scales are float64) and the
// result has x's dtype. A strategy that cannot serve the layout (see Applicable) panics; Auto
// asks Choose.
func DotGeneral(x *graph.Node, xContractingAxes, xBatchAxes []int, w Blockwise4, wContractingAxes, wBatchAxes []int,
	weightOnLeft bool, s Strategy) *graph.Node {
	w.Check("lowering.DotGeneral")
	wDims := w.Dimensions()
	wc, wb := normalize(wContractingAxes, len(wDims)), normalize(wBatchAxes, len(wDims))
	xc, xb := normalize(xContractingAxes, x.Rank()), normalize(xBatchAxes, x.Rank())
	layout := LayoutOf(len(wDims), wc, wb)
	if s == Auto {
		s = Choose(x.Graph().Backend(), freeSize(x.Shape().Dimensions, xc, xb), layout)
	}
	if !s.Applicable(layout) {
		panic(errors.Errorf("lowering.DotGeneral: strategy %s cannot serve weight %v contracting %v batch %v; "+
			"accepted: %s for %s, or DequantizeDot for any", s, wDims, wc, wb, s, s.requirement()))
	}
	cdt := computeDType(x.DType(), w.Scales.DType())
	xc32 := graph.ConvertDType(x, cdt)
	var out *graph.Node
	polyDecode := runtime.CPUFusedLoops(x.Graph().Backend())
	if s == SlicedPoly && freeSize(x.Shape().Dimensions, xc, xb) > 1 {
		s = DequantizeDot
	}
	// A large weight with free blocks is decoded a slab at a time (see slabDot).
	slabbed := s == DequantizeDot && layout == BlocksFree && freeSize(x.Shape().Dimensions, xc, xb) <= SlabMaxRows &&
		w.Packed.Shape().Dim(0)*w.Dim*cdt.Size() > 2*SlabBytes
	if s == Materialize || (s == DequantizeDot && !slabbed) {
		dense := w.dequantizeIn(cdt)
		if s == DequantizeDot && polyDecode {
			dense = w.polyDequantizeIn(cdt)
		}
		if weightOnLeft {
			out = graph.DotGeneral(dense, wc, wb, xc32, xc, xb)
		} else {
			out = graph.DotGeneral(xc32, xc, xb, dense, wc, wb)
		}
		return graph.ConvertDType(out, x.DType())
	}
	// Rank-2 weight, one contracting axis, no batch axes: flatten x's free axes into M.
	xFree := freeAxes(x.Rank(), xc, xb)
	perm := append(slices.Clone(xFree), xc...)
	freeDims := make([]int, len(xFree))
	m := 1
	for i, a := range xFree {
		freeDims[i] = x.Shape().Dim(a)
		m *= freeDims[i]
	}
	x2 := graph.Reshape(graph.TransposeAllAxes(xc32, perm...), m, x.Shape().Dim(xc[0])) // (M, K)
	var mn *graph.Node                                                                  // (M, N)
	switch s {
	case MulReduce:
		mn = mulReduce(x2, w, layout, cdt)
	case BlockFactored:
		mn = blockFactored(x2, w, cdt)
	case ProductTable:
		mn = productTable(x2, w, layout, cdt)
	case SlicedPoly:
		mn = slicedPoly(x2, w, cdt)
	case DequantizeDot: // slabbed
		decode := Blockwise4.dequantizeIn
		if polyDecode {
			decode = Blockwise4.polyDequantizeIn
		}
		mn = slabDot(x2, w, cdt, func(sub Blockwise4) *graph.Node { return decode(sub, cdt) }) // K is never padded: blocks run along N
	}
	n := mn.Shape().Dim(1)
	if weightOnLeft {
		// Output axes: weight free axis, then x's free axes.
		out = graph.Reshape(graph.TransposeAllAxes(mn, 1, 0), append([]int{n}, freeDims...)...)
	} else {
		out = graph.Reshape(mn, append(freeDims, n)...)
	}
	return graph.ConvertDType(out, x.DType())
}

// padK zero-pads the contraction axis of x2 (M, K) to the weight's padded length.
func padK(x2 *graph.Node, w Blockwise4) *graph.Node {
	ps := w.Packed.Shape()
	padded := ps.Dim(-2) * 2 * ps.Dim(-1)
	if padded == x2.Shape().Dim(1) {
		return x2
	}
	return ZeroPadAxis(x2, 1, padded-x2.Shape().Dim(1))
}

// mulReduce: the decode feeds a broadcast multiply and a reduce-sum.
func mulReduce(x2 *graph.Node, w Blockwise4, layout Layout, cdt dtypes.DType) *graph.Node {
	if layout == BlocksFree {
		// out[m, n] = Σ_k x[m, k] · W[k, n]
		dense := w.dequantizeIn(cdt) // (K, N), fused into the reduction
		return graph.ReduceSum(graph.Mul(graph.InsertAxes(x2, -1), graph.InsertAxes(dense, 0)), 1)
	}
	// Blocks along K: out[m, n] = Σ_b s[n, b] Σ_i x[m, b, i] · v[n, b, i]
	ps := w.Packed.Shape()
	nb, bs := ps.Dim(-2), 2*ps.Dim(-1)
	m := x2.Shape().Dim(0)
	x3 := graph.Reshape(padK(x2, w), m, 1, nb, bs)
	v := graph.InsertAxes(decodePairs(w.Packed, w.Codebook, cdt), 0) // (1, N, nb, bs)
	partial := graph.ReduceSum(graph.Mul(x3, v), -1)                 // (M, N, nb)
	return graph.ReduceSum(graph.Mul(partial, graph.InsertAxes(graph.ConvertDType(w.Scales, cdt), 0)), -1)
}

// blockFactored: a DotGeneral batched over blocks with the unscaled codes, then the scales.
func blockFactored(x2 *graph.Node, w Blockwise4, cdt dtypes.DType) *graph.Node {
	ps := w.Packed.Shape()
	nb, bs := ps.Dim(-2), 2*ps.Dim(-1)
	m := x2.Shape().Dim(0)
	x3 := graph.Reshape(padK(x2, w), m, nb, bs)
	v := decodePairs(w.Packed, w.Codebook, cdt)                                                    // (N, nb, bs)
	partial := graph.DotGeneral(x3, []int{2}, []int{1}, v, []int{2}, []int{1})                     // (nb, M, N)
	scales := graph.InsertAxes(graph.TransposeAllAxes(graph.ConvertDType(w.Scales, cdt), 1, 0), 1) // (nb, 1, N)
	return graph.ReduceSum(graph.Mul(partial, scales), 0)
}

// productTable: per call, the products of activation pairs with every byte's two code values.
func productTable(x2 *graph.Node, w Blockwise4, layout Layout, cdt dtypes.DType) *graph.Node {
	g := x2.Graph()
	ps := w.Packed.Shape()
	nb, half := ps.Dim(-2), ps.Dim(-1)
	m := x2.Shape().Dim(0)
	pairs := pairTable(g, w.Codebook, cdt) // (256, 2)
	scales := graph.ConvertDType(w.Scales, cdt)
	if layout == BlocksContracted {
		// Bytes pair two K positions: T[j, byte, m] = x[m, 2j]·cb[hi] + x[m, 2j+1]·cb[lo].
		n := ps.Dim(0)
		kp := nb * 2 * half
		xp := graph.TransposeAllAxes(graph.Reshape(padK(x2, w), m, kp/2, 2), 1, 2, 0) // (K/2, 2, M)
		table := graph.DotGeneral(pairs, []int{1}, nil, xp, []int{1}, nil)            // (256, K/2, M)
		table = graph.TransposeAllAxes(table, 1, 0, 2)                                // (K/2, 256, M)
		// Index (j, byte) for every packed byte (n, b, i) with j = b·half + i.
		bytes := graph.ConvertDType(graph.Reshape(w.Packed, n, nb*half), dtypes.Int32)
		pos := graph.Iota(g, bytes.Shape(), 1)
		idx := graph.Reshape(graph.Stack([]*graph.Node{pos, bytes}, -1), n*nb*half, 2)
		got := graph.Reshape(graph.Gather(table, idx), n, nb, half, m) // (N, nb, half, M)
		perBlock := graph.ReduceSum(got, 2)                            // (N, nb, M)
		out := graph.ReduceSum(graph.Mul(perBlock, graph.InsertAxes(scales, -1)), 1)
		return graph.TransposeAllAxes(out, 1, 0) // (M, N)
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
		out = graph.SliceAxis(out, 0, graph.AxisRange(0, w.Dim))
	}
	return graph.TransposeAllAxes(out, 1, 0)
}

func normalize(axes []int, rank int) []int {
	out := make([]int, len(axes))
	for i, a := range axes {
		if a < 0 {
			a += rank
		}
		if a < 0 || a >= rank {
			panic(errors.Errorf("lowering.DotGeneral: axis %d out of range for rank %d", axes[i], rank))
		}
		out[i] = a
	}
	return out
}

func freeAxes(rank int, contracting, batch []int) []int {
	var free []int
	for a := range rank {
		if !slices.Contains(contracting, a) && !slices.Contains(batch, a) {
			free = append(free, a)
		}
	}
	return free
}

// freeSize is the product of the free dimensions of x (M of the product).
func freeSize(dims []int, contracting, batch []int) int {
	m := 1
	for _, a := range freeAxes(len(dims), contracting, batch) {
		m *= dims[a]
	}
	return m
}

// ZeroPadAxis appends extra zeros to axis of x (with a Concatenate: the pure-Go backend has no Pad).
func ZeroPadAxis(x *graph.Node, axis, extra int) *graph.Node {
	if extra == 0 {
		return x
	}
	dims := x.Shape().Clone().Dimensions
	if axis < 0 {
		axis += len(dims)
	}
	dims[axis] = extra
	zeros := graph.BroadcastToDims(graph.ScalarZero(x.Graph(), x.DType()), dims...)
	return graph.Concatenate([]*graph.Node{x, zeros}, axis)
}
