package int8

import (
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/runtime"
)

// Lowering says how a dot_general between dense activations and an int8 Array is built from
// graph ops. Every lowering but LoweringMaterialize keeps the weight int8 in memory: the int8 to
// float convert is an operand of the product (XLA fuses it into the consumer where it can).
type Lowering int

const (
	// LoweringAuto picks per call: LoweringSliced for one or two activation rows on XLA with its
	// library fusions off (see LoweringSliced); LoweringReduce for few rows (at most ReduceMaxRows)
	// when the weight's contracting axes are its trailing axes and there are no batch axes; when
	// the scale varies only along free or only along contracting axes, LoweringSlabs for up to
	// SlabMaxRows rows and a weight of more than one slab, else LoweringScaled; and
	// LoweringDequantize for other scales.
	LoweringAuto Lowering = iota
	// LoweringScaled is dot_general(x, convert(q)) with the scale placed where it is cheapest: a
	// scale shared along the contracting axes (per output channel, per tensor) multiplies the
	// product afterwards, a scale shared along the free axes (per contracting row, the default
	// axis -1 on a (K, N) weight) multiplies the activations before.
	LoweringScaled
	// LoweringReduce is reduce_sum(x · convert(q) · scale) over the contracting axes: one fused
	// multiply-reduce that reads each int8 weight once, for matrix-vector products.
	LoweringReduce
	// LoweringSlabs is LoweringScaled computed over slabs of the first contracting axis, each slab
	// converted to float just before its dot_general and chained to the previous product, so XLA
	// keeps one small float buffer (about SlabBytes) instead of a float copy of the whole weight:
	// XLA CPU does not fuse the convert into a dot, and a fresh weight-sized buffer per call costs
	// more than the product for a few activation rows.
	LoweringSlabs
	// LoweringDequantize multiplies convert(q) by the broadcast scale inside the handler, then
	// runs the dense dot_general: the fallback for scales that vary along both free and
	// contracting axes. Counted as a materialization.
	LoweringDequantize
	// LoweringMaterialize is eformer's materialize-then-dot: implicitarray.Materialize in the
	// array's dtype, then the dense dot_general. For comparisons and benchmarks.
	LoweringMaterialize
	// LoweringSliced is, for a rank-2 weight contracted on its first axis (x @ W), the products
	// x[k]·convert(q[k, :]) summed over a few slices of K element-wise, then one small reduction:
	// a single parallel XLA loop that reads each int8 weight once. LoweringAuto picks it for up to
	// SlicedMaxRows rows on XLA when XLA CPU's library fusions are disabled
	// (runtime.CPUFusedLoops, the quanta runtime's default on XLA CPU), where it beats the dense
	// float32 product (see SlicedMaxRows).
	LoweringSliced
)

// ReduceMaxRows is the largest number of activation rows (the product of the dense operand's free
// dimensions) for which LoweringAuto picks LoweringReduce.
const ReduceMaxRows = 8

// SlabMaxRows is the largest number of activation rows for which LoweringAuto picks LoweringSlabs.
const SlabMaxRows = 64

// SlabBytes is the target size of one float slab of LoweringSlabs.
const SlabBytes = 4 << 20

var loweringNames = []string{"auto", "scaled", "reduce", "slabs", "dequantize", "materialize", "sliced"}

// String returns "auto", "scaled", "reduce", "slabs", "dequantize", "materialize" or "sliced".
func (l Lowering) String() string {
	if int(l) < 0 || int(l) >= len(loweringNames) {
		return "invalid"
	}
	return loweringNames[l]
}

// side is one operand's view of a dot_general: its contracting and batch axes (paired in order
// with the other operand's) and its free axes (ascending).
type side struct {
	contracting, batch, free []int
}

func newSide(rank int, contracting, batch []int) side {
	s := side{contracting: contracting, batch: batch}
	for a := range rank {
		if !slices.Contains(contracting, a) && !slices.Contains(batch, a) {
			s.free = append(s.free, a)
		}
	}
	return s
}

