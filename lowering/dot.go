package lowering

import (
	"fmt"
	"maps"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
)

// Quantized is what a product needs of a quantized implicit array: its components as a Layout
// and its Strategy. Every format's array implements it.
type Quantized interface {
	implicitarray.Array
	// Layout returns the graph-side view of the components. It panics if they are host tensors.
	Layout() Layout
	// Strategy is the strategy its products use (Auto unless the array was given another).
	Strategy() Strategy
}

// Axes are the dimension numbers of a product, as graph.DotGeneral takes them but seen from the
// weight: the activations' and the weight's contracting and batch axes (negative allowed), and
// which side the weight is on. The output has DotGeneral's layout: batch axes, then the lhs's free
// axes, then the rhs's.
type Axes struct {
	XContracting, XBatch []int
	WContracting, WBatch []int
	WeightOnLeft         bool
}

// ErrUnsupported is the error (wrapped, in a panic) of a product an explicitly chosen Strategy
// cannot serve.
var ErrUnsupported = errors.New("strategy cannot serve the product")

func supports(s Strategy, w Layout, p *product) bool {
	switch s {
	case Auto, Materialize, DecodeDot:
		return true
	case MulReduce:
		return p.rank2()
	case SlicedSum, ProductTable:
		return w.serves(s, p)
	case Kernel:
		_, ok := kernelFor(p, w)
		return ok
	case PrologueDot:
		return prologueServes(w, p)
	case CodesDot:
		return codesServes(w, p)
	}
	return false
}

// requirement says which products s serves, for messages.
func requirement(s Strategy, w Layout) string {
	switch s {
	case Auto, Materialize, DecodeDot:
		return "every product"
	case MulReduce:
		return "rank-2 weights with one contracting axis and no batch axes"
	case Kernel:
		return "rank-2 products with float32 or bfloat16 activations, in unsharded graphs on XLA CPU with quanta's " +
			"kernels registered, of " + kernelNeeds
	case PrologueDot:
		return "blockwise4 (also double-quantized or flat), int8 and signs weights, signs with float activations"
	case CodesDot:
		return "signs weights with float activations"
	}
	return w.requirement(s)
}

// DotGeneral computes graph.DotGeneral between the dense activations x and the quantized array a
// with the strategy a asks for (Auto: Choose), accumulating in float32 (float64 for float64
// activations or scales) and returning x's dtype. A strategy that cannot serve the product panics
// with ErrUnsupported, naming the strategy, the weight and what the strategy serves; so does a
// weight that cannot multiply x's dtype.
func DotGeneral(x *graph.Node, a Quantized, axes Axes) *graph.Node {
	return dotGeneral(x, a, axes, nil)
}

// dotGeneral is DotGeneral for the platform of x's backend or, when as is set (tests building a
// GPU's or TPU's program on a CPU), for *as, which must not have Kernels.
func dotGeneral(x *graph.Node, a Quantized, axes Axes, as *Platform) *graph.Node {
	const op = "lowering.DotGeneral"
	if x == nil || a == nil {
		panic(errors.Errorf("%s: nil operand; accepted: a *graph.Node and a quantized array", op))
	}
	w := a.Layout()
	w.check(op)
	p := newProduct(op, x.Shape(), w.Dimensions(), axes)
	p.x = x
	p.setBackend(x)
	if as != nil {
		p.platform, p.kernels = *as&^Kernels, nil
	}
	if msg := w.activationsError(x.DType()); msg != "" {
		panic(errors.Errorf("%s: activations %s with %s; accepted: %s", op, x.Shape(), w, msg))
	}
	p.cdt = computeDType(x.DType(), w)
	s := a.Strategy()
	if s == Auto {
		s = choose(p, w)
	} else if !supports(s, w, p) {
		panic(errors.Wrapf(ErrUnsupported, "%s: strategy %s cannot serve %s contracting %v batch %v with activations %s; "+
			"%s serves %s, auto serves every product", op, s, w, axes.WContracting, axes.WBatch, x.Shape(), s, requirement(s, w)))
	}
	stats.record(w.kind(), s)
	if x.Shape().Size() == 0 || product1(p.wDims) == 0 {
		// An operand without elements: the product is empty, or zeros (an empty contraction).
		// The formulations slice and broadcast operands that they assume non-empty, and the
		// pure-Go backend has no DotGeneral of empty operands.
		return graph.Zeros(x.Graph(), shapes.Make(x.DType(), p.outDims()...))
	}
	switch s {
	case Materialize:
		// The array materialized in the compute dtype (ConvertDType is lazy for every format),
		// never in its own narrower dtype first: the weight the other strategies decode.
		return p.finish(p.dot(p.activations(), implicitarray.Materialize(implicitarray.ConvertDType(a, p.cdt))))
	case MulReduce:
		return mulReduce(p, w)
	case SlicedSum, ProductTable:
		return w.lower(s, p)
	case Kernel:
		c, _ := kernelFor(p, w)
		return kernelProduct(p, w, c)
	case PrologueDot:
		return prologueDot(p, w)
	case CodesDot:
		return codesDot(p, w.(Signs))
	}
	return decodeDot(p, w)
}

