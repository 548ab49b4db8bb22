package lowering

import (
	"sync/atomic"

	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/kernelreg"
)

// The custom calls of quanta's CPU kernels are declared once, in the kernel table
// (internal/kernelreg: each target's operands after the activations, and attributes); the
// handlers (internal/cpukernels) read them in that order.

// kernelMaxRows is the largest number of activation rows for which Auto calls a kernel. Its
// alternative there is DecodeDot (decode the weight, then XLA's dense product), which every
// kernel beats up to 512 rows and which overtakes them beyond, where XLA's blocked dense product
// amortizes the decode (docs/performance.md has the sweeps).
const kernelMaxRows = 512

// kernelCall is the custom call of the kernel serving a product: its operands after the
// activations, by the table's names.
type kernelCall struct {
	target kernelreg.Target
	args   map[string]*graph.Node
	attrs  map[string]any
}

// kernelFor returns the kernel call that serves p with w, if any: the backend has the kernels
// (or, with p.kernels nil, is only described as having them), the product is rank 2 in an
// unsharded graph with float32 or bfloat16 activations, and the layout has a kernel.
func kernelFor(p *product, w Layout) (kernelCall, bool) {
	if p.platform&Kernels == 0 || !p.rank2() || (p.xShape.DType != dtypes.Float32 && p.xShape.DType != dtypes.BFloat16) {
		return kernelCall{}, false
	}
	if p.x != nil && p.x.Graph().DistributedStrategy() != distributed.None {
		return kernelCall{}, false // the partitioner would replicate the call's operands
	}
	var c kernelCall
	var ok bool
	switch w := w.(type) {
	case Blockwise4:
		c, ok = w.kernel(p)
	case Blockwise4DQ:
		c, ok = w.decoded().kernel(p) // the scales decoded in the graph, then NF4's kernel
	case Int8:
		c, ok = w.kernel(p)
	case Signs:
		c, ok = w.kernel(p)
	case GGML:
		c, ok = w.kernel(p)
	}
	if ok && p.kernels != nil && !p.kernels.Targets[c.target.Name] {
		return kernelCall{}, false
	}
	return c, ok
}

// kernelNeeds says what each format needs for its kernel (the kernel methods below), for messages.
const kernelNeeds = "blockwise4 weights (also double-quantized) with the kernels' codebook (NF4's) and float32, " +
	"bfloat16 or float16 scales; int8 weights with float32, bfloat16 or float16 scales per tensor, per contracted " +
	"index or per output column; signs weights contracted on their packed axis with no scale or a float32 one per " +
	"tensor or per output column; GGML weights contracted on their block axis (x·Wᵀ, GGUF's linear weight)"

func floatScale(dt dtypes.DType) bool {
	return dt == dtypes.Float32 || dt == dtypes.BFloat16 || dt == dtypes.Float16
}

func (w Blockwise4) kernel(p *product) (kernelCall, bool) {
	if p.kernels != nil && p.kernels.Codebook4 != w.Codebook || !floatScale(w.Scales.DType()) {
		return kernelCall{}, false
	}
	target := "quanta_nf4_nk"
	if p.kMajor() {
		target = "quanta_nf4_kn"
	}
	return kernelCall{target: kernelreg.TargetNamed(target), args: map[string]*graph.Node{"packed": w.Packed, "absmax": w.Scales}}, true
}

// scaleKind classifies an int8 or signs scale of a rank-2 weight for the kernel of p: per tensor,
// per contracted index or per output column.
func scaleKind(p *product, s *graph.Node) (kernelreg.ScaleKind, bool) {
	dims := s.Shape().Dimensions
	kAxis := p.wContracting[0]
	switch {
	case dims[0] == 1 && dims[1] == 1:
		return kernelreg.ScaleTensor, true
	case dims[1-kAxis] == 1:
		return kernelreg.ScaleK, true
	case dims[kAxis] == 1:
		return kernelreg.ScaleN, true
	}
	return 0, false
}

func (w Int8) kernel(p *product) (kernelCall, bool) {
	kind, ok := scaleKind(p, w.Scale)
	if !ok || !floatScale(w.Scale.DType()) {
		return kernelCall{}, false
	}
	target := "quanta_int8_nk"
	if p.kMajor() {
		target = "quanta_int8_kn"
	}
	return kernelCall{target: kernelreg.TargetNamed(target),
		args:  map[string]*graph.Node{"codes": w.Codes, "scale": graph.Reshape(w.Scale, w.Scale.Shape().Size())},
		attrs: map[string]any{"scale_kind": int(kind)}}, true
}