// DotGeneral computes the dot_general of dense activations and an int8 Array (either side) with
// the given lowering, honouring the dimension numbers (see implicitarray.DotGeneral; negative axes
// accepted). It accumulates in float32 (float64 for float64 activations) and returns the
// activations' dtype. The dispatch handlers call it with the array's own lowering.
func DotGeneral(lhs implicitarray.Value, lhsContractingAxes, lhsBatchAxes []int,
	rhs implicitarray.Value, rhsContractingAxes, rhsBatchAxes []int, lowering Lowering) *graph.Node {
	x, w, wIsRhs := operands(lhs, rhs)
	if x == nil {
		panic(errors.Errorf("int8.DotGeneral of %s and %s; accepted: one *graph.Node and one *int8.Array",
			implicitarray.TypeName(lhs), implicitarray.TypeName(rhs)))
	}
	p := &implicitarray.DotGeneralParams{
		LhsContractingAxes: mustNormalize(lhsContractingAxes, lhs.Shape().Rank()),
		LhsBatchAxes:       mustNormalize(lhsBatchAxes, lhs.Shape().Rank()),
		RhsContractingAxes: mustNormalize(rhsContractingAxes, rhs.Shape().Rank()),
		RhsBatchAxes:       mustNormalize(rhsBatchAxes, rhs.Shape().Rank()),
	}
	return dotGeneral(x, w, p, wIsRhs, lowering)
}

func operands(lhs, rhs implicitarray.Value) (x *graph.Node, w *Array, wIsRhs bool) {
	if n, ok := lhs.(*graph.Node); ok {
		if a, ok := rhs.(*Array); ok {
			return n, a, true
		}
	}
	if n, ok := rhs.(*graph.Node); ok {
		if a, ok := lhs.(*Array); ok {
			return n, a, false
		}
	}
	return nil, nil, false
}

func mustNormalize(axes []int, rank int) []int {
	n, err := normalizeAxes(axes, rank)
	if err != nil {
		panic(errors.WithMessage(err, "int8.DotGeneral"))
	}
	return n
}

