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
	TypeI8   Type = 24
	TypeI16  Type = 25
	TypeI32  Type = 26
	TypeI64  Type = 27
	TypeF64  Type = 28
	TypeBF16 Type = 30
)

// typeTraits is the storage of one type: elements per block and bytes per block.
type typeTraits struct {
	name       string
	blockSize  int
	blockBytes int
	decodable  bool
}

var traits = map[Type]typeTraits{
	TypeF32:  {"F32", 1, 4, true},
	TypeF16:  {"F16", 1, 2, true},
	TypeQ4_0: {"Q4_0", 32, 18, true},
	TypeQ4_1: {"Q4_1", 32, 20, true},
	TypeQ5_0: {"Q5_0", 32, 22, false},
	TypeQ5_1: {"Q5_1", 32, 24, false},
	TypeQ8_0: {"Q8_0", 32, 34, true},
	TypeQ8_1: {"Q8_1", 32, 36, false},
	TypeQ2_K: {"Q2_K", 256, 84, false},
	TypeQ3_K: {"Q3_K", 256, 110, false},
	TypeQ4_K: {"Q4_K", 256, 144, false},
	TypeQ5_K: {"Q5_K", 256, 176, false},
	TypeQ6_K: {"Q6_K", 256, 210, false},
	TypeQ8_K: {"Q8_K", 256, 292, false},
	TypeI8:   {"I8", 1, 1, false},
	TypeI16:  {"I16", 1, 2, false},
	TypeI32:  {"I32", 1, 4, false},
	TypeI64:  {"I64", 1, 8, false},
	TypeF64:  {"F64", 1, 8, false},
	TypeBF16: {"BF16", 1, 2, true},
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
// Q4_0/Q4_1/Q8_0, 256 for the K-quants), or 0 for an unknown type.
func (t Type) BlockSize() int { return traits[t].blockSize }

// BlockBytes returns the bytes of one block of t, or 0 for an unknown type.
func (t Type) BlockBytes() int { return traits[t].blockBytes }

// CanDecode reports whether Decode converts t to float32: F32, F16, BF16, Q4_0, Q4_1 and Q8_0.
func (t Type) CanDecode() bool { return traits[t].decodable }

// decodableNames lists the decodable types, for error messages.
const decodableNames = "F32, F16, BF16, Q4_0, Q4_1, Q8_0"
