package onebit

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/runtime"
)

// MatMulStrategy says how DotGeneral of a dense operand and a packed array is lowered. It is part
// of the array's metadata (see WithMatMulStrategy).
type MatMulStrategy int

const (
	// Auto picks Fused when the dense operand has at most FusedMaxRows rows (the product of its
	// non-contracting dimensions) and the packed axis is contracted, else DecodeDot.
	Auto MatMulStrategy = iota
	// Fused never builds the weight: it reads each packed byte once, splits it into its G
	// integer prefixes floor(b / radix^g), and reduces them against combinations of the
	// activations, so the product is a sum of activations with integer coefficients that XLA CPU
	// fuses into one reduction pass over the packed bytes. Needs a float dense operand and the
	// packed (first) axis among the contracting axes; else DecodeDot is used.
	Fused
	// DecodeDot decodes the codes to the dense operand's dtype (-1, 0, +1, no scale) and runs
	// one DotGeneral; the scale, if any, multiplies the result (per output channel) or the
	// activations. XLA fuses the decode into the dot's operand.
	DecodeDot
	// MaterializeDot materializes the weight (values times scale) in the dense operand's dtype
	// and runs the dense DotGeneral: the baseline, counted in implicitarray.Stats.
	MaterializeDot
)

// FusedMaxRows is the largest number of dense rows for which Auto picks Fused.
const FusedMaxRows = 16

// String returns the strategy's name.
func (s MatMulStrategy) String() string {
	switch s {
	case Auto:
		return "auto"
	case Fused:
		return "fused"
	case DecodeDot:
		return "decode-dot"
	case MaterializeDot:
		return "materialize-dot"
	}
	return fmt.Sprintf("MatMulStrategy(%d)", int(s))
}

// dotAxes are a DotGeneral's axes seen from the packed operand (w) and the dense one (x).
type dotAxes struct {
	wContract, wBatch, xContract, xBatch []int
	wFree, xFree                         []int
	wIsLhs                               bool
}

func newDotAxes(p *implicitarray.DotGeneralParams, wRank, xRank int, wIsLhs bool) dotAxes {
	a := dotAxes{wIsLhs: wIsLhs}
	if wIsLhs {
		a.wContract, a.wBatch, a.xContract, a.xBatch = p.LhsContractingAxes, p.LhsBatchAxes, p.RhsContractingAxes, p.RhsBatchAxes
	} else {
		a.wContract, a.wBatch, a.xContract, a.xBatch = p.RhsContractingAxes, p.RhsBatchAxes, p.LhsContractingAxes, p.LhsBatchAxes
	}
	a.wFree = freeAxes(wRank, a.wContract, a.wBatch)
	a.xFree = freeAxes(xRank, a.xContract, a.xBatch)
	return a
}

func freeAxes(rank int, used ...[]int) []int {
	var free []int
	for i := range rank {
		if !slices.Contains(used[0], i) && !slices.Contains(used[1], i) {
			free = append(free, i)
		}
	}
	return free
}

// dotGeneral is the DotGeneral handler for a packed array at position wPos (0: lhs, 1: rhs) and
// a dense operand at the other.
func dotGeneral(c *implicitarray.Call, wPos int) implicitarray.Value {
	p := c.Params.(*implicitarray.DotGeneralParams)
	pa := c.Operands[wPos].(packedArray)
	w := pa.base()
	w.checkLive("DotGeneral")
	x := c.Operands[1-wPos].(*graph.Node)
	axes := newDotAxes(p, w.shape.Rank(), x.Rank(), wPos == 0)
	if w.scaleAxes != nil && !x.DType().IsFloat() {
		// A float scale cannot be applied in an integer product without rounding it away.
		panic(errors.Errorf("onebit: DotGeneral of a scaled %s and a dense %s: accepted: float activations "+
			"(convert them, or use an unscaled array for integer products)", w, x.Shape()))
	}
	pre, post := false, false
	if w.scaleAxes != nil {
		var scaled []int
		for i, d := range w.scale.Shape().Dimensions {
			if d != 1 {
				scaled = append(scaled, i)
			}
		}
		post = subset(scaled, axes.wFree, axes.wBatch)
		pre = !post && subset(scaled, axes.wContract, axes.wBatch) && x.DType().IsFloat()
	}
	strategy := w.strategy
	if w.scaleAxes != nil && !pre && !post {
		strategy = MaterializeDot
	}
	fusable := x.DType().IsFloat() && slices.Contains(axes.wContract, 0)
	if strategy == Auto {
		strategy = DecodeDot
		if fusable && product(dimsAt(x.Shape().Dimensions, axes.xFree, axes.xBatch)) <= FusedMaxRows {
			strategy = Fused
		}
	}
	if strategy == Fused && !fusable {
		strategy = DecodeDot
	}
	if strategy == MaterializeDot {
		wd, err := w.withDType(x.DType())
		if err != nil {
			panic(errors.WithMessagef(err, "onebit: DotGeneral of %s and a dense %s", w, x.Shape()))
		}
		dense := implicitarray.Materialize(pa.withCore(wd))
		return c.Dense(ordered(wPos, dense, x)...)
	}
	if pre {
		x = graph.Mul(x, graph.ConvertDType(scaleOnDense(w, axes, x.Rank()), x.DType()))
	}
	var y *graph.Node
	if strategy == Fused {
		y = fusedDot(w, x, axes)
	} else {
		codes := decodeValues(w.layout, w.packed.Node(), x.DType())
		y = c.Dense(ordered(wPos, codes, x)...)
	}
	if post {
		y = graph.Mul(y, graph.ConvertDType(scaleOnOutput(w, axes, x), y.DType()))
	}
	return y
}

