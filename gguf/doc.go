// Package gguf reads GGUF files, llama.cpp's model format: the metadata (architecture
// hyper-parameters, tokenizer vocabulary and merges), the tensor directory, and tensor data,
// decoded to float32 one tensor at a time.
//
// # Why a reader of our own
//
// github.com/gpustack/gguf-parser-go parses headers well but is built for estimating memory of
// local and remote models (HTTP range readers, Ollama registries, many dependencies) and does not
// decode tensor data, which is the part a loader needs. The header is a short, fully specified
// format; reading it here keeps the module's dependencies small and lets every length read from
// the file be checked against the bytes that remain before anything is allocated.
//
// # Layout
//
// A file is: the magic "GGUF", a uint32 version (2 or 3 are read; little-endian only), the tensor
// and metadata counts (uint64), the metadata key/value pairs, the tensor directory (name,
// dimensions, GGML type, offset), padding to the alignment ("general.alignment", default 32),
// then the data section. Tensor dimensions are in GGML order, the fastest-varying first: a
// llama.cpp linear weight has Dims [in, out] and is stored as a row-major [out][in] matrix
// (Tensor.Shape gives the row-major shape).
//
// Decode handles F32, F16, BF16 and ggml's block types (BlockTypes); Quantize encodes float32
// values as a block type. Other known types (Q8_1, Q8_K, integers, F64) can be listed and read raw
// with ReadRaw or TensorReader.
//
// # Block types
//
// A block type stores a row of ne0 elements (GGML's first dimension, which must be a multiple of
// the block size) as ne0/blockSize consecutive blocks of BlockBytes bytes; halves (d, m, dmin) are
// little-endian IEEE half precision. The layouts are ggml's (ggml-common.h):
//
//	type    elems bytes  block, in order                                          element
//	Q4_0     32    18    d; 16 B nibbles (element j low, j+16 high)               (q−8)·d
//	Q4_1     32    20    d, m; 16 B nibbles                                       q·d + m
//	Q5_0     32    22    d; 4 B fifth bits (bit j of a uint32); 16 B nibbles      (q−16)·d
//	Q5_1     32    24    d, m; 4 B fifth bits; 16 B nibbles                       q·d + m
//	Q8_0     32    34    d; 32 int8                                               q·d
//	IQ4_NL   32    18    d; 16 B nibbles, codes of a fixed 16-value table         d·table[q]
//	Q2_K    256    84    16 B scale|min nibbles; 64 B 2-bit codes; d, dmin        d·sc·q − dmin·m
//	Q3_K    256   110    32 B high bits; 64 B 2-bit codes; 12 B 6-bit scales; d   d·(sc−32)·(q − 4·!h)
//	Q4_K    256   144    d, dmin; 12 B 6-bit scales and mins; 128 B nibbles       d·sc·q − dmin·m
//	Q5_K    256   176    d, dmin; 12 B scales, mins; 32 B fifth bits; 128 B nibbles  d·sc·q − dmin·m
//	Q6_K    256   210    128 B low nibbles; 64 B high bit pairs; 16 int8 scales; d  d·sc·(q−32)
//
// The K-quants group their 256 elements into sub-blocks of 16 (Q2_K, Q3_K, Q6_K) or 32 (Q4_K,
// Q5_K) sharing a scale; the decoders (blocks.go) spell out where each element's bits lie.
//
// Both directions are bit-identical to ggml (reference/testdata/ggml, made by reference/ggml.sh
// from ggml's C code and gguf-py, checked in this package's tests): Decode gives the values of
// ggml's dequantize_row_* (and of gguf-py's dequantize, which agrees; any NaN matches any NaN),
// Quantize the bytes of ggml's quantize_row_*_ref, which llama.cpp's quantize tool runs without an
// importance matrix (gguf-py quantizes only the 32-element types, and differs from ggml in the sign
// of a zero scale). Every tensor of the SmolLM2 Q4_1 and Gemma-3 Q4_K_M files of `make assets`
// decodes to gguf-py's values. The quantizers repeat ggml's float32 operations in ggml's order,
// rounding every product that meets an addition explicitly, so that no Go compiler fuses them
// into a multiply-add (which the reference build, for baseline x86-64, does not have).
//
// # Memory
//
// Open reads only the header and directory (a few MB for a 49k-token vocabulary). DecodeInto
// streams one tensor through a 1 MiB buffer into a caller-provided slice, so a loader can decode a
// tensor straight into its final storage, convert or quantize it, and drop it before the next.
//
// # Errors
//
// Open and Read validate the whole header before returning: a truncated or corrupt file is
// rejected up front with an error wrapping ErrCorrupt that says what was being read and at which
// offset; every count and length is bounded by the bytes that remain in the file (and, for Read,
// by what its reader holds: see Read) before anything is allocated for it, a tensor's dimensions
// by the elements the file could hold, every tensor must lie inside the data section, aligned and
// not overlapping another (a tensor without elements overlaps nothing, even at the offset where
// another starts). Versions, byte orders and tensor types outside the above wrap ErrUnsupported;
// a missing key or tensor wraps ErrNotFound. Metadata getters report a value of the wrong type
// with ErrCorrupt, and so do DecodeInto and ReadFloat32 a block whose half-precision scale is NaN
// or infinite (CheckScales checks raw blocks the same way) and an F32, F16 or BF16 value that is
// NaN or infinite, as llama.cpp's ggml_validate_row_data does (Decode decodes them as ggml does).
package gguf
