// Package ggml stores arrays in ggml's block types, the formats of llama.cpp's GGUF files (Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0, the K-quants Q2_K to Q6_K, IQ4_NL), as an implicitarray.Array whose
// products with dense activations are built by package lowering: a GGUF tensor keeps its file's
// bytes, values and size in a GoMLX program.
//
// # Using it
//
//	f := gguf.MustOpen(path)
//	w, err := ggml.Read(f, "blk.0.ffn_down.weight")    // the file's Q6_K blocks, as they are
//	linear := implicitarray.MustNewExec(backend, func(x *graph.Node, w *ggml.Array) *graph.Node {
//		return implicitarray.Einsum("mk,nk->mn", x, w).(*graph.Node) // y = x·Wᵀ
//	})
//
// ExampleQuantize runs a product end to end. Quantize stores a float tensor in a block type, as
// llama.cpp's quantize tool would; FromBytes and New build an array from stored blocks.
//
// # Format
//
//   - Blocks along the last axis: every row of the last axis (a multiple of the type's block
//     size: 32, or 256 for the K-quants) is a run of blocks, laid out as ggml-common.h says and
//     package gguf documents. A linear weight is stored as GGUF stores it, N rows of K elements
//     (GGML dims [K, N]), and multiplies as x·Wᵀ.
//   - One component, blocks: uint8 (..., numBlocks, blockBytes) (BlocksShape), byte for byte the
//     file's tensor. Storage: the type's bits per element, e.g. 4.5 for Q4_0 and Q4_K, 6.5625 for
//     Q6_K, 8.5 for Q8_0 (a 4096×4096 Q4_K weight is 9 MiB instead of 64 MiB).
//   - Materialize decodes in the graph to the values of ggml's dequantize_row_* bit for bit (any
//     NaN matches any NaN), in float32, converted to the array's dtype (Array.DType, float32 for
//     arrays read from files, the input's for Quantize; WithDType changes it).
//   - Quantize gives the bytes of ggml's reference quantizers (quantize_row_*_ref, what
//     llama.cpp's quantize tool runs without an importance matrix) bit for bit, through
//     gguf.Quantize on the values as float32.
//
// Both are checked against ggml's own C code and gguf-py (reference/testdata/ggml, made by
// reference/ggml.sh) on edge-case rows and random blocks, on XLA and on the pure-Go backend; the
// decode of the host (gguf.Decode) is checked on every tensor of the SmolLM2 and Gemma-3 files of
// `make assets`, and the graph's on one tensor of each of their types.
//
// # Operations
//
// Products (implicitarray.DotGeneral, MatMul, Einsum) with a dense operand on either side, any
// axes, go to lowering.DotGeneral with the array's strategy (WithStrategy; lowering.Auto by
// default) through the lowering.GGML layout, which hands the raw blocks to the formulations. On
// XLA CPU with quanta's kernels, x·Wᵀ (a linear weight as GGUF stores it, the block axis
// contracted) runs on the GGML kernel, which reads the blocks as they are; for up to 8 rows of
// Q4_K, Q5_K, Q6_K, Q4_1, Q5_0 and Q5_1, and up to 2 rows of Q4_0, it multiplies 8-bit
// activations, as llama.cpp does, so those products differ from the dense product of the
// materialized weight by the activations' rounding (docs/ggml.md has both numerical contracts
// and the kernels' figures; Q8_0, IQ4_NL, Q2_K and Q3_K always take the float route).
// Shape ops that move whole rows of blocks keep the array as it is:
//
//   - Reshape that keeps the last axis, Transpose that keeps it last, BroadcastInDim that maps it
//     unbroadcast to the last output axis, Concatenate of arrays of the same type and dtype along
//     another axis, Gather of whole rows (indices into the leading axes: an embedding lookup, which
//     then decodes the looked-up rows only): the blocks move, exact.
//   - ConvertDType to a float dtype is lazy: an array that materializes in that dtype.
//   - Transpose that moves the last axis is lazy: an implicitarray.Transposed of the array, whose
//     products contract the blocks where they are (MatMul(x, Transpose(w, 0, 1)) of a weight
//     stored as GGUF stores it, (out, in), is DotGeneral(x, [1], w, [1])), sharded or not: the
//     inner array keeps its sharding.
//
// Anything else (a reshape or concatenation through the last axis, element-wise ops,
// reductions) materializes, counted in implicitarray.Stats and logged once per op
// (FallbackWarn): re-quantizing in the graph would change the file's values.
//
// # Sharding
//
// An Array carries an optional sharding.Sharding as static metadata (WithSharding,
// WithMeshAndAxis); the shape handlers keep it, moving its entries with the axes (a concatenation
// keeps those its sharded operands agree on, in any order: sharding.Placement.Concatenated).
// ComponentSpecs maps it onto the blocks: a sharded last axis shards the block axis, whose shards
// must hold whole blocks.
//
// # Errors
//
// Quantize, FromBytes, New and Read return errors and build nothing for a type that is not a
// block type, a non-float or scalar input, a last axis that is not a multiple of the block size,
// a NaN or infinite value, bytes or blocks that do not match the dimensions (every size is checked
// against the bytes given, or the file, before anything is allocated), or a GGUF tensor of another
// type (gguf.ErrUnsupported) or name (gguf.ErrNotFound). Read also refuses a block whose
// half-precision scale is NaN or infinite (an error wrapping gguf.ErrCorrupt, gguf.CheckScales),
// as gguf.DecodeInto does; FromBytes and New take such blocks as given, and they decode as ggml
// decodes them. Graph-side functions (the handlers, the products) panic with a message naming the op and the shapes. After Delete, using the array, or
// any array derived from it without new components, is implicitarray.ErrDeleted.
package ggml

//go:generate go run ../internal/qarray/cmd/qarray_methods -pkg ggml -o methods.go
