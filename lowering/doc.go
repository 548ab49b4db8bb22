// Package lowering is the one home of quanta's quantized products: every product of dense
// activations with a quantized weight, whatever the format, is built here, from dense GoMLX ops.
//
// # The pieces
//
//   - A Layout describes the stored weight a product reads, with graph-node components:
//     Blockwise4 (4-bit codes of a 16-entry codebook with a scale per block of the last axis:
//     NF4), Int8 (int8 codes times a scale of the weight's rank) and Signs (values in {-1, 0, +1}
//     packed 2 or 1 bits each along the first axis, with an optional scale); Blockwise4DQ (a
//     Blockwise4 whose scales are double-quantized, NestedScales: decoded in the graph, then every
//     Blockwise4 strategy serves it) and FlatBlockwise4 (blocks over the flattened weight, as
//     bitsandbytes stores ragged weights: decoded products only); GGML (ggml's block types as a
//     GGUF file stores them, raw blocks decoded in the graph bit for bit as ggml does). Format
//     packages build one from their components; this package imports no format (package gguf,
//     the file reader, names the block types).
//   - Axes are the product's dimension numbers seen from the weight (graph.DotGeneral's, plus
//     the side the weight is on).
//   - A Strategy names a formulation: Materialize, DecodeDot, MulReduce, SlicedSum,
//     ProductTable, Kernel (quanta's CPU kernel as an XLA custom call), PrologueDot and CodesDot
//     (the GEMM forms of XLA's GPU and TPU compilers), or Auto.
//   - A Platform says what the backend is (PlatformOf): pure Go, XLA CPU with or without its
//     library fusions, XLA on a GPU, a TPU or another accelerator, and whether quanta's kernels
//     are registered with it (the Kernels bit). It is derived from the backend a graph is built
//     for (an XLA CPU plugin by its devices, whatever its file's name; others by the plugin's
//     name and their devices' description), never from process-wide state set at import.
//   - Choose is the one policy table (see its documentation); DotGeneral builds the product,
//     panicking with ErrUnsupported when a forced strategy cannot serve it.
//
// Format packages register DotGeneral as their arrays' dot_general handler with
// RegisterDotGeneral: implicitarray.DotGeneral, MatMul and Einsum then reach it for an array of
// the format on either side.
//
// # The policy
//
// Auto never fails: Choose picks a strategy that serves the product, DecodeDot when nothing
// faster applies. An explicit strategy is a requirement: if it cannot serve the product, building
// the graph panics with ErrUnsupported, naming the strategy, the weight and what the strategy
// serves. Every built product is counted per layout and strategy (Built), so tests can prove
// which formulation a graph holds.
//
// DenseMatMul is the product of a dense float weight, as the models' and qlayers' float
// projections build it outside training: with kernels registered, up to 16 rows of float32 go to
// quanta's float32 kernel, which streams the weight faster than XLA's dot there; the rest is
// XLA's dot. It is also the dense baseline of the benchmarks. DenseMatMulTransposed is the same
// for a weight stored (N, K), PyTorch's layout (the models' float projections under a Skip rule
// in qlayers.OutIn, and a float tied head): every float32 row count goes to quanta's kernel,
// faster than XLA's dot of a transposed weight at each.
//
// With kernels registered, Auto gives a rank-2 product of up to 512 activation rows to the kernel,
// which beats DecodeDot there in every format on the benchmark shapes; beyond it XLA's blocked
// dense product amortizes the decode, which for NF4 and GGML weights is itself a kernel there
// (quanta_nf4_decode, quanta_ggml_decode: the float32 weight written on the kernels' pool; the
// graph's decode stays as the formulation GoMLX differentiates). The kernel's weight is the table
// decode's (Dequantize's, Materialize's) bit for bit; so is the graph's decode, except NF4's on
// XLA CPU's fused loops (XLACPUFusedLoops, the runtime's default), which is arithmetic, within
// 4.8e-7 of each code value times the block's scale: there the two differ in their last bits.
// Without kernels, the dense-op formulations that make quantized products faster than dense ones
// on XLA CPU depend on XLA's fusion decisions; which one wins for which shapes and platforms was
// measured, and the figures are in docs/performance.md.
//
// # GPUs and TPUs
//
// On a GPU, Auto gives a product of fewer than 16 activation rows to a reduction, whose XLA
// fusion takes any element-wise decode (MulReduce; SlicedSum for Signs contracted on their packed
// axis, which reads each byte once for all its values), and a product of 16 rows or more to
// PrologueDot, the GEMM form: the weight decoded by ops XLA fuses into its Triton GEMM as the
// dot's operand prologue. Int8 takes PrologueDot at every row count (its convert fuses into the
// GEMM), and a GGML weight, which has no GEMM form, takes MulReduce at one row (one reduction
// over its blocks) and DecodeDot beyond. On a TPU, Auto gives every product PrologueDot. The CPU
// rows of the policy never see these platforms, nor these strategies.
//
// PrologueDot per layout (file gpu.go):
//
//   - Int8: the int8 codes converted to the dot's dtype, next to the dot; a per-output-channel
//     scale multiplies the output, a per-input-channel scale the weight (XLA's channel
//     dequantization pattern).
//   - Blockwise4: the packed bytes bitcast to int8 (Triton has no uint8), widened to int32; both
//     nibbles of each byte through a new axis of size 2 with and, subtract and divide by
//     broadcast constants (no shift), so that a reshape, not a concatenation, gives the element
//     order; the codebook by 15 compares and selects (no gather); the block scale broadcast along
//     the block, reshaped to the weight's axis and multiplied (XLA's subchannel dequantization
//     pattern); converted to the dot's dtype. XLA's int4 GEMM takes an s4 operand instead, which
//     GoMLX v0.26 and go-xla v0.1.4 cannot express: dtypes.S4 exists but its GoType, Size and
//     Bits panic (GoMLX's shapes, tensors and buffers call them), go-xla's StableHLO writer has no
//     type name for it (DTypeToStableHLO prints "unknown_dtype<S4>") and its BitcastConvert shape
//     inference calls Bits, so no s4 value, not even a bitcast of the bytes, reaches XLA.
//   - Signs: the bytes as int8; each bit group through a new leading axis (the packing is planar
//     along the first axis: group g holds rows g·P to (g+1)·P−1), fields extracted as for
//     Blockwise4, value α·code − 1; the Int8 scale rules.
//
// CodesDot is the alternative for Signs: the values materialized as int8 codes by any ops (a loop
// fusion of its own on a GPU), then Int8's PrologueDot. Which of the GEMM forms XLA fuses, under
// its default GEMM fusion or --xla_gpu_experimental_gemm_fusion_v2, and how fast, is what
// tpu_tests/run-on-device.sh measures; docs/performance.md has what is known.
//
// # Numerics
//
// Products accumulate in float32 (float64 when the activations or the scales are float64) and
// return the activations' dtype. The weight is decoded from its components straight into that
// compute dtype whatever the array's materialization dtype (WithDType): the Materialize strategy
// materializes the array converted to it, so no strategy rounds a bfloat16 or float16 array's
// weight to that dtype, and all of them compute the same values up to the order of the
// accumulation (but for the 16-bit operands of PrologueDot and CodesDot on a GPU or TPU, below). On a GPU or a TPU, PrologueDot and CodesDot multiply 16-bit float
// activations by the weight decoded in their dtype, as the dense product of that dtype does, and
// those platforms accumulate such products in float32; elsewhere (XLA CPU and the
// pure-Go backend accumulate 16-bit products in 16 bits) they multiply in float32. An unscaled Signs weight also multiplies integer activations,
// accumulating in float64: exact while the sums stay below 2^53, and a sum the activations' dtype
// cannot hold wraps, as the dense integer product's does, on every backend. Scales that are
// constant along the contracting axes multiply the output and those constant along the free axes
// multiply the activations, so the weight is decoded without them; other scales multiply the
// decoded weight.
//
// # Errors
//
// Graph-building functions panic with a message naming the function, the operands' shapes and
// what is accepted, as GoMLX's do.
package lowering
