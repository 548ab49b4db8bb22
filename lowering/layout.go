package lowering

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// Layout is a stored quantized weight as the products read it, with graph-node components: a
// Blockwise4 (or its Blockwise4DQ and FlatBlockwise4 variants), an Int8, a Signs or a GGML. A format package builds one from its components; lowering
// knows no format.
type Layout interface {
	// Dimensions returns the logical dimensions of the weight.
	Dimensions() []int
	// Dequantize returns the dense weight in dtype, with its logical dimensions.
	Dequantize(dtype dtypes.DType) *graph.Node
	// String describes the weight for messages.
	String() string

	// kind names the layout in messages and Stats.
	kind() string
	// anyNode is one of the components, whose graph the weight lives in.
	anyNode() *graph.Node
	// check panics, naming op, if the components are inconsistent.
	check(op string)
	// activationsError returns a message if the weight cannot multiply activations of dtype.
	activationsError(dtype dtypes.DType) string
	// scaleDType is the dtype of the stored scales (InvalidDType if none).
	scaleDType() dtypes.DType
	// separableScale returns a scale of the weight's rank that multiplies the decoded codes, with
	// size 1 on the axes it is constant along, or nil. Products place it on the activations or
	// the output when its shape allows (product.scalePlacement).
	separableScale() *graph.Node
	// decode returns the weight in p.cdt with its logical dimensions; unit leaves the separable
	// scale out.
	decode(p *product, unit bool) *graph.Node
	// slice returns the weight restricted to [start, end) along axis, or false when the storage
	// cannot be sliced along that axis without decoding.
	slice(axis, start, end int) (Layout, bool)
	// serves reports whether the layout-specific strategies (SlicedSum, ProductTable) serve p, and
	// what they serve, for messages.
	serves(s Strategy, p *product) bool
	requirement(s Strategy) string
	// lower computes p with a layout-specific strategy that serves it, in p.cdt.
	lower(s Strategy, p *product) *graph.Node
}

// computeDType is the dtype a product of x with w accumulates in: float64 for float64 operands
// and for integer activations (exact while the sums stay below 2^53; GoMLX's pure-Go backend also
// fails on some integer dot products), float32 otherwise.
func computeDType(x dtypes.DType, w Layout) dtypes.DType {
	if x == dtypes.Float64 || !x.IsFloat() || w.scaleDType() == dtypes.Float64 {
		return dtypes.Float64
	}
	return dtypes.Float32
}

// slabMaxRows is the largest number of activation rows whose DecodeDot is computed a slab at a
// time: with more rows one weight-sized decode and one dot are faster (docs/performance.md).
const slabMaxRows = 64

// slabBytes is the size of the float slab DecodeDot decodes at a time (docs/performance.md).
const slabBytes = 4 << 20

// scaled is a product's separable scale placed: the activations in p.cdt (multiplied by the scale
// when it goes there), whether the decoded weight leaves the scale out (unit), and output, which
// applies the scale to the result when it goes there and converts it to x's dtype.
func scaled(p *product, w Layout) (xf *graph.Node, unit bool, output func(*graph.Node) *graph.Node) {
	xf = p.activations()
	s := w.separableScale()
	onOutput, onActivations := false, false
	if s != nil {
		onOutput, onActivations = p.scalePlacement(s)
	}
	if onActivations {
		xf = graph.Mul(xf, p.scaleOnActivations(s, p.cdt))
	}
	return xf, onOutput || onActivations, func(out *graph.Node) *graph.Node {
		if onOutput {
			out = graph.Mul(out, p.scaleOnOutput(s, p.cdt))
		}
		return p.finish(out)
	}
}

// decodeDot is DecodeDot: the separable scale on the output or the activations, the codes
// decoded (a slab at a time for a few rows of a large weight), one dense DotGeneral.
func decodeDot(p *product, w Layout) *graph.Node {
	xf, unit, output := scaled(p, w)
	if size, ok := slabSize(p, w); ok {
		return output(slabbedDot(p, w, xf, unit, size))
	}
	return output(p.dot(xf, kernelDecode(p, w, unit)))
}

// slabSize returns the number of indices of the weight's first contracting axis per slab, when
// the product is slabbed: few rows, a float weight larger than two slabs, an axis the storage
// slices directly.
func slabSize(p *product, w Layout) (int, bool) {
	if len(p.wContracting) == 0 || p.rows() > slabMaxRows {
		return 0, false
	}
	axis := p.wContracting[0]
	floatBytes := product1(p.wDims) * p.cdt.Size()
	if floatBytes <= 2*slabBytes {
		return 0, false
	}
	if _, ok := w.slice(axis, 0, 1); !ok {
		return 0, false
	}
	perIndex := floatBytes / p.wDims[axis]
	size := max(1, slabBytes/perIndex)
	return size, size < p.wDims[axis]
}

// slabbedDot is the DotGeneral of xf and the decoded weight summed over slabs of the weight's
// first contracting axis. Each slab's decode depends on the previous partial product through
// After, so XLA runs the slabs in order and reuses one small buffer: a fresh weight-sized float
// buffer per call costs more in page faults than the product of a few rows.
func slabbedDot(p *product, w Layout, xf *graph.Node, unit bool, size int) *graph.Node {
	wAxis, xAxis := p.wContracting[0], p.xContracting[0]
	var acc *graph.Node
	for start := 0; start < p.wDims[wAxis]; start += size {
		end := min(p.wDims[wAxis], start+size)
		sub, _ := w.slice(wAxis, start, end)
		sp := *p
		sp.wDims = sub.Dimensions()
		dense := sub.decode(&sp, unit)
		if acc != nil {
			dense = After(acc, dense)
		}
		d := sp.dot(sliceActivations(xf, xAxis, start, end), dense)
		if acc == nil {
			acc = d
		} else {
			acc = graph.Add(acc, d)
		}
	}
	return acc
}

// mulReduce is MulReduce for a rank-2 weight: the decoded weight times the activations,
// broadcast, summed over the contracting axis.
func mulReduce(p *product, w Layout) *graph.Node {
	xf, unit, output := scaled(p, w)
	x2 := p.toMK(xf)
	dense := w.decode(p, unit)
	if p.kMajor() { // Σ_k x[m, k]·W[k, n]
		return output(p.fromMN(graph.ReduceSum(graph.Mul(graph.InsertAxes(x2, -1), graph.InsertAxes(dense, 0)), 1)))
	}
	// Σ_k x[m, k]·W[n, k]
	return output(p.fromMN(graph.ReduceSum(graph.Mul(graph.InsertAxes(x2, 1), graph.InsertAxes(dense, 0)), 2)))
}
