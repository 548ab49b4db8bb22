package gguf

import "fmt"

// Type is a GGML tensor type: how a tensor's elements are stored (float formats, and the block
// quantizations of llama.cpp).
type Type uint32

// The GGML tensor types whose storage this package knows (ggml.h's ggml_type). Types missing here
// (removed or newer ones) make Open fail with ErrUnsupported, since their size is unknown.
const (
	TypeF32  Type = 0
	TypeF16  Type = 1
	TypeQ4_0 Type = 2
	TypeQ4_1 Type = 3
	TypeQ5_0 Type = 6
	TypeQ5_1 Type = 7
	TypeQ8_0 Type = 8
	TypeQ8_1 Type = 9
	TypeQ2_K Type = 10
	TypeQ3_K Type = 11
	TypeQ4_K Type = 12
	TypeQ5_K Type = 13
	TypeQ6_K Type = 14
	TypeQ8_K Type = 15
	// TypeIQ4_NL is ggml's non-linear 4-bit type: blocks of 32 codes of a fixed 16-value table.
	TypeIQ4_NL Type = 20
	TypeI8     Type = 24
	TypeI16    Type = 25
	TypeI32    Type = 26
	TypeI64    Type = 27
	TypeF64    Type = 28
	TypeBF16   Type = 30
)

// typeTraits is the storage of one type: elements per block and bytes per block, and its codec:
// decodeBlock decodes one block (nil: Decode does not handle the type, or handles it apart: the
// plain float types); quantize encodes whole blocks (nil: Quantize does not handle the type).
type typeTraits struct {
	name        string
	blockSize   int
	blockBytes  int
	decodeBlock func(blk []byte, out []float32)
	quantize    func(src []float32, dst []byte)
	// scales are the byte offsets in a block of its half-precision scales (d, and m or dmin where
	// the type has one), as ggml-common.h lays them out; CheckScales reads them.
	scales []int
}

// traits is the table of types, one row each (read-only).
var traits = map[Type]typeTraits{
	TypeF32:    {name: "F32", blockSize: 1, blockBytes: 4},
	TypeF16:    {name: "F16", blockSize: 1, blockBytes: 2},
	TypeQ4_0:   {"Q4_0", 32, 18, decodeQ4_0, quantizeQ4_0, []int{0}},
	TypeQ4_1:   {"Q4_1", 32, 20, decodeQ4_1, quantizeQ4_1, []int{0, 2}},
	TypeQ5_0:   {"Q5_0", 32, 22, decodeQ5_0, quantizeQ5_0, []int{0}},
	TypeQ5_1:   {"Q5_1", 32, 24, decodeQ5_1, quantizeQ5_1, []int{0, 2}},
	TypeQ8_0:   {"Q8_0", 32, 34, decodeQ8_0, quantizeQ8_0, []int{0}},
	TypeQ8_1:   {name: "Q8_1", blockSize: 32, blockBytes: 36},
	TypeQ2_K:   {"Q2_K", 256, 84, decodeQ2_K, quantizeQ2_K, []int{80, 82}},
	TypeQ3_K:   {"Q3_K", 256, 110, decodeQ3_K, quantizeQ3_K, []int{108}},
	TypeQ4_K:   {"Q4_K", 256, 144, decodeQ4_K, quantizeQ4_K, []int{0, 2}},
	TypeQ5_K:   {"Q5_K", 256, 176, decodeQ5_K, quantizeQ5_K, []int{0, 2}},
	TypeQ6_K:   {"Q6_K", 256, 210, decodeQ6_K, quantizeQ6_K, []int{208}},
	TypeQ8_K:   {name: "Q8_K", blockSize: 256, blockBytes: 292},
	TypeIQ4_NL: {"IQ4_NL", 32, 18, decodeIQ4_NL, quantizeIQ4_NL, []int{0}},
	TypeI8:     {name: "I8", blockSize: 1, blockBytes: 1},
	TypeI16:    {name: "I16", blockSize: 1, blockBytes: 2},
	TypeI32:    {name: "I32", blockSize: 1, blockBytes: 4},
	TypeI64:    {name: "I64", blockSize: 1, blockBytes: 8},
	TypeF64:    {name: "F64", blockSize: 1, blockBytes: 8},
	TypeBF16:   {name: "BF16", blockSize: 1, blockBytes: 2},
}

// String returns the GGML name of the type ("Q4_1"), or "type(N)" for an unknown one.
func (t Type) String() string {
	if tr, ok := traits[t]; ok {
		return tr.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// Known reports whether the storage size of t is known to this package.
func (t Type) Known() bool {
	_, ok := traits[t]
	return ok
}

// BlockSize returns the number of elements of one block of t (1 for the plain types, 32 for
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL, 256 for the K-quants), or 0 for an unknown type.
func (t Type) BlockSize() int { return traits[t].blockSize }

// BlockBytes returns the bytes of one block of t, or 0 for an unknown type.
func (t Type) BlockBytes() int { return traits[t].blockBytes }

// CanDecode reports whether Decode converts t to float32: F32, F16, BF16 and the block types
// (BlockTypes).
func (t Type) CanDecode() bool {
	return t == TypeF32 || t == TypeF16 || t == TypeBF16 || traits[t].decodeBlock != nil
}

// IsBlock reports whether t is one of the block types Decode and Quantize handle (BlockTypes).
func (t Type) IsBlock() bool { return traits[t].quantize != nil }

// BlockTypes lists the block types Decode and Quantize handle, in ggml's type order: Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL.
func BlockTypes() []Type {
	return []Type{TypeQ4_0, TypeQ4_1, TypeQ5_0, TypeQ5_1, TypeQ8_0, TypeQ2_K, TypeQ3_K, TypeQ4_K, TypeQ5_K, TypeQ6_K,
		TypeIQ4_NL}
}

// decodableNames lists the decodable types, for error messages.
const decodableNames = "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL"

// blockNames lists the block types, for error messages.
const blockNames = "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL"
