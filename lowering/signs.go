package lowering

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
)

// Signs is a weight of values in {-1, 0, +1} packed along its first axis, with an optional
// scale, as graph nodes:
//
//   - Bits: 2 (value v stored as the code v+1, four a byte) or 1 (bit 1 for +1 and 0 for -1,
//     eight a byte).
//   - Packed: uint8 (d0/G, d1, ...) with G = 8/Bits values a byte, strided: logical row i sits in
//     packed row i mod (d0/G), in the bit group i div (d0/G), the first group in the lowest bits.
//   - Scale: nil, or float of the weight's rank with size 1 on the axes it was reduced over.
//
// Element i of the weight is value[i] (· Scale[i] broadcast). A 2-bit code 3 decodes as +2.
type Signs struct {
	Packed, Scale *graph.Node
	Bits          int
}

var _ Layout = Signs{}

func (w Signs) anyNode() *graph.Node { return w.Packed }

func (w Signs) kind() string { return fmt.Sprintf("signs%d", w.Bits) }

func (w Signs) valuesPerByte() int { return 8 / w.Bits }

func (w Signs) radix() int { return 1 << w.Bits }

// Dimensions returns the logical dimensions of the weight.
func (w Signs) Dimensions() []int {
	dims := slices.Clone(w.Packed.Shape().Dimensions)
	dims[0] *= w.valuesPerByte()
	return dims
}

func (w Signs) check(op string) {
	ok := w.Packed != nil && (w.Bits == 1 || w.Bits == 2)
	if ok {
		ps := w.Packed.Shape()
		ok = ps.DType == dtypes.Uint8 && ps.Rank() >= 1
		if ok && w.Scale != nil {
			ss := w.Scale.Shape()
			ok = ss.DType.IsFloat() && ss.Rank() == ps.Rank()
			dims := w.Dimensions()
			for i := 0; ok && i < ss.Rank(); i++ {
				ok = ss.Dimensions[i] == 1 || ss.Dimensions[i] == dims[i]
			}
		}
	}
	if !ok {
		panic(errors.Errorf("%s: %v are inconsistent; accepted: Bits 1 or 2, packed uint8 of rank >= 1, an optional float "+
			"scale of the same rank whose dimensions are 1 or the logical ones", op, w))
	}
}

func (w Signs) activationsError(dtype dtypes.DType) string {
	switch {
	case dtype.IsComplex() || dtype == dtypes.Bool:
		return "a float or integer activation dtype"
	case w.Scale != nil && !dtype.IsFloat():
		return "float activations (a float scale cannot multiply an integer product without being rounded away; " +
			"convert the activations, or use an unscaled weight)"
	}
	return ""
}

func (w Signs) scaleDType() dtypes.DType {
	if w.Scale == nil {
		return dtypes.InvalidDType
	}
	return w.Scale.DType()
}

func (w Signs) separableScale() *graph.Node { return w.Scale }

// Dequantize returns the dense weight in dtype: the values (an integer dtype gets them exactly,
// an unsigned one wraps -1), times the scale computed in float32 (float64 for float64) if any.
func (w Signs) Dequantize(dtype dtypes.DType) *graph.Node {
	w.check("lowering.Signs.Dequantize")
	if w.Scale == nil {
		return w.values(dtype)
	}
	cdt := dtypes.Float32
	if dtype == dtypes.Float64 {
		cdt = dtypes.Float64
	}
	scale := graph.BroadcastToDims(graph.ConvertDType(w.Scale, cdt), w.Dimensions()...)
	return graph.ConvertDType(graph.Mul(w.values(cdt), scale), dtype)
}

func (w Signs) decode(p *product, unit bool) *graph.Node {
	values := w.values(p.cdt)
	if unit || w.Scale == nil {
		return values
	}
	return graph.Mul(values, graph.BroadcastToDims(graph.ConvertDType(w.Scale, p.cdt), w.Dimensions()...))
}

func (w Signs) slice(axis, start, end int) (Layout, bool) {
	if axis == 0 { // packed rows hold strided logical rows
		return nil, false
	}
	w.Packed = sliceAxis(w.Packed, axis, start, end)
	if w.Scale != nil && w.Scale.Shape().Dim(axis) != 1 {
		w.Scale = sliceAxis(w.Scale, axis, start, end)
	}
	return w, true
}

