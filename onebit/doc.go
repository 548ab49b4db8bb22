// Package onebit stores binary and ternary weights packed into bytes, as implicit arrays
// (implicitarray.Array) whose products with dense activations never build a dense float weight.
//
// Two types share one API:
//
//   - Array: values in {-1, 0, +1}, 2 bits each, 4 a byte: eformer's Array1B, byte for byte.
//   - BitArray: binary values in {-1, +1}, 1 bit each, 8 a byte: half the memory of Array for
//     binary weights (eformer has no such layout).
//
// Either may keep a float32 scale (eformer keeps none, so its binary/ternary weights lose their
// magnitude): then the array stands for values × scale.
//
// # Making one
//
// On the host, from a *tensors.Tensor:
//
//   - Pack / PackBits: the tensor already holds -1, 0, +1 (eformer's Array1B.quantize).
//   - QuantizeBinary / QuantizeBinaryBits: sign(x), zeros mapped to +1 (eformer's BINARY rule).
//   - QuantizeTernary: eformer's TERNARY rule, threshold t = 0.5·std(x) over all elements
//     (population std, rounded in x's dtype as eformer's XLA computes it: see TernaryThreshold),
//     +1 where x > t, -1 where x < -t, else 0 (ties at ±t go to 0); or, with BitNet(), BitNet
//     b1.58: scale = mean|x|, values = clip(round(x / scale), -1, 1).
//
// As on XLA CPU, float32 and bfloat16 subnormals count as zero for the binary and ternary rules
// (a negative subnormal is binarized to +1).
//
// Options: WithDType (the materialization dtype), WithScale(axes...) (keep scale = mean|x| over
// the axes: WithScale(0) on a (K, N) weight gives one scale per output channel, XNOR-Net /
// BitNet absmean; no axes gives one per tensor), BitNet(). The eformer-compatible behaviour is
// the default: unscaled binary/ternary arrays materialize as int8 -1/0/+1 (eformer's quantize
// does the same); Pack materializes in the input's dtype.
//
// # Layouts
//
// TwoBit (Array), eformer's pack_weights_1bit: value v is stored as the code c = v+1 (-1 → 0,
// 0 → 1, +1 → 2) in 2 bits, 4 codes a byte along the FIRST axis, quarter-strided. With
// R = d0 rows and Q = R/4, the packed array has dimensions (Q, d1, ...) and dtype uint8, and
//
//	packed[p, ...] = c[p, ...] | c[Q+p, ...]<<2 | c[2Q+p, ...]<<4 | c[3Q+p, ...]<<6
//
// so row i sits in packed row i mod Q, bits 2g and 2g+1 with g = i div Q. Worked example, a
// column of 8 values (Q = 2) v = [+1, 0, -1, +1, 0, 0, -1, +1], codes c = [2, 1, 0, 2, 1, 1, 0, 2]:
// byte row 0 holds rows 0, 2, 4, 6 → 2 | 0<<2 | 1<<4 | 0<<6 = 0x12; byte row 1 holds rows
// 1, 3, 5, 7 → 1 | 2<<2 | 1<<4 | 2<<6 = 0x99. All zeros pack to 0x55, all +1 to 0xAA, all -1
// to 0x00. The code 3 is never written; decoding reads it as +2, as eformer does.
//
// OneBit (BitArray): bit 1 for +1, 0 for -1, 8 bits a byte along the first axis,
// eighth-strided: with E = d0/8, packed has dimensions (E, d1, ...) and row i sits in packed row
// i mod E, bit i div E. The same column as above, binary [+1, -1, -1, +1, +1, +1, -1, +1]
// (E = 1): bits 1,0,0,1,1,1,0,1 from bit 0 up → 0xB9.
//
// The first dimension must be a positive multiple of 4 (TwoBit) or 8 (OneBit). The scale, when
// kept, is float32 with the logical rank and dimension 1 on the axes it was reduced over.
//
// # Operations
//
// Inside a graph (implicitarray.Exec or implicitarray.OnGraph), the implicitarray operations
// dispatch to handlers registered here for both types:
//
//   - DotGeneral / MatMul / Einsum with a dense operand on either side, any axes: see
//     MatMulStrategy. By default (Auto) a product with at most FusedMaxRows dense rows reads
//     the packed bytes once in one fused reduction (no weight is decoded to memory; the bytes'
//     bit-plane prefixes are combined with the activations with integer coefficients, exact
//     for integer-valued activations), and larger products decode the codes into the
//     activations' dtype for one dot product. A scale multiplies the result per output
//     channel (or the activations, for a scale along the contracted axes), never the weight.
//     The result has the dense operand's dtype.
//   - Transpose, Reshape, BroadcastInDim: the bytes stay packed without re-packing when the first
//     axis stays first with the same dimension; otherwise the values are decoded, moved and
//     re-packed (exact: they are ternary). If the new first dimension cannot be packed, or a
//     reshape meets a scale that is not a single value, the result is dense.
//   - ConvertDType is lazy: a new array with the new materialization dtype (eformer mutates the
//     array in place; this does not).
//   - Gather returns dense values; Add, Mul, Div, Max, LessThan, ConvGeneral, Exp, Log, Sqrt,
//     IntegerPow, the reductions and Concatenate (of arrays of one type) materialize and run the
//     dense op, as eformer's handlers do. Other ops fall back to implicitarray's generic
//     materialization, with a warning (WarnOnMaterialize).
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
// Both types carry an optional mesh.Sharding as static metadata (IsSharded, Sharding,
// WithSharding, Reshard, WithMeshAndAxis); handlers keep it, moving its entries with the axes of a
// transpose or a broadcast. ComponentSpecs maps it onto the packed bytes and the scale. A sharded
// first axis shards the packed rows, which hold quarter- (eighth-) strided logical rows, not a
// contiguous block: valid for computation, see the mesh package.
//
// # Errors
//
// Host-side functions return errors (with Must variants) that name the offending shape (first
// dimension not a multiple of 4 or 8, an empty shape, a scalar), value and index (a value
// outside {-1, 0, +1} for Pack, where eformer truncates silently; NaN or ±Inf for the quantizers,
// as nf4 and int8 reject them), or option misuse. The host quantizers read the input in place and
// write the packed bytes directly: their scratch memory is the scale, if any. Graph-building functions panic
// with a message naming the op, types and shapes. After Delete, which frees the packed bytes
// (and the scale; eformer's delete touches a scale its type lacks), any use panics with a
// message saying the array was deleted; implicitarray.Exec reports it as an error.
//
// # Benchmarks
//
// See bench_test.go: `go test -run '^$' -bench . ./onebit/`.
package onebit
