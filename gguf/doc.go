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
// Decode handles F32, F16, BF16 and the 32-element block formats Q4_0, Q4_1 and Q8_0 (see
// Decode for their layouts). Other known types (K-quants, Q5_x, integers) can be listed and read
// raw with ReadRaw.
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
// offset; every count and length is bounded by the bytes that remain in the file before anything
// is allocated for it, a tensor's dimensions by the elements the file could hold, every tensor
// must lie inside the data section, aligned and not overlapping another (a tensor without
// elements overlaps nothing, even at the offset where another starts). Versions, byte orders
// and tensor types outside the above wrap ErrUnsupported; a missing key or tensor wraps
// ErrNotFound. Metadata getters report a value of the wrong type with ErrCorrupt.
package gguf