// dotGeneral is the weight-only product; p's axes are normalized.
func dotGeneral(x *graph.Node, w *Array, p *implicitarray.DotGeneralParams, wIsRhs bool, lowering Lowering) *graph.Node {
	w.mustNotBeDeleted("DotGeneral")
	if !x.DType().IsFloat() || x.DType().IsComplex() {
		panic(errors.Errorf("int8 dot_general of %s and *int8.Array %s: accepted activations of a float dtype", x.Shape(), w.Shape()))
	}
	xs, ws := newSide(x.Rank(), p.LhsContractingAxes, p.LhsBatchAxes), newSide(w.Shape().Rank(), p.RhsContractingAxes, p.RhsBatchAxes)
	if !wIsRhs {
		xs, ws = newSide(x.Rank(), p.RhsContractingAxes, p.RhsBatchAxes), newSide(w.Shape().Rank(), p.LhsContractingAxes, p.LhsBatchAxes)
	}
	compute := dtypes.Float32
	if x.DType() == dtypes.Float64 {
		compute = dtypes.Float64
	}
	scale := w.scale.Node()
	varying := func(axes []int) bool {
		for _, a := range axes {
			if scale.Shape().Dimensions[a] != 1 {
				return true
			}
		}
		return false
	}
	post, pre := !varying(ws.contracting), !varying(ws.free)
	if lowering == LoweringAuto {
		lowering = chooseLowering(x, xs, ws, w, post || pre, compute)
	}
	xf := graph.ConvertDType(x, compute)
	sf := graph.ConvertDType(scale, compute)
	var out *graph.Node
	switch lowering {
	case LoweringReduce:
		if len(ws.batch) > 0 || !trailing(ws.contracting, w.Shape().Rank()) {
			panic(errors.Errorf("int8 dot_general with LoweringReduce: the weight %s must contract its trailing axes (got %v) "+
				"with no batch axes (got %v); accepted: use LoweringAuto or LoweringScaled", w.Shape(), ws.contracting, ws.batch))
		}
		out = reduceProduct(xf, xs, w.weight.Node(), ws, sf, wIsRhs, pre, post)
	case LoweringScaled:
		if !post && !pre {
			panic(errors.Errorf("int8 dot_general with LoweringScaled: scale %s varies along both free and contracting axes "+
				"of the weight %s; accepted: use LoweringAuto or LoweringDequantize", scale.Shape(), w.Shape()))
		}
		wf := graph.ConvertDType(w.weight.Node(), compute)
		if post {
			out = graph.Mul(dot(xf, xs, wf, ws, wIsRhs), graph.BroadcastToDims(postScale(sf, xs, ws, wIsRhs), dot0Dims(x, xs, w, ws, wIsRhs)...))
		} else {
			out = dot(graph.Mul(xf, preScale(sf, x.Rank(), xs, ws, x.Shape().Dimensions)), xs, wf, ws, wIsRhs)
		}
	case LoweringSlabs:
		if (!post && !pre) || len(ws.contracting) == 0 {
			panic(errors.Errorf("int8 dot_general with LoweringSlabs: scale %s of the weight %s contracting %v; accepted: a "+
				"contraction, and a scale shared along the free or the contracting axes (else LoweringAuto or LoweringDequantize)",
				scale.Shape(), w.Shape(), ws.contracting))
		}
		if pre {
			xf = graph.Mul(xf, preScale(sf, x.Rank(), xs, ws, x.Shape().Dimensions))
		}
		out = slabProduct(xf, xs, w.weight.Node(), ws, wIsRhs)
		if post && !pre {
			out = graph.Mul(out, graph.BroadcastToDims(postScale(sf, xs, ws, wIsRhs), dot0Dims(x, xs, w, ws, wIsRhs)...))
		}
	case LoweringDequantize:
		wf := graph.ConvertDType(implicitarray.Materialize(w.withDType(compute)), compute)
		out = dot(xf, xs, wf, ws, wIsRhs)
	case LoweringMaterialize:
		wf := graph.ConvertDType(implicitarray.Materialize(w), compute)
		out = dot(xf, xs, wf, ws, wIsRhs)
	case LoweringSliced:
		if !slicedApplies(w, ws, post || pre) {
			panic(errors.Errorf("int8 dot_general with LoweringSliced: the weight %s must be rank 2, contracted on axis 0 "+
				"(got %v) with no batch axes, with a scale shared along one side; accepted: use LoweringAuto", w.Shape(), ws.contracting))
		}
		out = slicedProduct(xf, xs, w.weight.Node(), sf, wIsRhs)
	default:
		panic(errors.Errorf("int8 dot_general: unknown lowering %d", lowering))
	}
	return graph.ConvertDType(out, x.DType())
}

// chooseLowering is LoweringAuto's policy (see LoweringAuto).
func chooseLowering(x *graph.Node, xs, ws side, w *Array, factored bool, compute dtypes.DType) Lowering {
	rows := 1
	for _, a := range xs.free {
		rows *= x.Shape().Dimensions[a]
	}
	switch {
	case rows <= SlicedMaxRows && slicedApplies(w, ws, factored) &&
		runtime.CPUFusedLoops(x.Graph().Backend()):
		return LoweringSliced
	case rows <= ReduceMaxRows && len(ws.batch) == 0 && trailing(ws.contracting, w.Shape().Rank()):
		return LoweringReduce
	case factored && rows <= SlabMaxRows && len(ws.contracting) > 0 &&
		slabSize(w.Shape().Dimensions, ws.contracting[0], compute) < w.Shape().Dimensions[ws.contracting[0]]:
		return LoweringSlabs
	case factored:
		return LoweringScaled
	}
	return LoweringDequantize
}

