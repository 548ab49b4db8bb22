package lowering

import (
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/kernelreg"
)

// product is a dot_general between dense activations x and a quantized weight, seen from the
// weight: the axes of both operands split into contracting, batch and free. Every formulation
// reads its axes from here, and builds its result in DotGeneral's output order (batch axes, then
// the lhs's free axes, then the rhs's).
type product struct {
	// x is the activations node; nil when the product is only described (Choose).
	x                           *graph.Node
	xShape                      shapes.Shape
	xContracting, xBatch, xFree []int
	wContracting, wBatch, wFree []int
	wDims                       []int
	weightOnLeft                bool
	// cdt is the dtype products accumulate in (computeDType).
	cdt      dtypes.DType
	platform Platform
	// kernels are the backend's CPU kernels (nil when the product is only described).
	kernels *kernelreg.Kernels
}

// newProduct normalizes and checks the axes (negative allowed), panicking with a message that
// names op, the shapes and the axes.
func newProduct(op string, xShape shapes.Shape, wDims []int, axes Axes) *product {
	p := &product{xShape: xShape, wDims: slices.Clone(wDims), weightOnLeft: axes.WeightOnLeft}
	xContracting, xBatch, wContracting, wBatch := axes.XContracting, axes.XBatch, axes.WContracting, axes.WBatch
	xDims := xShape.Dimensions
	p.xContracting = normalizeAxes(op, "x contracting", xContracting, len(xDims))
	p.xBatch = normalizeAxes(op, "x batch", xBatch, len(xDims))
	p.wContracting = normalizeAxes(op, "weight contracting", wContracting, len(wDims))
	p.wBatch = normalizeAxes(op, "weight batch", wBatch, len(wDims))
	ok := len(p.xContracting) == len(p.wContracting) && len(p.xBatch) == len(p.wBatch)
	for i := 0; ok && i < len(p.xContracting); i++ {
		ok = xDims[p.xContracting[i]] == wDims[p.wContracting[i]] && !slices.Contains(p.xBatch, p.xContracting[i])
	}
	for i := 0; ok && i < len(p.xBatch); i++ {
		ok = xDims[p.xBatch[i]] == wDims[p.wBatch[i]] && !slices.Contains(p.wContracting, p.wBatch[i])
	}
	if !ok {
		panic(errors.Errorf("%s: activations %s contracting %v batch %v and weight %v contracting %v batch %v do not pair; "+
			"accepted: as many contracting and batch axes on both sides, paired axes of equal size, no axis both contracting and batch",
			op, xShape, xContracting, xBatch, wDims, wContracting, wBatch))
	}
	p.xFree = freeAxes(len(xDims), p.xContracting, p.xBatch)
	p.wFree = freeAxes(len(wDims), p.wContracting, p.wBatch)
	return p
}

