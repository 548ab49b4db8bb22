// Package int8 stores arrays as int8 codes with per-slice float scales (symmetric, absmax/127),
// as an implicitarray.Array whose products with dense activations never build the dense weight.
//
// The package name shadows Go's builtin int8 type in files that import it: such files alias the
// import, e.g.
//
//	import qint8 "github.com/quanta-ml/quanta/int8"
//
// # Format
//
// An Array stands for a float array x of shape S quantized along a tuple of axes (negative
// allowed; default (-1,)):
//
//   - Scale: shape S with size 1 on the quantized axes, in x's dtype:
//     scale = amax(|x|) over the axes / 127 + tiny(dtype).
//   - Weight: int8 of shape S: q = round-half-to-even(x / scale), clipped to [-128, 127].
//
// The arithmetic is XLA CPU's: bfloat16 and float16 are computed in float32 and rounded (to
// nearest, ties to even) after each operation; float32 and bfloat16 subnormals are flushed to
// zero (a slice with amax below 127·2^-126 gets scale tiny, subnormal inputs get code 0). A
// division by a broadcast operand is a product by the broadcast reciprocal, computed in the dtype
// (float16-rounded for float16, float32 for float32 and bfloat16), and a broadcast that adds no
// element is none: so amax/127 is amax·(1/127) unless the scale has a single element, and
// x/scale is x·(1/scale) unless the scale has as many elements as x. (float64 always uses
// amax·(1/127).) Default axes on a (K, N) weight
// give a (K, 1) scale: one scale per contracting row. Example: the row [1, 2, 3] gets scale
// 3/127 and codes [42, 85, 127]. In bfloat16 and float16 the rounded scale can make |x / scale|
// reach 127.5, which rounds to ±128; the codes are clipped to [-128, 127], never wrapped.
//
// The materialization dtype (Array.DType) is the one given at quantize time (default x's);
// materializing computes q · scale in float32 (float64 for a float64 scale or dtype) and
// converts, so an array whose dtype is its scale's gets q · scale rounded once to that dtype. conformance/README.md lists
// where these bytes are checked against eformer's Array8B.
//
// # Operations
//
//   - Products (implicitarray.DotGeneral, MatMul, Einsum) with a dense operand on either side,
//     any axes: lowering.DotGeneral with the array's strategy (WithStrategy). The scale
//     multiplies the output when it is constant along the contracting axes, the activations when
//     it is constant along the free axes (the default (K, 1) layout), and the decoded codes
//     otherwise; the weight stays int8 in memory.
//   - Transpose (and TransposeAllAxes) and BroadcastInDim: no materialization. A transpose
//     permutes weight and scale and maps each quantized axis through the inverse permutation; a
//     broadcast broadcasts the weight and keeps the scale compact (size 1 on the new axes, which
//     join the quantized axes).
//   - ConvertDType to a float dtype is lazy: an array with another materialization dtype. Its
//     products decode the weight in their compute dtype, whatever that dtype is (package
//     lowering's Numerics).
//   - Gather along leading axes that are not quantized (rows of a table with a scale per row, the
//     default axes): weight and scale are gathered with the same indices, still int8, exact, so an
//     embedding table's lookup decodes only the rows it reads. Otherwise it materializes.
//   - Reshape: materialize, reshape, re-quantize along (-1,) in the array's dtype, keeping the
//     strategy and the sharding of the unchanged leading and trailing axes (a second rounding,
//     counted in implicitarray.Stats.Requantizations and logged once per op).
//
// Every other op reaches implicitarray's generic fallback: the array is materialized and the
// dense op applied, counted in implicitarray.Stats and logged once per op (FallbackWarn).
//
// # Sharding
//
// An Array carries an optional sharding.Sharding as static metadata (WithSharding,
// WithMeshAndAxis, Sharding, IsSharded); the shape ops keep it, moving its entries with the axes.
// ComponentSpecs maps it onto weight and scale (the scale's size-1 axes are replicated), and
// mesh.Exec places the shards on the devices.
//
// # Errors
//
// Host-side functions return errors: Quantize rejects non-float and empty tensors, axes out of
// range or repeated, and NaN or Inf values (no array is built). Graph-building functions
// (QuantizeNode, the handlers) panic with a message naming the op and shapes. After Delete, using
// the array, or any array derived from it without new components, is implicitarray.ErrDeleted.
package int8

//go:generate go run ../internal/qarray/cmd/qarray_methods -pkg int8 -o methods.go