// slicedApplies reports whether LoweringSliced serves the weight: rank 2, contracted on axis 0
// only, no batch axes, and a scale shared along one side (factored).
func slicedApplies(w *Array, ws side, factored bool) bool {
	return factored && w.Shape().Rank() == 2 && len(ws.batch) == 0 && len(ws.contracting) == 1 && ws.contracting[0] == 0
}

// SlicedMaxRows is the largest number of activation rows for which LoweringAuto picks
// LoweringSliced. Measured on XLA CPU (2 cores, K = N = 4096, 8 streamed weights, library
// fusions off), ms per layer against dense float32: 1 row 0.87 vs 2.54, 2 rows 1.79 vs 3.56,
// 4 rows 4.42 vs 3.51 (where LoweringSlabs is faster).
const SlicedMaxRows = 2

// slicedParts is the number of slices of K that slicedProduct sums element-wise before its
// reduction: at one row, 2 slices took 2.9 ms, 4 took 2.5, 8 took 0.85 and 16 took 1.1.
const slicedParts = 8

// slicedProduct computes x @ (q · scale) for q (K, N) contracted on axis 0: the activations,
// arranged as (rows, K), times convert(q), summed over slices of K element-wise, then reduced. A
// scale constant along N ((K, 1) or (1, 1)) multiplies the activations first, a (1, N) one the
// result.
func slicedProduct(x *graph.Node, xs side, q, s *graph.Node, wIsRhs bool) *graph.Node {
	xd, sd := x.Shape().Dimensions, s.Shape().Dimensions
	k, n := q.Shape().Dimensions[0], q.Shape().Dimensions[1]
	rows := 1
	for _, a := range xs.free {
		rows *= xd[a]
	}
	x2 := graph.Reshape(graph.TransposeAllAxes(x, append(slices.Clone(xs.free), xs.contracting[0])...), rows, k)
	pre := sd[1] == 1
	if pre {
		x2 = graph.Mul(x2, graph.BroadcastToDims(graph.Reshape(s, 1, sd[0]), rows, k))
	}
	parts := slicedParts
	for k%parts != 0 {
		parts /= 2
	}
	step := k / parts
	var acc *graph.Node
	for i := range parts {
		r := graph.AxisRange(i*step, (i+1)*step)
		qs := graph.ConvertDType(graph.SliceAxis(q, 0, r), x.DType())
		t := graph.Mul(graph.BroadcastToDims(graph.InsertAxes(graph.SliceAxis(x2, 1, r), -1), rows, step, n),
			graph.BroadcastToDims(graph.InsertAxes(qs, 0), rows, step, n))
		if acc == nil {
			acc = t
		} else {
			acc = graph.Add(acc, t)
		}
	}
	out := graph.ReduceSum(acc, 1) // (rows, N)
	if !pre {
		out = graph.Mul(out, graph.BroadcastToDims(graph.Reshape(s, 1, n), rows, n))
	}
	xFree := pick(xd, xs.free)
	out = graph.Reshape(out, append(slices.Clone(xFree), n)...)
	if wIsRhs {
		return out
	}
	perm := []int{len(xFree)}
	for i := range xFree {
		perm = append(perm, i)
	}
	return graph.TransposeAllAxes(out, perm...)
}

// slabSize is the number of indices of axis per slab, so a float slab is about SlabBytes.
func slabSize(dims []int, axis int, compute dtypes.DType) int {
	perIndex := compute.Size()
	for a, d := range dims {
		if a != axis {
			perIndex *= d
		}
	}
	return max(1, SlabBytes/perIndex)
}

