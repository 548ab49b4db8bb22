// Package onebit stores binary and ternary weights packed into bytes, as implicit arrays
// (implicitarray.Array) whose products with dense activations never build a dense float weight.
//
// Two types share one API:
//
//   - Array: values in {-1, 0, +1}, 2 bits each, 4 a byte (TwoBit).
//   - BitArray: binary values in {-1, +1}, 1 bit each, 8 a byte (OneBit): half the memory of
//     Array for binary weights.
//
// Either may keep a float32 scale, and then stands for values × scale.
//
// # Making one
//
// On the host, from a *tensors.Tensor:
//
//   - Pack / PackBits: the tensor already holds -1, 0, +1.
//   - QuantizeBinary / QuantizeBinaryBits: sign(x), zeros mapped to +1.
//   - QuantizeTernary: threshold t = 0.5·std(x) over all elements (population std, rounded in
//     x's dtype as XLA computes it: see TernaryThreshold), +1 where x > t, -1 where x < -t, else
//     0 (ties at ±t go to 0); or, with Options.BitNet, BitNet b1.58: scale = mean|x|, values =
//     clip(round(x / scale), -1, 1).
//
// As on XLA CPU, float32 and bfloat16 subnormals count as zero for the binary and ternary rules
// (a negative subnormal is binarized to +1).
//
// Options (nil for the defaults): DType (the materialization dtype), Scale with ScaleAxes (keep
// scale = mean|x| over the axes: ScaleAxes {0} on a (K, N) weight gives one scale per output
// channel, XNOR-Net / BitNet absmean; no axes gives one per tensor), BitNet. Without a scale,
// QuantizeBinary and QuantizeTernary arrays materialize as int8 -1/0/+1 unless DType says otherwise: a dense
// float product with the materialized int8 values fails on a dtype mismatch (convert them first),
// while implicitarray.MatMul multiplies the array with float activations directly. Pack
// materializes in the input's dtype.
//
// # Packings
//
// TwoBit (Array): value v is stored as the code c = v+1 (-1 → 0, 0 → 1, +1 → 2) in 2 bits, 4
// codes a byte along the FIRST axis, quarter-strided. With R = d0 rows and Q = R/4, the packed
// array has dimensions (Q, d1, ...) and dtype uint8, and
//
//	packed[p, ...] = c[p, ...] | c[Q+p, ...]<<2 | c[2Q+p, ...]<<4 | c[3Q+p, ...]<<6
//
// so row i sits in packed row i mod Q, bits 2g and 2g+1 with g = i div Q. Worked example, a
// column of 8 values (Q = 2) v = [+1, 0, -1, +1, 0, 0, -1, +1], codes c = [2, 1, 0, 2, 1, 1, 0, 2]:
// byte row 0 holds rows 0, 2, 4, 6 → 2 | 0<<2 | 1<<4 | 0<<6 = 0x12; byte row 1 holds rows
// 1, 3, 5, 7 → 1 | 2<<2 | 1<<4 | 2<<6 = 0x99. All zeros pack to 0x55, all +1 to 0xAA, all -1
// to 0x00. The code 3 is never written; decoding reads it as +2.
//
// OneBit (BitArray): bit 1 for +1, 0 for -1, 8 bits a byte along the first axis,
// eighth-strided: with E = d0/8, packed has dimensions (E, d1, ...) and row i sits in packed row
// i mod E, bit i div E. The same column as above, binary [+1, -1, -1, +1, +1, +1, -1, +1]
// (E = 1): bits 1,0,0,1,1,1,0,1 from bit 0 up → 0xB9.
//
// The first dimension must be a positive multiple of 4 (TwoBit) or 8 (OneBit). The scale, when
// kept, is float32 with the logical rank and dimension 1 on the axes it was reduced over.
// conformance/README.md lists where the TwoBit bytes are checked against eformer's Array1B.
//
// # Operations
//
// Inside a graph (implicitarray.Exec or implicitarray.OnGraph):
//
//   - Products (implicitarray.DotGeneral, MatMul, Einsum) with a dense operand on either side,
//     any axes: lowering.DotGeneral with the array's strategy (WithStrategy). A scale multiplies
//     the result (per output channel) or the activations (for a scale along the contracted axes),
//     never the decoded weight when either placement fits. The result has the dense operand's
//     dtype; an unscaled array also multiplies integer activations.
//   - Transpose, Reshape, BroadcastInDim: the bytes stay packed without re-packing when the first
//     axis stays first with the same dimension; otherwise the values are decoded, moved and
//     re-packed (exact: they are ternary). If the new first dimension cannot be packed, or a
//     reshape meets a scale that is not a single value, the generic fallback below materializes.
//   - ConvertDType is lazy: a new array with the new materialization dtype (WithDType). A dtype
//     the array cannot materialize in, and an unsigned dtype for an array that materializes in a
//     float dtype, go to the generic fallback.
//
// Every other op reaches implicitarray's generic fallback: the array is materialized and the
// dense op applied, counted in implicitarray.Stats and logged once per op (FallbackWarn).
//
// # Quantizing inside a graph
//
// QuantizeBinaryNode and QuantizeTernaryNode apply the same rules to a node (statistics in
// float32); FakeQuantizeBinary and FakeQuantizeTernary return the materialized values directly,
// without packing and so without the first-dimension constraint: the forward value of
// quanta.StraightThrough.
//
// # Sharding
//
// Both types carry an optional sharding.Sharding as static metadata (WithSharding,
// WithMeshAndAxis, Sharding, IsSharded); the shape ops keep it, moving its entries with the axes,
// except that an axis a transpose brings to the front is replicated when the new packed rows do not
// split into its shards, or when the sharding is a spec alone (no mesh, so no number of shards).
// ComponentSpecs maps it onto the packed bytes and the scale. A sharded first axis shards the
// packed rows, which hold strided logical rows, not a contiguous block (ShardRows): valid for
// computation, see package sharding.
//
// # Errors
//
// Host-side functions return errors (with Must variants) that name the offending shape (first
// dimension not a multiple of 4 or 8, an empty shape, a scalar), value and index (a value outside
// {-1, 0, +1} for Pack; NaN or ±Inf for the quantizers, the validation of every quanta format),
// or option misuse. The host quantizers read the input in place and write the packed bytes
// directly: their scratch memory is the scale, if any. Graph-building functions panic with a message naming the op, types
// and shapes. After Delete, which frees the packed bytes and the scale, using the array, or any
// array derived from it without new components, is implicitarray.ErrDeleted.
package onebit

//go:generate go run ../internal/qarray/cmd/qarray_methods -pkg onebit -o methods.go
