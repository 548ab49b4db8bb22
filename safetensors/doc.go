// Package safetensors reads and writes the safetensors format of Hugging Face checkpoints: any
// dtype (BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64, and as raw bytes the
// 8-bit floats F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ and the packed sub-byte floats
// F4, F6_E2M3, F6_E3M2, whose tensors must fill whole bytes), read lazily by tensor name into bytes
// or a GoMLX tensor, and written in a deterministic order with a "__metadata__" string map — what
// fp32 checkpoints, LoRA adapters and bitsandbytes-quantized checkpoints (U8 packed weights beside
// F32/F16/BF16 statistics) need.
//
// # Why a reader of our own
//
// github.com/nlpodyssey/safetensors reads only (the adapters and quantized checkpoints of this
// project must also be written) and decodes into its own types. The format is small — an 8-byte
// little-endian header length, a JSON header, the raw data — so one package here does both
// directions with GoMLX tensors and validates every offset against the file size before any
// tensor is read.
//
// # Layout
//
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, offsets
// relative to the data section that follows the header; "__metadata__" holds a string map. Data is
// little-endian, row-major. ReadFloat32 converts F16, BF16 and F64 tensors to float32 as it reads
// them, for loaders whose models compute in float32. Header writes "__metadata__" first with sorted keys, then the tensors
// in the caller's order (which is also the data order), compact JSON padded with spaces to a
// multiple of 8 bytes, as the reference implementation pads it.
//
// # Errors
//
// Open and Read validate the whole header up front, as the reference implementation does: the
// header length within the file (and under MaxHeaderBytes), valid UTF-8 JSON without a lone
// UTF-16 surrogate escape (\ud800 alone; encoding/json would read it as U+FFFD) and with
// "__metadata__" once (a tensor name given twice keeps its last entry, as in the reference), valid
// dtypes, each entry with "dtype", "shape" and "data_offsets" once and not null (other keys
// ignored), each tensor's byte count equal to its shape times its element size, tensors back to
// back from the start of the data section to the end of the file with no gap or overlap. A tensor with a zero dimension has no
// elements whatever its other dimensions (their product need only fit an int64) and may sit at the
// offset where the next tensor starts, as PyTorch writes such tensors and the reference
// implementation reads them. A violation is an error wrapping ErrCorrupt that names the tensor; a
// truncated file fails there, before anything is read, and nothing is allocated in proportion to a
// number of the header before it is checked. Names the file lacks wrap ErrNotFound; 8-bit and
// sub-byte floats asked for as GoMLX tensors, and non-float tensors asked for with ReadFloat32,
// wrap ErrUnsupported. Write and WriteFile check the tensors and the header's size by Read's rules
// before writing anything, so that what they write reads back (names and metadata must be valid
// UTF-8, which JSON would otherwise alter); WriteFile writes through a temporary file synced and
// renamed into place.
package safetensors