// bytePrefixes returns, for the packed bytes, the G floats floor(b / radix^g), g = 0..G-1, in
// dtype. Code g of a byte is prefix[g] - radix·prefix[g+1], with prefix[G] = 0. Written with
// convert, multiply and floor only, XLA fuses it into its consumer. The prefixes carry no
// gradient (the bytes get none, and GoMLX has none for Floor).
func (w Signs) bytePrefixes(b *graph.Node, dtype dtypes.DType) []*graph.Node {
	f := graph.ConvertDType(b, dtype)
	prefixes := make([]*graph.Node, w.valuesPerByte())
	prefixes[0] = graph.StopGradient(f)
	for g := 1; g < len(prefixes); g++ {
		prefixes[g] = graph.StopGradient(graph.Floor(graph.MulScalar(f, 1/float64(int(1)<<(w.Bits*g)))))
	}
	return prefixes
}

// values unpacks the bytes into their values (dimensions d0, d1, ...) as dtype.
func (w Signs) values(dtype dtypes.DType) *graph.Node {
	g := w.Packed.Graph()
	groups := w.valuesPerByte()
	codes := make([]*graph.Node, groups)
	cdt := dtype
	if dtype.IsFloat() {
		if dtype != dtypes.Float64 {
			cdt = dtypes.Float32
		}
		prefixes := w.bytePrefixes(w.Packed, cdt)
		for i := range groups {
			codes[i] = prefixes[i]
			if i+1 < groups {
				codes[i] = graph.Sub(prefixes[i], graph.MulScalar(prefixes[i+1], float64(w.radix())))
			}
		}
	} else {
		// Integer division by a power of two (XLA turns it into a shift; the pure-Go backend lacks
		// ShiftRightLogical) and a mask.
		mask := graph.Scalar(g, dtypes.Uint8, w.radix()-1)
		for i := range groups {
			c := w.Packed
			if i > 0 {
				c = graph.Div(c, graph.Scalar(g, dtypes.Uint8, 1<<(w.Bits*i)))
			}
			codes[i] = graph.ConvertDType(graph.BitwiseAnd(c, mask), dtype)
		}
	}
	values := graph.Stack(codes, 0) // (G, P, d1, ...): code v+1 (2 bits) or the bit (1 bit)
	if w.Bits == 1 {
		values = graph.Add(values, values)
	}
	values = graph.Sub(values, graph.Scalar(g, cdt, 1))
	return graph.ConvertDType(graph.Reshape(values, w.Dimensions()...), dtype)
}

func (w Signs) serves(s Strategy, p *product) bool {
	if s != SlicedSum || !slices.Contains(p.wContracting, 0) || !p.xShape.DType.IsFloat() {
		return false
	}
	if w.Scale == nil {
		return true
	}
	onOutput, onActivations := p.scalePlacement(w.Scale)
	return onOutput || onActivations
}

func (w Signs) requirement(s Strategy) string {
	if s == SlicedSum {
		return "float activations and weights contracted on their first (packed) axis, with a scale (if any) constant " +
			"along the contracting or the free axes"
	}
	return "no signs weight"
}

// signsSlices is the number of slices of the packed axis the Signs SlicedSum adds element-wise on
// XLA CPU with its library fusions off (docs/performance.md).
const signsSlices = 4