// slabProduct is the dot_general of x and convert(q) summed over slabs of q's first contracting
// axis. Each slab's convert depends on the previous partial product (through a term that is
// always exactly 0: IsFinite(a value) * 0), which makes XLA run the slabs in order and reuse one
// buffer.
func slabProduct(x *graph.Node, xs side, q *graph.Node, ws side, wIsRhs bool) *graph.Node {
	wAxis, xAxis := ws.contracting[0], xs.contracting[0]
	dimK := q.Shape().Dimensions[wAxis]
	size := slabSize(q.Shape().Dimensions, wAxis, x.DType())
	slice := func(n *graph.Node, axis, start, end int) *graph.Node {
		specs := make([]graph.SliceAxisSpec, n.Rank())
		for a := range specs {
			specs[a] = graph.AxisRange()
		}
		specs[axis] = graph.AxisRange(start, end)
		return graph.Slice(n, specs...)
	}
	var acc *graph.Node
	for start := 0; start < dimK; start += size {
		end := min(dimK, start+size)
		wc := graph.ConvertDType(slice(q, wAxis, start, end), x.DType())
		if acc != nil {
			wc = lowering.After(acc, wc)
		}
		d := dot(slice(x, xAxis, start, end), xs, wc, ws, wIsRhs)
		if acc == nil {
			acc = d
		} else {
			acc = graph.Add(acc, d)
		}
	}
	return acc
}

// trailing reports whether axes are exactly the last len(axes) axes of a rank-rank array.
func trailing(axes []int, rank int) bool {
	for _, a := range axes {
		if a < rank-len(axes) {
			return false
		}
	}
	return len(axes) > 0
}

// dot is the dense dot_general with x and w on their sides.
func dot(x *graph.Node, xs side, w *graph.Node, ws side, wIsRhs bool) *graph.Node {
	if wIsRhs {
		return graph.DotGeneral(x, xs.contracting, xs.batch, w, ws.contracting, ws.batch)
	}
	return graph.DotGeneral(w, ws.contracting, ws.batch, x, xs.contracting, xs.batch)
}

// dot0Dims are the dimensions of the dot_general's output: batch, lhs free, rhs free.
func dot0Dims(x *graph.Node, xs side, w *Array, ws side, wIsRhs bool) []int {
	xd, wd := x.Shape().Dimensions, w.Shape().Dimensions
	var dims []int
	for _, a := range xs.batch {
		dims = append(dims, xd[a])
	}
	xFree, wFree := pick(xd, xs.free), pick(wd, ws.free)
	if wIsRhs {
		return append(append(dims, xFree...), wFree...)
	}
	return append(append(dims, wFree...), xFree...)
}

func pick(dims, axes []int) []int {
	out := make([]int, len(axes))
	for i, a := range axes {
		out[i] = dims[a]
	}
	return out
}

