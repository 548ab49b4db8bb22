// Package int8 implements eformer's Array8B: per-axis symmetric 8-bit quantization of float
// arrays, as an implicitarray.Array, with a weight-only int8 matmul that never builds the dense
// weight.
//
// The package name shadows Go's builtin int8 type in files that import it: such files alias the
// import, e.g.
//
//	import qint8 "github.com/quanta-ml/quanta/int8"
//
// # Format (byte compatible with eformer)
//
// An Array stands for a float array x of shape S quantized along a tuple of axes (negative
// allowed; default (-1,)):
//
//   - Scale: shape S with size 1 on the quantized axes, in x's dtype:
//     scale = amax(|x|) over the axes / 127 + Tiny(dtype).
//   - Weight: int8 of shape S: q = round-half-to-even(x / scale).
//
// The arithmetic is XLA CPU's, as eformer's vectors show (the committed ones and the randomized
// differential runs of conformance/): bfloat16 and float16 are computed in float32 and rounded (to
// nearest, ties to even) after each operation; float32 and bfloat16 subnormals are flushed to
// zero (a slice with amax below 127·2^-126 gets scale tiny, subnormal inputs get code 0). XLA
// rewrites a division by a broadcast operand as a product by the broadcast reciprocal, computed
// in the dtype (float16-rounded for float16, float32 for float32 and bfloat16), and a broadcast
// that adds no element is none: so amax/127 is amax·(1/127) unless the scale has a single
// element, and x/scale is x·(1/scale) unless the scale has as many elements as x. (float64,
// which eformer does not produce, always uses amax·(1/127).) Default axes on a (K, N) weight give
// a (K, 1) scale: one scale per contracting row. Example: the row [1, 2, 3] gets scale 3/127 and
// codes [42, 85, 127].
//
// The materialization dtype (Array.DType) is the one given at quantize time (default x's);
// materializing computes q · scale in the scale's dtype (eformer's type promotion) and converts.
//
// Saturation: |x / scale| never exceeds 127 in float32 and float64, but in bfloat16 and float16 the
// rounded scale can make it reach 127.5, which rounds to ±128. eformer converts with XLA's
// float-to-int convert, which saturates to [-128, 127]; quanta clips to the same range, so the
// codes are eformer's byte for byte and never wrap around (+128 becomes 127, -128 stays).
//
// # Operations
//
// The handlers registered in init follow eformer's table:
//
//   - dot_general with one dense operand (either side): the weight-only product of DotGeneral,
//     which honours the dimension numbers (eformer's fast path ignores them) and picks a Lowering:
//     the scale multiplies the product afterwards when it is shared along the contracting axes,
//     the activations before when it is shared along the free axes (the default (K, 1) layout),
//     and the int8 weight is converted inside the product's operand (see Lowering: for a few
//     activation rows a fused multiply-reduce, or the product over slabs of the weight, since XLA
//     CPU does not fuse a convert into a dot). It accumulates in float32
//     (float64 for float64 activations) and returns the activations' dtype. Two int8 operands are
//     materialized.
//   - transpose and broadcast_in_dim: no materialization. Transpose permutes weight and scale and
//     maps each quantized axis through the inverse permutation (eformer uses the forward one, wrong
//     for 3-cycles). Broadcast broadcasts the weight and keeps the scale compact (size 1 on the new
//     axes, which join the quantized axes).
//   - convert_element_type to a float dtype: lazy, a new Array with another materialization dtype
//     (eformer mutates the array in place; an Array never changes).
//   - reshape: materialize, reshape, re-quantize along (-1,) in the array's dtype, keeping the
//     sharding.
//   - add, mul, div, max, lt, exp, log, sqrt, integer_pow, reductions, conv_general, gather and an
//     all-int8 concatenate: materialize, then the dense op (dense result). Other ops reach the
//     generic fallback, which warns once per op (WarnOnMaterialize).
//
// # Sharding
//
// An Array carries an optional mesh.Sharding as static metadata (IsSharded, Sharding,
// WithSharding, Reshard, WithMeshAndAxis); handlers keep it, moving its entries with the axes of
// a transpose or a broadcast. ComponentSpecs maps it onto weight and scale (the scale's size-1
// axes are replicated), and mesh.Exec places the shards on the devices.
//
// # Errors
//
// Host-side functions return errors: Quantize rejects non-float and empty tensors, axes out of
// range (eformer wraps them modulo the rank) or repeated, and NaN or Inf values (no array is
// built). Graph-building functions
// (QuantizeNode, DotGeneral, the handlers) panic with a message naming the op and shapes. Using an
// Array after Delete fails with ErrDeleted.
package int8
