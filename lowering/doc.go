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
//     ProductTable, Kernel (quanta's CPU kernel as an XLA custom call), or Auto.
//   - A Platform says what the backend is (PlatformOf): pure Go, XLA CPU with or without its
//     library fusions, XLA on an accelerator, and whether quanta's kernels are registered with
//     it (the Kernels bit). It is derived from the backend a graph is built for, never from
//     process-wide state set at import.
//   - Choose is the one policy table (see its documentation); Supports says whether a strategy
//     serves a product; DotGeneral builds it.
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
// With kernels registered, Auto gives a rank-2 product of up to 512 activation rows to the
// kernel, which beats DecodeDot there in every format on the benchmark shapes; beyond it XLA's
// blocked dense product amortizes the decode. Without kernels, the dense-op formulations
// that make quantized products faster than dense ones on XLA CPU depend on XLA's fusion
// decisions; which one wins for which shapes and platforms was measured, and the figures are in
// docs/performance.md.
//
// # Numerics
//
// Products accumulate in float32 (float64 when the activations or the scales are float64) and
// return the activations' dtype. An unscaled Signs weight also multiplies integer activations,
// accumulating in float64: exact while the sums stay below 2^53. Scales that are constant along
// the contracting axes multiply the output and those constant along the free axes multiply the
// activations, so the weight is decoded without them; other scales multiply the decoded weight.
//
// # Errors
//
// Graph-building functions panic with a message naming the function, the operands' shapes and
// what is accepted, as GoMLX's do.
package lowering