// lower is SlicedSum: each packed byte is read once and its G values decoded in registers. With
// the packed axis split as row i = g·P + p (g the group in the byte, p the packed row), radix r,
// prefix_g = floor(b / r^g) and code_g = prefix_g − r·prefix_(g+1) (exact small integers), the
// value is v = α·code − 1 (α 1 for 2 bits, 2 for 1 bit), and
//
//	Σ_i x_i v_i = Σ_p Σ_g x_(g,p) · v_g(b_p)
//
// summed over a few slices of P element-wise before one reduction. Every term is an activation
// times -1, 0 or +1, so infinite activations give what the dense product gives.
func (w Signs) lower(_ Strategy, p *product) *graph.Node {
	xf, _, output := scaled(p, w) // serves: a scale goes on the output or the activations
	groups, radix := w.valuesPerByte(), float64(w.radix())
	wDims, xDims := p.wDims, p.xShape.Dimensions
	k0 := slices.Index(p.wContracting, 0)
	wOther := slices.Delete(slices.Clone(p.wContracting), k0, k0+1)
	xOther := slices.Delete(slices.Clone(p.xContracting), k0, k0+1)
	batch := product1(pick(wDims, p.wBatch))
	rows := p.rows()
	cols := product1(pick(wDims, p.wFree))
	// The packed rows and the other contracting axes merge into one axis of pk = P·Kc elements.
	pk := wDims[0] / groups * product1(pick(wDims, wOther))
	// lead is the batch dimension, left out when 1: XLA fuses the rank-3 form best.
	var lead []int
	if batch > 1 {
		lead = []int{batch}
	}
	// Packed bytes as ([batch,] PK, N); activations as ([batch,] M, G, PK).
	wPerm := slices.Concat(p.wBatch, []int{0}, wOther, p.wFree)
	b := graph.Reshape(graph.TransposeAllAxes(w.Packed, wPerm...), slices.Concat(lead, []int{pk, cols})...)
	xPerm := slices.Concat(p.xBatch, p.xFree, []int{p.xContracting[k0]}, xOther)
	xc := graph.Reshape(graph.TransposeAllAxes(xf, xPerm...), slices.Concat(lead, []int{rows, groups, pk})...)
	gAxis := len(lead) + 1

	// terms returns Σ_g prefix_g(b) · coefficient_g for packed bytes b ([batch,] P', N) and the
	// matching activations x ([batch,] M, G, P'): ([batch,] M, P', N).
	alpha := float64(2 / w.Bits)
	terms := func(b, xc *graph.Node) *graph.Node {
		prefixes := w.bytePrefixes(b, p.cdt)
		var acc *graph.Node
		for g := range groups {
			code := prefixes[g]
			if g+1 < groups {
				code = graph.Sub(code, graph.MulScalar(prefixes[g+1], radix))
			}
			v := graph.AddScalar(graph.MulScalar(code, alpha), -1)          // ([batch,] P', N)
			xg := graph.Squeeze(sliceActivations(xc, gAxis, g, g+1), gAxis) // ([batch,] M, P')
			term := graph.Mul(graph.InsertAxes(xg, -1), graph.InsertAxes(v, len(lead)))
			if acc == nil {
				acc = term
			} else {
				acc = graph.Add(acc, term)
			}
		}
		return acc
	}
	parts := 1
	if p.platform.base() == XLACPUFusedLoops {
		parts = signsSlices
	}
	var acc *graph.Node
	for _, r := range sliceBounds(pk, parts) {
		t := terms(sliceAxis(b, len(lead), r[0], r[1]), sliceActivations(xc, gAxis+1, r[0], r[1]))
		if acc == nil {
			acc = t
		} else {
			acc = graph.Add(acc, t)
		}
	}
	y := graph.ReduceSum(acc, gAxis) // ([batch,] M, N)

	// Back to DotGeneral's output order: batch, lhs free, rhs free.
	outDims := slices.Concat(pick(wDims, p.wBatch), pick(xDims, p.xFree), pick(wDims, p.wFree))
	y = graph.Reshape(y, outDims...)
	if p.weightOnLeft {
		nb, nx := len(p.wBatch), len(p.xFree)
		perm := make([]int, 0, len(outDims))
		for i := range nb {
			perm = append(perm, i)
		}
		for i := range len(p.wFree) {
			perm = append(perm, nb+nx+i)
		}
		for i := range nx {
			perm = append(perm, nb+i)
		}
		y = graph.TransposeAllAxes(y, perm...)
	}
	return output(y)
}

// String describes the weight for messages.
func (w Signs) String() string {
	if w.Packed == nil || (w.Bits != 1 && w.Bits != 2) {
		return fmt.Sprintf("signs weight (bits %d, packed %v)", w.Bits, w.Packed != nil)
	}
	s := fmt.Sprintf("%d-bit signs weight %v", w.Bits, w.Dimensions())
	if w.Scale != nil {
		s += fmt.Sprintf(" (scale %v)", w.Scale.Shape().Dimensions)
	}
	return s
}