func ordered(wPos int, w, x *graph.Node) []*graph.Node {
	if wPos == 0 {
		return []*graph.Node{w, x}
	}
	return []*graph.Node{x, w}
}

// subset reports whether every axis of s is in one of the sets.
func subset(s []int, sets ...[]int) bool {
	for _, a := range s {
		if !slices.Contains(sets[0], a) && !slices.Contains(sets[1], a) {
			return false
		}
	}
	return true
}

func dimsAt(dims []int, axesLists ...[]int) []int {
	var out []int
	for _, axes := range axesLists {
		for _, a := range axes {
			out = append(out, dims[a])
		}
	}
	return out
}

// fusedDot computes the DotGeneral of w and x without building the weight. With the packed axis
// split as row i = g*P + p (g the group in the byte, p the packed row), radix r, and code_g =
// prefix_g - r*prefix_(g+1) where prefix_g = floor(b / r^g):
//
//	sum_i x_i v_i = alpha * sum_p sum_g prefix_g(b_p) * (x_(g,p) - r*x_(g-1,p)) - sum_i x_i
//
// with v = alpha*code - 1 (alpha 1 for TwoBit, 2 for OneBit) and x_(-1,p) = 0. All coefficients
// are integers, so integer-valued activations give exact results.
func fusedDot(w *core, x *graph.Node, a dotAxes) *graph.Node {
	l := w.layout
	groups, radix := l.ValuesPerByte(), float64(l.radix())
	packed := w.packed.Node()
	wDims, xDims := w.shape.Dimensions, x.Shape().Dimensions
	k0 := slices.Index(a.wContract, 0)
	wOther := slices.Delete(slices.Clone(a.wContract), k0, k0+1)
	xOther := slices.Delete(slices.Clone(a.xContract), k0, k0+1)
	batch := product(dimsAt(wDims, a.wBatch))
	rows := product(dimsAt(xDims, a.xFree))
	cols := product(dimsAt(wDims, a.wFree))
	// The packed rows and the other contracting axes merge into one axis of pk = P*Kc elements.
	pk := wDims[0] / groups * product(dimsAt(wDims, wOther))
	// lead is the batch dimension, left out when 1: XLA fuses the rank-3 form best.
	var lead []int
	if batch > 1 {
		lead = []int{batch}
	}

	// Packed bytes as ([batch,] PK, N); activations as ([batch,] M, G, PK).
	wPerm := slices.Concat(a.wBatch, []int{0}, wOther, a.wFree)
	b := graph.Reshape(graph.TransposeAllAxes(packed, wPerm...), slices.Concat(lead, []int{pk, cols})...)
	xPerm := slices.Concat(a.xBatch, a.xFree, []int{a.xContract[k0]}, xOther)
	cd := computeDType(x.DType())
	xc := graph.Reshape(graph.ConvertDType(graph.TransposeAllAxes(x, xPerm...), cd), slices.Concat(lead, []int{rows, groups, pk})...)
	gAxis := len(lead) + 1

	// terms returns Σ_g prefix_g(b) · coefficient_g over packed bytes b ([batch,] P', N) and the
	// matching activations x ([batch,] M, G, P'): ([batch,] M, P', N).
	terms := func(b, xc *graph.Node) *graph.Node {
		prefixes := bytePrefixes(l, b, cd)
		var acc, prev *graph.Node
		for g := range groups {
			xg := graph.Squeeze(graph.SliceAxis(xc, gAxis, graph.AxisElem(g)), gAxis) // ([batch,] M, P')
			coef := xg
			if prev != nil {
				coef = graph.Sub(xg, graph.MulScalar(prev, radix))
			}
			prev = xg
			term := graph.Mul(graph.InsertAxes(coef, -1), graph.InsertAxes(prefixes[g], len(lead)))
			if acc == nil {
				acc = term
			} else {
				acc = graph.Add(acc, term)
			}
		}
		return acc
	}
	var acc *graph.Node
	if runtime.CPUFusedLoops(x.Graph().Backend()) {
		// Sum slices of the packed axis element-wise first: one parallel XLA loop.
		parts := fusedSlices
		for pk%parts != 0 {
			parts /= 2
		}
		step := pk / parts
		for i := range parts {
			r := graph.AxisRange(i*step, (i+1)*step)
			t := terms(graph.SliceAxis(b, len(lead), r), graph.SliceAxis(xc, gAxis+1, r))
			if acc == nil {
				acc = t
			} else {
				acc = graph.Add(acc, t)
			}
		}
	} else {
		acc = terms(b, xc)
	}
	y := graph.ReduceSum(acc, gAxis) // ([batch,] M, N)
	if l == OneBit {
		y = graph.Add(y, y)
	}
	y = graph.Sub(y, graph.InsertAxes(graph.ReduceSum(xc, gAxis, gAxis+1), -1))

	// Back to DotGeneral's output order: batch, lhs free, rhs free.
	outDims := slices.Concat(dimsAt(wDims, a.wBatch), dimsAt(xDims, a.xFree), dimsAt(wDims, a.wFree))
	y = graph.Reshape(y, outDims...)
	if a.wIsLhs {
		nb, nx := len(a.wBatch), len(a.xFree)
		perm := make([]int, 0, len(outDims))
		for i := range nb {
			perm = append(perm, i)
		}
		for i := range len(a.wFree) {
			perm = append(perm, nb+nx+i)
		}
		for i := range nx {
			perm = append(perm, nb+i)
		}
		y = graph.TransposeAllAxes(y, perm...)
	}
	return graph.ConvertDType(y, x.DType())
}