// Choice names a product's weight layout ("blockwise4", "int8", "signs2", "signs1", "ggml-q4_k",
// ...) and the strategy it ran with.
type Choice struct {
	Layout   string
	Strategy Strategy
}

// String returns "layout/strategy".
func (c Choice) String() string { return fmt.Sprintf("%s/%s", c.Layout, c.Strategy) }

// builtCounts counts the products built per Choice.
type builtCounts struct {
	mu     sync.Mutex
	counts map[Choice]int
}

var stats = &builtCounts{counts: map[Choice]int{}}

func (b *builtCounts) record(layout string, strategy Strategy) {
	b.mu.Lock()
	b.counts[Choice{layout, strategy}]++
	b.mu.Unlock()
}

// Built returns how many products each (layout, strategy) built since the start or the last
// ResetBuilt: which formulations a graph holds (the benchmark suite records it per cell, tests
// assert it).
func Built() map[Choice]int {
	stats.mu.Lock()
	defer stats.mu.Unlock()
	return maps.Clone(stats.counts)
}

// ResetBuilt zeroes the counts of Built.
func ResetBuilt() {
	stats.mu.Lock()
	defer stats.mu.Unlock()
	stats.counts = map[Choice]int{}
}

// RegisterDotGeneral registers the dot_general handlers of a quantized array type T with
// implicitarray, for T on either side of a dense operand. Format packages call it from init().
func RegisterDotGeneral[T Quantized](name string) {
	t := implicitarray.TypeOf[T]()
	implicitarray.Register(implicitarray.Rule{Op: implicitarray.OpDotGeneral, Operands: []implicitarray.Match{implicitarray.Dense, t},
		Handler: dotGeneralHandler, Name: name + ".dotGeneral(dense, " + name + ")"})
	implicitarray.Register(implicitarray.Rule{Op: implicitarray.OpDotGeneral, Operands: []implicitarray.Match{t, implicitarray.Dense},
		Handler: dotGeneralHandler, Name: name + ".dotGeneral(" + name + ", dense)"})
}

func dotGeneralHandler(c *implicitarray.Call) implicitarray.Value {
	p := c.Params.(*implicitarray.DotGeneralParams)
	if a, ok := c.Operands[1].(Quantized); ok {
		return DotGeneral(c.Operands[0].(*graph.Node), a, Axes{XContracting: p.LhsContractingAxes, XBatch: p.LhsBatchAxes,
			WContracting: p.RhsContractingAxes, WBatch: p.RhsBatchAxes})
	}
	return DotGeneral(c.Operands[1].(*graph.Node), c.Operands[0].(Quantized), Axes{XContracting: p.RhsContractingAxes,
		XBatch: p.RhsBatchAxes, WContracting: p.LhsContractingAxes, WBatch: p.LhsBatchAxes, WeightOnLeft: true})
}
