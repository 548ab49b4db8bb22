package lowering

import (
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// The formulations of XLA's GPU and TPU compilers. XLA's GPU compiler fuses a dot with the
// element-wise producers of its operands into one Triton GEMM when every op on the way is one its
// Triton emitter supports (xla/backends/gpu/codegen/triton/support.cc): no uint8 type, no shift,
// no gather; compares, selects, integer and/or/divide on signed integers, float arithmetic,
// broadcasts, bitcast reshapes. A block scale joins through broadcast, reshape and multiply
// (SubchannelDequantizationFlag). A reduction takes any element-wise producer, so the products of a few rows (MulReduce,
// SlicedSum) read each stored byte once with any decode.

// SubchannelDequantizationFlag, set true in XLA_FLAGS when a GPU plugin loads, lets XLA's GPU
// compiler fuse a block scale's broadcast, reshape and multiply into the Triton GEMM of the dot
// it feeds (PrologueDot of a Blockwise4 weight). quanta's runtime sets it for CUDA plugins that
// know it.
const SubchannelDequantizationFlag = "--xla_gpu_experimental_enable_subchannel_dequantisation_fusion"

// gemmMinRows is the number of activation rows from which Choose gives a GPU product to a GEMM
// (PrologueDot) rather than to a reduction (MulReduce, SlicedSum): with fewer, a product streams
// its weight, which a reduction reads once with any decode; from 16, a tensor-core tile of the
// GEMM's rows is full. tpu_tests/run-on-device.sh measures both forms on each side of it.
const gemmMinRows = 16

// ggmlReduceMaxRows is the number of activation rows up to which Choose gives a GGML product on a
// GPU to MulReduce: one reduction fusion reading the blocks, 2-4x faster there than DecodeDot's
// float32 weight and GEMM at one row, slower from four rows on (docs/performance.md).
const ggmlReduceMaxRows = 1

// chooseAccelerator is the policy's GPU and TPU rows (see Choose); ok is false on other platforms
// and for layouts it has no row for.
func chooseAccelerator(p *product, w Layout) (Strategy, bool) {
	switch p.platform.base() {
	case XLAGPU:
		if _, ggml := w.(GGML); ggml && p.rows() <= ggmlReduceMaxRows && p.rank2() && !p.kMajor() {
			return MulReduce, true
		}
		if p.rows() < gemmMinRows {
			if _, signs := w.(Signs); signs && w.serves(SlicedSum, p) {
				return SlicedSum, true
			}
			// int8's GEMM form converts the codes next to the dot: it streams them as fast as
			// a reduction at one row (docs/performance.md, GPU measurements).
			if _, int8 := w.(Int8); !int8 && p.rank2() && prologueServes(w, p) {
				return MulReduce, true
			}
		}
	case XLATPU:
	default:
		return Auto, false
	}
	if prologueServes(w, p) {
		return PrologueDot, true
	}
	return Auto, false
}

// prologueServes reports whether PrologueDot serves w with activations of p.
func prologueServes(w Layout, p *product) bool {
	switch w.(type) {
	case Blockwise4, Blockwise4DQ, FlatBlockwise4, Int8:
		return true
	case Signs:
		return p.xShape.DType.IsFloat()
	}
	return false
}

// codesServes reports whether CodesDot serves w with activations of p.
func codesServes(w Layout, p *product) bool {
	_, signs := w.(Signs)
	return signs && p.xShape.DType.IsFloat()
}

// dotDType is the dtype of PrologueDot's and CodesDot's DotGeneral operands: on a GPU or a TPU, a
// 16-bit float activation dtype as it is (their products of 16-bit operands accumulate in float32,
// as the dense product of that dtype does); the accumulation dtype otherwise (XLA CPU and GoMLX's
// pure-Go backend accumulate 16-bit products in their own dtype).
func (p *product) dotDType() dtypes.DType {
	dt := p.xShape.DType
	if base := p.platform.base(); (dt == dtypes.BFloat16 || dt == dtypes.Float16) && (base == XLAGPU || base == XLATPU) {
		return dt
	}
	return p.cdt
}

// prologueDot is PrologueDot: the weight decoded with ops Triton takes in a GEMM prologue, in the
// dot's dtype, one DotGeneral.
func prologueDot(p *product, w Layout) *graph.Node {
	ddt := p.dotDType()
	switch w := w.(type) {
	case Blockwise4DQ:
		return prologueDot(p, w.decoded()) // the scales decoded (a 1/blockSize-sized gather), then NF4's
	case Blockwise4:
		return p.finish(p.dot(graph.ConvertDType(p.x, ddt), graph.ConvertDType(w.prologueDecode(p.cdt), ddt)))
	case FlatBlockwise4:
		dense := graph.Reshape(w.rows().prologueDecode(p.cdt), w.Dims...)
		return p.finish(p.dot(graph.ConvertDType(p.x, ddt), graph.ConvertDType(dense, ddt)))
	case Int8:
		return scaledDot(p, w, graph.ConvertDType(w.Codes, ddt))
	case Signs:
		return scaledDot(p, w, w.planarValues(ddt))
	}
	panic("lowering: prologueDot of " + w.String()) // supports() admits the layouts above only
}

// codesDot is CodesDot: the Signs values materialized as int8 with any decode, then multiplied as
// an Int8 weight.
func codesDot(p *product, w Signs) *graph.Node {
	return scaledDot(p, w, graph.ConvertDType(w.values(dtypes.Int8), p.dotDType()))
}

// scaledDot multiplies activations by an unscaled weight (in the dot's dtype) whose layout has a
// separable scale: a scale constant along the contracting axes multiplies the output (in p.cdt),
// any other multiplies the weight in the dot's prologue, as XLA's channel dequantization does.
func scaledDot(p *product, w Layout, unscaled *graph.Node) *graph.Node {
	ddt := unscaled.DType()
	dense := unscaled
	s := w.separableScale()
	onOutput := false
	if s != nil {
		onOutput, _ = p.scalePlacement(s)
		if !onOutput {
			dense = graph.Mul(dense, graph.BroadcastToDims(graph.ConvertDType(s, ddt), w.Dimensions()...))
		}
	}
	out := p.dot(graph.ConvertDType(p.x, ddt), dense)
	if onOutput {
		out = graph.Mul(graph.ConvertDType(out, p.cdt), p.scaleOnOutput(s, p.cdt))
	}
	return p.finish(out)
}

// asInt8 reinterprets uint8 bytes as int8 (the same bits): a bitcast where the backend has one; a
// conversion elsewhere (GoMLX's pure-Go backend, whose conversion wraps as Go's does).
func asInt8(b *graph.Node) *graph.Node {
	if b.Graph().Backend().Capabilities().Operations[backends.OpTypeBitcast] {
		return graph.Bitcast(b, dtypes.Int8)
	}
	return graph.ConvertDType(b, dtypes.Int8)
}

// bitField returns fields of int8 bytes b (any shape) along a new axis at position axis, whose
// index i selects the field: bits shift[i] to shift[i]+width-1 of each byte, as int32 in
// [0, 2^width). With s = 2^shift[i] it computes ((b − (b & (s−1))) / s) & (2^width − 1) on the
// bytes widened to int32: the subtraction clears the bits below the field, so the division is
// exact (no rounding direction to care about) and equals the arithmetic shift; two's complement
// makes the final mask give the field's bits for negative bytes too. Integer and, subtract and
// divide on signed integers with broadcast constants: ops a Triton GEMM prologue takes, where a
// shift or a uint8 op is not.
func bitField(b *graph.Node, axis int, shift []int, width int) *graph.Node {
	dims := slices.Insert(slices.Clone(b.Shape().Dimensions), axis, len(shift))
	g := b.Graph()
	low := make([]int32, len(shift))
	div := make([]int32, len(shift))
	for i, sh := range shift {
		low[i] = int32(1)<<sh - 1
		div[i] = int32(1) << sh
	}
	others := make([]int, 0, len(dims)-1)
	for a := range dims {
		if a != axis {
			others = append(others, a)
		}
	}
	along := func(v []int32) *graph.Node { return graph.ExpandAndBroadcast(graph.Const(g, v), dims, others) }
	bb := graph.ExpandAndBroadcast(graph.ConvertDType(b, dtypes.Int32), dims, []int{axis})
	cleared := graph.Sub(bb, graph.BitwiseAnd(bb, along(low)))
	return graph.BitwiseAnd(graph.Div(cleared, along(div)), graph.Scalar(g, dtypes.Int32, int(1)<<width-1))
}

// selectCodebook returns codebook[code] in dtype for int32 codes in [0, 16): a chain of 15
// compares and selects, exact (each value is a codebook constant) and made of ops a Triton GEMM
// prologue takes, where a gather is not.
func selectCodebook(code *graph.Node, codebook [16]float32, dtype dtypes.DType) *graph.Node {
	g := code.Graph()
	v := graph.BroadcastToDims(graph.Scalar(g, dtype, float64(codebook[0])), code.Shape().Dimensions...)
	for j := 1; j < len(codebook); j++ {
		v = graph.Where(graph.GreaterOrEqual(code, graph.Scalar(g, dtypes.Int32, j)), graph.Scalar(g, dtype, float64(codebook[j])), v)
	}
	return v
}

// prologueDecode is the dense weight in cdt decoded with PrologueDot's ops: the packed bytes seen
// as int8; both nibbles of each byte through a new axis of size 2 (field 0 the high nibble, field 1
// the low one), so that merging it with the byte axis gives the element order (high nibble first)
// with a reshape, not a concatenation; the codebook by selects; the block scale broadcast along the
// block, reshaped to the weight's last axis and multiplied.
func (w Blockwise4) prologueDecode(cdt dtypes.DType) *graph.Node {
	ps := w.Packed.Shape()
	lead := ps.Dimensions[:ps.Rank()-2]
	nb, bs := ps.Dim(-2), 2*ps.Dim(-1)
	codes := bitField(asInt8(w.Packed), ps.Rank(), []int{4, 0}, 4) // (..., nb, bs/2, 2)
	values := graph.Reshape(selectCodebook(codes, w.Codebook, cdt), slices.Concat(lead, []int{nb * bs})...)
	scales := graph.ExpandAndBroadcast(graph.ConvertDType(w.Scales, cdt), slices.Concat(lead, []int{nb, bs}), []int{len(lead) + 1})
	dense := graph.Mul(values, graph.Reshape(scales, slices.Concat(lead, []int{nb * bs})...))
	if w.Dim != nb*bs {
		dense = graph.SliceAxis(dense, -1, graph.AxisRange(0, w.Dim))
	}
	return dense
}

// planarValues is the Signs weight's values in dtype decoded with PrologueDot's ops: the packed
// bytes seen as int8, each bit group g through a new leading axis (planar: group g holds logical
// rows g·P to (g+1)·P−1), so that merging it with the packed axis gives the logical rows with a
// reshape; value = α·code − 1 (α 1 for 2 bits, 2 for 1 bit).
func (w Signs) planarValues(dtype dtypes.DType) *graph.Node {
	shifts := make([]int, w.valuesPerByte())
	for g := range shifts {
		shifts[g] = g * w.Bits
	}
	codes := graph.ConvertDType(bitField(asInt8(w.Packed), 0, shifts, w.Bits), dtype) // (G, P, d1, ...)
	values := graph.AddScalar(graph.MulScalar(codes, float64(2/w.Bits)), -1)
	return graph.Reshape(values, w.Dimensions()...)
}