// fusedSlices is the number of slices of the packed axis that fusedDot sums element-wise before its
// reduction on XLA CPU with its library fusions disabled (runtime.CPUFusedLoops): the
// terms, the slice sums and the decode then form one parallel XLA loop instead of a dense
// float32 intermediate of the packed size and a reduction tree. At K = N = 4096 and M = 1 it took
// 0.75 ms against 1.26 ms unsliced (4 slices; 8: 0.78 ms, 16: 1.39 ms, 32: 11 ms); fewer slices
// are used when they do not divide the packed axis.
const fusedSlices = 4

// scaleOnOutput reshapes the scale (non-unit only on w's free and batch axes) to broadcast against
// the DotGeneral output.
func scaleOnOutput(w *core, a dotAxes, x *graph.Node) *graph.Node {
	s := w.scale.Node()
	sDims := s.Shape().Dimensions
	s = graph.TransposeAllAxes(s, slices.Concat(a.wBatch, a.wFree, a.wContract)...)
	ones := make([]int, len(a.xFree))
	for i := range ones {
		ones[i] = 1
	}
	var dims []int
	if a.wIsLhs {
		dims = slices.Concat(dimsAt(sDims, a.wBatch), dimsAt(sDims, a.wFree), ones)
	} else {
		dims = slices.Concat(dimsAt(sDims, a.wBatch), ones, dimsAt(sDims, a.wFree))
	}
	return graph.Reshape(s, dims...)
}

// scaleOnDense reshapes the scale (non-unit only on w's contracting and batch axes) to broadcast
// against the dense operand.
func scaleOnDense(w *core, a dotAxes, xRank int) *graph.Node {
	s := w.scale.Node()
	sDims := s.Shape().Dimensions
	var perm []int
	dims := make([]int, xRank)
	for j := range xRank {
		dims[j] = 1
		if i := slices.Index(a.xContract, j); i >= 0 {
			perm = append(perm, a.wContract[i])
			dims[j] = sDims[a.wContract[i]]
		} else if i := slices.Index(a.xBatch, j); i >= 0 {
			perm = append(perm, a.wBatch[i])
			dims[j] = sDims[a.wBatch[i]]
		}
	}
	perm = append(perm, a.wFree...)
	return graph.Reshape(graph.TransposeAllAxes(s, perm...), dims...)
}