func (w Signs) kernel(p *product) (kernelCall, bool) {
	if !p.kMajor() {
		return kernelCall{}, false
	}
	target := "quanta_twobit_kn"
	if w.Bits == 1 {
		target = "quanta_onebit_kn"
	}
	c := kernelCall{target: kernelreg.TargetNamed(target), args: map[string]*graph.Node{"packed": w.Packed},
		attrs: map[string]any{"scale_kind": int(kernelreg.ScaleNone)}}
	if w.Scale == nil {
		return c, true
	}
	kind, ok := scaleKind(p, w.Scale)
	if !ok || kind == kernelreg.ScaleK || w.Scale.DType() != dtypes.Float32 {
		return kernelCall{}, false
	}
	c.args["scale"] = graph.Reshape(w.Scale, w.Scale.Shape().Size())
	c.attrs["scale_kind"] = int(kind)
	return c, true
}

// kernel serves x·Wᵀ, the weight contracted on its block axis as GGUF stores a linear weight:
// the blocks as one operand (N, numBlocks·blockBytes), the type as the ggml_type attribute.
func (w GGML) kernel(p *product) (kernelCall, bool) {
	if p.kMajor() {
		return kernelCall{}, false
	}
	bs := w.Blocks.Shape()
	blocks := graph.Reshape(w.Blocks, bs.Dim(0), bs.Dim(1)*bs.Dim(2))
	return kernelCall{target: kernelreg.TargetNamed("quanta_ggml_nk"), args: map[string]*graph.Node{"blocks": blocks},
		attrs: map[string]any{"ggml_type": int(w.Type)}}, true
}

// kernelProduct builds the product as the kernel's custom call: the DecodeDot formulation in
// float32 — what GoMLX differentiates — whose result node is rewritten into the call.
func kernelProduct(p *product, w Layout, c kernelCall) *graph.Node {
	operands := append([]*graph.Node{p.toMK(p.x)}, c.target.Args(c.args)...) // built before the node they feed
	xf := p.toMK(p.activations())
	dense := w.decode(p, false)
	contract := 0
	if !p.kMajor() {
		contract = 1
	}
	mn := graph.DotGeneral(xf, []int{1}, nil, dense, []int{contract}, nil) // (M, N) float32
	if err := p.kernels.Emit(mn, c.target.Name, operands, c.attrs); err != nil {
		panic(errors.WithMessagef(err, "lowering.DotGeneral: emitting the %s kernel for %s", c.target.Name, w))
	}
	return p.finish(p.fromMN(mn))
}

// decodeCall is the custom call that writes a weight's dense float32 values (rows, span): its
// operands, the stored weight's components first.
type decodeCall struct {
	target   kernelreg.Target
	operands []*graph.Node
	attrs    map[string]any
}

// decodeFor returns the decode kernel that serves DecodeDot's weight for p, if any: on a backend
// with the kernels, in float32, a rank-2 NF4-codebook (also double-quantized) or GGML weight in an
// unsharded graph. The operands are built here, before the decode node they will replace.
func decodeFor(p *product, w Layout) (decodeCall, bool) {
	if p.platform&Kernels == 0 || p.kernels == nil || p.x == nil || p.cdt != dtypes.Float32 || len(p.wDims) != 2 ||
		p.x.Graph().DistributedStrategy() != distributed.None {
		return decodeCall{}, false
	}
	var c decodeCall
	if dq, ok := w.(Blockwise4DQ); ok {
		w = dq.decoded() // the scales decoded in the graph, then NF4's decode kernel
	}
	switch w := w.(type) {
	case Blockwise4:
		if p.kernels.Codebook4 != w.Codebook || !floatScale(w.Scales.DType()) {
			return decodeCall{}, false
		}
		c = decodeCall{target: kernelreg.TargetNamed("quanta_nf4_decode"), operands: []*graph.Node{w.Packed, w.Scales}}
	case GGML:
		bs := w.Blocks.Shape()
		c = decodeCall{target: kernelreg.TargetNamed("quanta_ggml_decode"),
			operands: []*graph.Node{graph.Reshape(w.Blocks, bs.Dim(0), bs.Dim(1)*bs.Dim(2))},
			attrs:    map[string]any{"ggml_type": int(w.Type)}}
	default:
		return decodeCall{}, false
	}
	return c, p.kernels.Targets[c.target.Name]
}

// decodeKernels counts the decode kernels emitted (the tests' evidence that DecodeDot took one).
var decodeKernels atomic.Int64

// kernelDecode returns w's dense weight for p with the decode kernel emitted in place of the
// graph's decode, when one serves (decodeFor); the graph's decode otherwise.
func kernelDecode(p *product, w Layout, unit bool) *graph.Node {
	c, ok := decodeFor(p, w)
	dense := w.decode(p, unit)
	if ok {
		if err := p.kernels.Emit(dense, c.target.Name, c.operands, c.attrs); err != nil {
			panic(errors.WithMessagef(err, "lowering.DotGeneral: emitting the %s kernel for %s", c.target.Name, w))
		}
		decodeKernels.Add(1)
	}
	return dense
}

// kernelsOf returns the kernels of the backend the graph of node runs on, or nil.
func kernelsOf(node *graph.Node) *kernelreg.Kernels {
	return kernelreg.For(node.Graph().Backend())
}