func normalizeAxes(op, what string, axes []int, rank int) []int {
	out := make([]int, len(axes))
	for i, a := range axes {
		if a < 0 {
			a += rank
		}
		if a < 0 || a >= rank || slices.Contains(out[:i], a) {
			panic(errors.Errorf("%s: %s axes %v for rank %d; accepted: distinct axes in -%d..%d", op, what, axes, rank, rank, rank-1))
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

func pick(dims, axes []int) []int {
	out := make([]int, len(axes))
	for i, a := range axes {
		out[i] = dims[a]
	}
	return out
}

func product1(dims []int) int {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return n
}

func ones(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

// setBackend takes the platform and the kernels from the backend of node's graph.
func (p *product) setBackend(node *graph.Node) {
	backend := node.Graph().Backend()
	p.platform, p.kernels = PlatformOf(backend), kernelreg.For(backend)
}

// rows is M: the number of activation rows, the product of x's free dimensions.
func (p *product) rows() int { return product1(pick(p.xShape.Dimensions, p.xFree)) }

// rank2 reports a rank-2 weight with one contracting axis and no batch axes.
func (p *product) rank2() bool {
	return len(p.wDims) == 2 && len(p.wContracting) == 1 && len(p.wBatch) == 0
}

// kMajor reports a rank-2 weight contracted on its first axis: x·W with W (K, N).
func (p *product) kMajor() bool { return p.rank2() && p.wContracting[0] == 0 }

// outDims are DotGeneral's output dimensions.
func (p *product) outDims() []int {
	xd := p.xShape.Dimensions
	dims := pick(xd, p.xBatch)
	if p.weightOnLeft {
		return slices.Concat(dims, pick(p.wDims, p.wFree), pick(xd, p.xFree))
	}
	return slices.Concat(dims, pick(xd, p.xFree), pick(p.wDims, p.wFree))
}

// dot is the dense DotGeneral of activations xn and a dense weight wn, each on its side.
func (p *product) dot(xn, wn *graph.Node) *graph.Node {
	if p.weightOnLeft {
		return graph.DotGeneral(wn, p.wContracting, p.wBatch, xn, p.xContracting, p.xBatch)
	}
	return graph.DotGeneral(xn, p.xContracting, p.xBatch, wn, p.wContracting, p.wBatch)
}

// activations returns x in the accumulation dtype.
func (p *product) activations() *graph.Node { return graph.ConvertDType(p.x, p.cdt) }

// toMK arranges activations xn (x's layout) as (M, K), for rank-2 weights.
func (p *product) toMK(xn *graph.Node) *graph.Node {
	k := p.wDims[p.wContracting[0]]
	return graph.Reshape(graph.TransposeAllAxes(xn, append(slices.Clone(p.xFree), p.xContracting[0])...), p.rows(), k)
}

// fromMN turns an (M, N) result of a rank-2 weight into DotGeneral's output layout.
func (p *product) fromMN(mn *graph.Node) *graph.Node {
	xFree := pick(p.xShape.Dimensions, p.xFree)
	n := mn.Shape().Dim(1)
	if p.weightOnLeft {
		return graph.Reshape(graph.TransposeAllAxes(mn, 1, 0), append([]int{n}, xFree...)...)
	}
	return graph.Reshape(mn, append(xFree, n)...)
}

// finish converts a result to the activations' dtype. Integer activations' sums (exact float64
// integers) go through int64, so that a sum the dtype cannot hold wraps as a dense integer
// product's does (XLA saturates a float converted to a narrower integer; Go leaves it to the
// implementation).
func (p *product) finish(out *graph.Node) *graph.Node {
	if !p.xShape.DType.IsFloat() && out.DType().IsFloat() {
		out = graph.ConvertDType(out, dtypes.Int64)
	}
	return graph.ConvertDType(out, p.xShape.DType)
}

// scalePlacement says where a separable scale s (the weight's rank, 1 on the axes it is constant
// along) can go: onto the output when it is constant along the contracting axes (a per-output-
// channel or per-tensor scale), else onto the activations when it is constant along the free
// axes (one scale per contracting row). Neither: it must multiply the weight.
func (p *product) scalePlacement(s *graph.Node) (onOutput, onActivations bool) {
	varies := func(axes []int) bool {
		for _, a := range axes {
			if s.Shape().Dim(a) != 1 {
				return true
			}
		}
		return false
	}
	if !varies(p.wContracting) {
		return true, false
	}
	return false, !varies(p.wFree)
}

// scaleOnOutput arranges a scale constant along the contracting axes in the output's layout,
// broadcast to the output dimensions, in dtype.
func (p *product) scaleOnOutput(s *graph.Node, dtype dtypes.DType) *graph.Node {
	sd := s.Shape().Dimensions
	dims := pick(sd, p.wBatch)
	if p.weightOnLeft {
		dims = slices.Concat(dims, pick(sd, p.wFree), ones(len(p.xFree)))
	} else {
		dims = slices.Concat(dims, ones(len(p.xFree)), pick(sd, p.wFree))
	}
	arranged := arrange(s, slices.Concat(p.wBatch, p.wFree), dims)
	return graph.BroadcastToDims(graph.ConvertDType(arranged, dtype), p.outDims()...)
}

// scaleOnActivations arranges a scale constant along the free axes in x's layout (each
// contracting or batch axis of x takes the dimension of its paired weight axis), broadcast to x's
// dimensions, in dtype.
func (p *product) scaleOnActivations(s *graph.Node, dtype dtypes.DType) *graph.Node {
	sd := s.Shape().Dimensions
	xRank := p.xShape.Rank()
	var order []int
	dims := ones(xRank)
	for a := range xRank {
		if i := slices.Index(p.xContracting, a); i >= 0 {
			order = append(order, p.wContracting[i])
			dims[a] = sd[p.wContracting[i]]
		} else if i := slices.Index(p.xBatch, a); i >= 0 {
			order = append(order, p.wBatch[i])
			dims[a] = sd[p.wBatch[i]]
		}
	}
	return graph.BroadcastToDims(graph.ConvertDType(arrange(s, order, dims), dtype), p.xShape.Dimensions...)
}

// arrange transposes s so that the axes of order come first, then reshapes it to dims; the axes
// left out must have size 1.
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

// sliceAxis is graph.Slice of [start, end) along axis, the full range elsewhere.
func sliceAxis(x *graph.Node, axis, start, end int) *graph.Node {
	return graph.SliceAxis(x, axis, graph.AxisRange(start, end))
}

// sliceActivations is sliceAxis for a node a product's gradient flows through (the activations,
// or a result sliced to the weight's logical size). GoMLX differentiates a slice with Pad, which
// the pure-Go backend lacks: there it is a Gather, whose gradient (a scatter-add) that backend
// has, so the formulations that slice their activations can be differentiated there too.
func sliceActivations(x *graph.Node, axis, start, end int) *graph.Node {
	if x.Graph().Backend().Capabilities().Operations[backends.OpTypePad] {
		return sliceAxis(x, axis, start, end)
	}
	if axis < 0 {
		axis += x.Rank()
	}
	perm := []int{axis} // the sliced axis first: Gather indexes the leading axis
	for a := range x.Rank() {
		if a != axis {
			perm = append(perm, a)
		}
	}
	moved := x
	if axis != 0 {
		moved = graph.TransposeAllAxes(x, perm...)
	}
	indices := graph.AddScalar(graph.Iota(x.Graph(), shapes.Make(dtypes.Int32, end-start, 1), 0), float64(start))
	out := graph.Gather(moved, indices)
	if axis == 0 {
		return out
	}
	inverse := make([]int, len(perm))
	for i, a := range perm {
		inverse[a] = i
	}
	return graph.TransposeAllAxes(out, inverse...)
}

// sliceBounds splits [0, n) into at most parts equal slices (fewer when parts does not divide n:
// halving until it does). Formulations add their terms over the slices element-wise, so that XLA
// CPU runs the terms and the sum as one parallel loop and leaves one small reduction.
func sliceBounds(n, parts int) [][2]int {
	for parts > 1 && n%parts != 0 {
		parts /= 2
	}
	step := n / parts
	out := make([][2]int, parts)
	for i := range out {
		out[i] = [2]int{i * step, (i + 1) * step}
	}
	return out
}

// After returns x plus a term that is exactly zero but computed from prev (IsFinite of one of
// prev's values, times zero: never NaN), so XLA schedules x's producer after prev. Chaining the
// slabs of a product this way makes XLA run them in order and reuse one buffer for all of them.
//
// The term carries no gradient (IsFinite's operand is a StopGradient): products built with After
// can be differentiated with respect to their activations.
func After(prev, x *graph.Node) *graph.Node {
	one := prev
	for one.Rank() > 0 {
		one = graph.Squeeze(graph.SliceAxis(one, 0, graph.AxisElem(0)), 0)
	}
	zero := graph.Mul(graph.ConvertDType(graph.IsFinite(graph.StopGradient(one)), x.DType()), graph.ScalarZero(x.Graph(), x.DType()))
	return graph.Add(x, graph.BroadcastToDims(zero, x.Shape().Dimensions...))
}
