// Package nf4 stores arrays as 4-bit NormalFloat (NF4) codes, the format of QLoRA: an
// implicitarray.Array whose products with dense activations never build a dense float weight.
//
// # Using it
//
//	w := nf4.MustQuantize(weights, nf4.DefaultBlockSize)   // host side, pure Go, parallel
//	exec := implicitarray.MustNewExec(backend, func(x *graph.Node, w *nf4.Array) *graph.Node {
//		return implicitarray.Materialize(implicitarray.MatMul(x, w)) // fused: no dense weight
//	})
//	y := exec.MustCall1(x, w)
//
// ExampleQuantize runs it end to end. Inside a graph, QuantizeNode quantizes a node (for
// re-quantizing and for quantization-aware training).
//
// # Format
//
//   - Codebook: the 16 NF4 values (Codebook); code 7 is 0, codes 0 and 15 are ∓1.
//   - Blocks of BlockSize elements along the last axis, zero-padded internally to a multiple of
//     the block size (padding encodes as code 7); the array's logical Shape is always the input's,
//     and Materialize drops the padding.
//   - absmax per block, in the input's dtype; code = argmin_i |x/(absmax+tiny) − codebook[i]|,
//     ties to the lower index, where tiny is the smallest normal number of the dtype (float32 and
//     bfloat16 2^-126, float16 2^-14, float64 2^-1022). The arithmetic is XLA CPU's: the division
//     is a product by the reciprocal of absmax+tiny (float32 for float32 and bfloat16,
//     float16-rounded for float16); bfloat16 and float16 operations are done in float32 and
//     rounded to nearest even to the dtype; float32 and bfloat16 subnormals are zero (a block of
//     them has absmax 0); distances are float32 (float64 for float64 inputs). A block whose
//     absmax exceeds 2^126 is encoded with 4/(absmax+tiny) applied to x/4, where the reciprocal
//     itself would flush to zero.
//   - Components, in order: packed uint8 (..., numBlocks, blockSize/2), two codes per byte, the
//     even element in the high nibble (codes [3, 12] → 0x3C; a zero block is 0x77); absmax
//     (..., numBlocks).
//   - Materialize decodes with the exact codebook: value = codebook[code] × absmax, computed in
//     float32 (float64 for a float64 absmax or dtype) and converted to the array's dtype.
//   - Storage: 0.5 byte per element plus one absmax per block: 4.5 bits per parameter with
//     float32 absmax and blocks of 64 (9 MiB instead of 64 MiB for 4096×4096).
//
// conformance/README.md lists where these bytes and values are checked against eformer's ArrayNF4.
//
// # Double quantization and flattened blocks (Format)
//
// Two storage variants exist for QLoRA and bitsandbytes (Format, FromTensors):
//
//   - DoubleQuant (DoubleQuantize, DoubleQuantizeNode, quanta.Config.DoubleQuant): the absmax are
//     quantized again as bitsandbytes does with compress_statistics=True. Components: packed;
//     uint8 codes (..., numBlocks) of DynamicMap (the 8-bit dynamic map); a float32 second-level
//     absmax per NestedBlockSize (256) codes of the flattened codes, across rows; a float32
//     scalar offset, the mean of the absmax, subtracted before and added after. Decoded absmax =
//     DynamicMap[code] × nested absmax + offset (float32, two roundings), then value = code
//     value × absmax as above. Storage: about 0.516 bytes per parameter with blocks of 64.
//     DoubleQuantize gives bitsandbytes' bytes given the same absmax: its offset is torch's
//     float32 mean on one thread, its codes bitsandbytes' 65536-bin lookup (a centred absmax of
//     exactly 0 takes the code of 2.125e-5, not of 0, as in bitsandbytes).
//   - FlatBlocks: the blocks run over the flattened array (row-major), across rows, as
//     bitsandbytes blocks a [out, in] weight whose in is not a multiple of the block size:
//     packed (numBlocks, blockSize/2), absmax (numBlocks). Its products decode the weight
//     (lowering.FlatBlockwise4). Package bnb reads and writes both.
//
// A DoubleQuant or FlatBlocks array keeps fewer shape ops exact: a reshape that keeps the last
// axis (any reshape with FlatBlocks); a broadcast re-quantizes (blocks along the last axis,
// double-quantized again if it was), a transpose is lazy as below, and a concatenation
// materializes. They cannot be
// sharded (their scales run across rows): ComponentSpecs accepts only a replicated spec, and
// DoubleQuantize and DoubleQuantizeNode keep the array's mesh with a replicated spec.
//
// # Operations
//
// Products (implicitarray.DotGeneral, MatMul, Einsum) with a dense operand on either side, any
// axes, go to lowering.DotGeneral with the array's strategy (WithStrategy; lowering.Auto by
// default). Shape ops keep the format where they can:
//
//   - Reshape, Transpose (and TransposeAllAxes), BroadcastInDim: when the last (block) axis is
//     untouched, the packed and absmax components move as they are (exact, still NF4).
//   - A Transpose that moves the block axis is lazy: an implicitarray.Transposed of the array,
//     whose products contract the blocks where they are (MatMul(x, Transpose(w, 0, 1)) of a
//     weight stored (out, in) is DotGeneral(x, [1], w, [1])); a sharded array too, the inner
//     array keeping its sharding.
//   - Otherwise (a reshape or broadcast that moves the block axis) the array is materialized, the
//     op applied and the result re-quantized in the graph (a second rounding, counted in
//     implicitarray.Stats.Requantizations and logged once per op), keeping the block size and the
//     strategy.
//   - Concatenate: NF4 arrays of the same block size and dtypes along a leading axis stay NF4;
//     otherwise the generic fallback below materializes them.
//   - ConvertDType to a float dtype is lazy: an array that materializes in that dtype (WithDType).
//     Its products decode the weight in their compute dtype, whatever that dtype is (package
//     lowering's Numerics).
//   - Gather of whole rows (indices that index leading axes, never the last) gathers the packed
//     and absmax rows: still NF4, exact, so an embedding table's lookup decodes only the rows it
//     reads. Gathering single elements materializes.
//
// Every other op reaches implicitarray's generic fallback: the array is materialized and the
// dense op applied, counted in implicitarray.Stats and logged once per op (FallbackWarn).
//
// # Sharding
//
// An Array carries an optional sharding.Sharding as static metadata (WithSharding,
// WithMeshAndAxis, Sharding, IsSharded); the shape ops keep it, moving its entries with the axes
// (a concatenation keeps those its sharded operands agree on, in any order:
// sharding.Placement.Concatenated). ComponentSpecs maps it onto packed and absmax (a sharded
// last axis shards the block axis; shards must hold whole blocks), and mesh.Exec places the
// shards on the devices.
//
// # Errors
//
// Quantize returns an error, and builds nothing, for a block size that is not even and positive
// or exceeds MaxBlockSize of the last axis, a rank-0 or empty input, a non-float dtype, or NaN/±Inf
// values (the validation of every quanta format). FromTensors applies Format.Validate: the same
// bound along the last axis; for FlatBlocks, up to MaxFlatBlockSize (bitsandbytes' largest) for any
// size, or MaxBlockSize of the size. ComponentShapes sizes components by the block size: a block
// size read from a file is checked with Format.Validate first. Graph-side
// functions (QuantizeNode, the handlers) panic with a message naming the op and the shapes;
// QuantizeNode cannot check values (a NaN gives code 0). After Delete, using the array, or any
// array derived from it without new components, is implicitarray.ErrDeleted (an error from
// Exec, a panic in a graph).
//
// QuantizeNode gives the host's bytes exactly (TestQuantizeNodeMatchesHost) except for bfloat16
// blocks whose absmax is below 2^-100, where the denominator absmax+tiny is not rounded to
// bfloat16.
package nf4

//go:generate go run ../internal/qarray/cmd/qarray_methods -pkg nf4 -o methods.go
