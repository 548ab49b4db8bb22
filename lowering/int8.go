package lowering

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
)

// Int8 is a weight stored as int8 codes times a float scale, as graph nodes:
//
//   - Codes: int8, the logical dimensions.
//   - Scale: float, the weight's rank, with size 1 on the axes it was reduced over and the codes'
//     size on the others.
//
// Element i of the weight is Codes[i] · Scale[i] (the scale broadcast).
type Int8 struct {
	Codes, Scale *graph.Node
}

var _ Layout = Int8{}

func (w Int8) anyNode() *graph.Node { return w.Codes }

func (w Int8) kind() string { return "int8" }

// Dimensions returns the logical dimensions of the weight.
func (w Int8) Dimensions() []int { return w.Codes.Shape().Dimensions }

func (w Int8) check(op string) {
	if w.Codes == nil || w.Scale == nil {
		panic(errors.Errorf("%s: Int8 needs Codes and Scale nodes", op))
	}
	cs, ss := w.Codes.Shape(), w.Scale.Shape()
	ok := cs.DType == dtypes.Int8 && ss.DType.IsFloat() && cs.Rank() == ss.Rank()
	for i := 0; ok && i < cs.Rank(); i++ {
		ok = ss.Dimensions[i] == 1 || ss.Dimensions[i] == cs.Dimensions[i]
	}
	if !ok {
		panic(errors.Errorf("%s: codes %s and scale %s are inconsistent; accepted: int8 codes and a float scale of the same "+
			"rank whose dimensions are 1 or the codes'", op, cs, ss))
	}
}

func (w Int8) activationsError(dtype dtypes.DType) string {
	if dtype.IsFloat() && !dtype.IsComplex() {
		return ""
	}
	return "a float activation dtype"
}

func (w Int8) scaleDType() dtypes.DType { return w.Scale.DType() }

func (w Int8) separableScale() *graph.Node { return w.Scale }

// Dequantize returns codes × scale computed in float32 (float64 for a float64 scale or dtype),
// then converted to dtype: in the scale's own dtype, one rounding of the exact product, as a
// product computed in that dtype.
func (w Int8) Dequantize(dtype dtypes.DType) *graph.Node {
	w.check("lowering.Int8.Dequantize")
	cdt := dtypes.Float32
	if dtype == dtypes.Float64 || w.Scale.DType() == dtypes.Float64 {
		cdt = dtypes.Float64
	}
	scale := graph.BroadcastToDims(graph.ConvertDType(w.Scale, cdt), w.Dimensions()...)
	return graph.ConvertDType(graph.Mul(graph.ConvertDType(w.Codes, cdt), scale), dtype)
}

func (w Int8) decode(p *product, unit bool) *graph.Node {
	codes := graph.ConvertDType(w.Codes, p.cdt)
	if unit {
		return codes
	}
	return graph.Mul(codes, graph.BroadcastToDims(graph.ConvertDType(w.Scale, p.cdt), w.Dimensions()...))
}

func (w Int8) slice(axis, start, end int) (Layout, bool) {
	w.Codes = sliceAxis(w.Codes, axis, start, end)
	if w.Scale.Shape().Dim(axis) != 1 {
		w.Scale = sliceAxis(w.Scale, axis, start, end)
	}
	return w, true
}

func (w Int8) serves(s Strategy, p *product) bool {
	if s != SlicedSum || !p.kMajor() {
		return false
	}
	onOutput, onActivations := p.scalePlacement(w.Scale)
	return onOutput || onActivations
}

func (w Int8) requirement(s Strategy) string {
	if s == SlicedSum {
		return "rank-2 weights contracted on their first axis (x·W) whose scale is constant along one of the two axes"
	}
	return "no int8 weight"
}

// lower is SlicedSum: x[m, k]·convert(q[k, n]) summed over a few slices of K element-wise, then
// one small reduction; the scale multiplies the activations (one per row k) or the output.
func (w Int8) lower(_ Strategy, p *product) *graph.Node {
	xf, _, output := scaled(p, w) // serves: the scale goes on the output or the activations
	x2 := p.toMK(xf)
	m, k, n := x2.Shape().Dim(0), p.wDims[0], p.wDims[1]
	var acc *graph.Node
	for _, r := range sliceBounds(k, int8Slices) {
		rows := r[1] - r[0]
		q := graph.ConvertDType(sliceAxis(w.Codes, 0, r[0], r[1]), p.cdt)
		t := graph.Mul(graph.BroadcastToDims(graph.InsertAxes(sliceActivations(x2, 1, r[0], r[1]), -1), m, rows, n),
			graph.BroadcastToDims(graph.InsertAxes(q, 0), m, rows, n))
		if acc == nil {
			acc = t
		} else {
			acc = graph.Add(acc, t)
		}
	}
	return output(p.fromMN(graph.ReduceSum(acc, 1)))
}

// int8Slices is the number of slices of K the Int8 SlicedSum adds element-wise
// (docs/performance.md).
const int8Slices = 8

// String describes the weight for messages.
func (w Int8) String() string {
	return fmt.Sprintf("int8 weight %v (scale %v)", w.Dimensions(), w.Scale.Shape().Dimensions)
}
