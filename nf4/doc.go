// Package nf4 implements the 4-bit NormalFloat (NF4) quantized array of QLoRA, byte-compatible
// with eformer's ArrayNF4, as an implicitarray.Array with a fused dequantize+matmul.
//
// # Using it
//
//	w := nf4.MustQuantize(weights, nf4.DefaultBlockSize)   // host side, pure Go, parallel
//	exec := implicitarray.MustNewExec(backend, func(x *graph.Node, w *nf4.Array) *graph.Node {
//		return implicitarray.MatMul(x, w).(*graph.Node)   // fused: no dense weight is built
//	})
//	y := exec.MustCall1(x, w)
//
// ExampleQuantize runs it end to end. Inside a graph, QuantizeNode quantizes a node (for
// re-quantizing and for quantization-aware training).
//
// # Format (eformer's, byte for byte)
//
//   - Codebook: the 16 NF4 values of QLoRA (Codebook), code 7 is 0, codes 0 and 15 are ∓1.
//   - Blocks of BlockSize elements along the last axis; the last axis is zero-padded internally
//     to a multiple of the block size (padding encodes as code 7), but the array's logical
//     Shape is always the input's, and Materialize drops the padding (eformer keeps the padded
//     shape: a bug not reproduced).
//   - absmax per block, in the input's dtype; codes = argmin_i |x/(absmax+tiny) − codebook[i]|,
//     ties to the lower index. tiny is the smallest normal number of the dtype (float32 and
//     bfloat16 2^-126, float16 2^-14, float64 2^-1022). The arithmetic is XLA CPU's, which
//     eformer's bytes come from: the division is a product by the reciprocal of absmax+tiny
//     (float32 for float32 and bfloat16, float16-rounded for float16); bfloat16 and float16
//     operations are done in float32 and rounded to nearest even to the dtype; float32 and
//     bfloat16 subnormals are zero (a block of them has absmax 0); distances are float32
//     (float64 for float64 inputs, as JAX promotes). See Quantize for the one deliberate
//     difference (blocks above 2^126).
//   - Components, in order: packed uint8 (..., numBlocks, blockSize/2), two codes per byte, the
//     even element in the high nibble (codes [3, 12] → 0x3C; a zero block is 0x77); absmax
//     (..., numBlocks).
//   - Materialize decodes with the exact codebook: value = codebook[code] × absmax, computed in
//     float32 (float64 for float64 absmax) and converted to the array's dtype. eformer decodes
//     with a degree-5 polynomial instead, whose error against the codebook, measured by
//     TestPolynomialError (float32 Horner), is at most 0.014794 (at code 1); this package does
//     not use it.
//   - Storage: 0.5 byte per element plus one absmax per block: 4.5 bits per parameter with
//     float32 absmax and block 64 (9 MiB instead of 64 MiB for 4096×4096).
//
// # Handlers (registered in init)
//
//   - dot_general with the NF4 operand on either side: lowering.DotGeneral, with the strategy
//     of the array (WithStrategy; lowering.Auto by default picks per shape class, see package
//     lowering). Every axis combination is served without the generic fallback: layouts the
//     chosen strategy cannot serve use lowering.DequantizeDot. lowering.Materialize forces
//     eformer's materialize-then-dot (counted in implicitarray.Stats). Two NF4 operands are
//     both materialized.
//   - reshape, transpose, broadcast_in_dim: when the last (block) axis is untouched, the packed
//     and absmax components are reshaped/permuted/broadcast directly (exact, still NF4);
//     otherwise materialize → op → re-quantize in the graph (a second rounding, as eformer),
//     keeping block size, sharding and strategy.
//   - concatenate: NF4 arrays of the same block size and dtypes along a leading axis stay NF4
//     (exact); otherwise everything is materialized and the result is dense.
//   - convert_element_type to a float dtype is lazy: a new array that materializes in that
//     dtype (the operand is not modified; eformer mutates it in place).
//   - gather, add, mul, max, div, lt, integer_pow, sqrt, exp, log, conv_general, reduce_sum,
//     reduce_max, reduce_min, reduce_prod: materialize, then the dense op (dense result).
//   - Any other op: implicitarray's generic fallback, which warns once (WarnOnMaterialize).
//
// # Sharding
//
// An Array carries an optional mesh.Sharding as static metadata (IsSharded, Sharding,
// WithSharding, Reshard, WithMeshAndAxis); handlers keep it, moving its entries with the axes of
// a transpose or a broadcast. ComponentSpecs maps it onto packed and absmax (a sharded last axis
// shards the block axis; shards must hold whole blocks), and mesh.Exec places the shards on the
// devices.
//
// # Errors
//
// Quantize returns an error, and writes nothing, for a block size that is not even and
// positive or exceeds MaxBlockSize of the last axis, a rank-0 or empty input, a non-float dtype,
// or NaN/±Inf values (the validation of every quanta format). Graph-side
// functions (QuantizeNode, the handlers) panic with a message naming the op and the shapes;
// QuantizeNode cannot check values (a NaN gives code 0, as eformer). After Delete, using an
// Array is ErrDeleted (an error from Exec, a panic in a graph).
//
// # Graph-side quantization
//
// QuantizeNode reproduces the host bytes exactly (TestQuantizeNodeMatchesHost) except for
// bfloat16 blocks whose absmax is below 2^-100, where the denominator absmax+tiny is not
// rounded to bfloat16.
package nf4