func ones(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

// arrange returns s (the weight's rank) transposed so that the axes in order come first, then
// reshaped to dims. The axes left out must have size 1 in s.
func arrange(s *graph.Node, order []int, dims []int) *graph.Node {
	perm := slices.Clone(order)
	for a := range s.Rank() {
		if !slices.Contains(order, a) {
			perm = append(perm, a)
		}
	}
	if !slices.IsSorted(perm) {
		s = graph.TransposeAllAxes(s, perm...)
	}
	return graph.Reshape(s, dims...)
}

// postScale places a scale that is 1 on the weight's contracting axes onto the dot_general's
// output layout (batch, lhs free, rhs free), with 1 on the activations' free axes.
func postScale(s *graph.Node, xs, ws side, wIsRhs bool) *graph.Node {
	sd := s.Shape().Dimensions
	order := append(slices.Clone(ws.batch), ws.free...)
	dims := pick(sd, ws.batch)
	if wIsRhs {
		dims = append(append(dims, ones(len(xs.free))...), pick(sd, ws.free)...)
	} else {
		dims = append(append(dims, pick(sd, ws.free)...), ones(len(xs.free))...)
	}
	return arrange(s, order, dims)
}

// preScale places a scale that is 1 on the weight's free axes onto the activations' layout: each
// contracting or batch axis of x takes the scale's dimension of its paired weight axis. The result
// is broadcast to xDims.
func preScale(s *graph.Node, rank int, xs, ws side, xDims []int) *graph.Node {
	sd := s.Shape().Dimensions
	var order []int
	dims := make([]int, rank)
	for a := range rank {
		dims[a] = 1
		if i := slices.Index(xs.contracting, a); i >= 0 {
			order = append(order, ws.contracting[i])
			dims[a] = sd[ws.contracting[i]]
		} else if i := slices.Index(xs.batch, a); i >= 0 {
			order = append(order, ws.batch[i])
			dims[a] = sd[ws.batch[i]]
		}
	}
	return graph.BroadcastToDims(arrange(s, order, dims), xDims...)
}

// reduceProduct is LoweringReduce: the weight (free..., contracting...) is read in place; x is
// arranged as (rows, 1..., contracting in the weight's order) and the product summed over the
// trailing axes in one fusion. The scale goes on x (pre), on the output (post), or into the
// product.
func reduceProduct(x *graph.Node, xs side, q *graph.Node, ws side, s *graph.Node, wIsRhs, pre, post bool) *graph.Node {
	xd, wd, sd := x.Shape().Dimensions, q.Shape().Dimensions, s.Shape().Dimensions
	rows := 1
	for _, a := range xs.free {
		rows *= xd[a]
	}
	wContracting := slices.Sorted(slices.Values(ws.contracting))
	xOrder := slices.Clone(xs.free)
	for _, a := range wContracting {
		xOrder = append(xOrder, xs.contracting[slices.Index(ws.contracting, a)])
	}
	nFree := len(ws.free)
	cDims := pick(wd, wContracting)
	x4Dims := append(append([]int{rows}, ones(nFree)...), cDims...)
	x4 := graph.Reshape(graph.TransposeAllAxes(x, xOrder...), x4Dims...)
	fullDims := append(append([]int{rows}, pick(wd, ws.free)...), cDims...)
	w4 := graph.Reshape(graph.ConvertDType(q, x.DType()), append([]int{1}, wd...)...)
	switch {
	case pre:
		s4 := arrange(s, wContracting, append(append([]int{1}, ones(nFree)...), pick(sd, wContracting)...))
		x4 = graph.Mul(x4, graph.BroadcastToDims(s4, x4Dims...))
	case !post:
		w4 = graph.Mul(w4, graph.BroadcastToDims(graph.Reshape(s, append([]int{1}, sd...)...), append([]int{1}, wd...)...))
	}
	prod := graph.Mul(graph.BroadcastToDims(x4, fullDims...), graph.BroadcastToDims(w4, fullDims...))
	reduceAxes := make([]int, len(cDims))
	for i := range reduceAxes {
		reduceAxes[i] = 1 + nFree + i
	}
	out := graph.ReduceSum(prod, reduceAxes...) // (rows, weight free...)
	if post && !pre {
		s2 := arrange(s, ws.free, append([]int{1}, pick(sd, ws.free)...))
		out = graph.Mul(out, graph.BroadcastToDims(s2, out.Shape().Dimensions...))
	}
	xFree, wFree := pick(xd, xs.free), pick(wd, ws.free)
	out = graph.Reshape(out, append(slices.Clone(xFree), wFree...)...)
	if wIsRhs || len(xFree) == 0 || len(wFree) == 0 {
		if !wIsRhs {
			return graph.Reshape(out, append(wFree, xFree...)...)
		}
		return out
	}
	perm := make([]int, 0, len(xFree)+len(wFree))
	for i := range wFree {
		perm = append(perm, len(xFree)+i)
	}
	for i := range xFree {
		perm = append(perm, i)
	}
	return graph.TransposeAllAxes(out, perm...)
}
