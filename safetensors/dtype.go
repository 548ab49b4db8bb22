package safetensors

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/fileio"
)

// DType is a safetensors element type, as named in the header ("F32", "BF16", "U8", ...).
type DType string

// The safetensors element types.
const (
	Bool   DType = "BOOL"
	U8     DType = "U8"
	I8     DType = "I8"
	F8E5M2 DType = "F8_E5M2"
	F8E4M3 DType = "F8_E4M3"
	I16    DType = "I16"
	U16    DType = "U16"
	F16    DType = "F16"
	BF16   DType = "BF16"
	I32    DType = "I32"
	U32    DType = "U32"
	F32    DType = "F32"
	F64    DType = "F64"
	I64    DType = "I64"
	U64    DType = "U64"
)

// The element types the reference implementation added in version 0.6. F4 and F6 are sub-byte
// floats, packed: a tensor of them must fill whole bytes.
const (
	F4     DType = "F4"
	F6E2M3 DType = "F6_E2M3"
	F6E3M2 DType = "F6_E3M2"
	// F8E8M0 is the 8-bit power-of-two scale of the OCP microscaling formats (MXFP4, MXFP8).
	F8E8M0     DType = "F8_E8M0"
	F8E4M3FNUZ DType = "F8_E4M3FNUZ"
	F8E5M2FNUZ DType = "F8_E5M2FNUZ"
	// C64 is a complex number of two F32, real part first (GoMLX's Complex64).
	C64 DType = "C64"
)

// dtypeInfo is the element size of each type and the GoMLX dtype that holds it (InvalidDType if
// none does).
var dtypeInfo = map[DType]struct {
	size  int
	gomlx dtypes.DType
}{
	Bool: {1, dtypes.Bool}, U8: {1, dtypes.Uint8}, I8: {1, dtypes.Int8},
	F8E5M2: {1, dtypes.InvalidDType}, F8E4M3: {1, dtypes.InvalidDType}, F8E8M0: {1, dtypes.InvalidDType},
	F8E4M3FNUZ: {1, dtypes.InvalidDType}, F8E5M2FNUZ: {1, dtypes.InvalidDType},
	F4: {0, dtypes.InvalidDType}, F6E2M3: {0, dtypes.InvalidDType}, F6E3M2: {0, dtypes.InvalidDType},
	I16: {2, dtypes.Int16}, U16: {2, dtypes.Uint16}, F16: {2, dtypes.Float16}, BF16: {2, dtypes.BFloat16},
	I32: {4, dtypes.Int32}, U32: {4, dtypes.Uint32}, F32: {4, dtypes.Float32}, C64: {8, dtypes.Complex64},
	F64: {8, dtypes.Float64}, I64: {8, dtypes.Int64}, U64: {8, dtypes.Uint64},
}

// subByteBits are the bits of one element of the sub-byte types.
var subByteBits = map[DType]int{F4: 4, F6E2M3: 6, F6E3M2: 6}

const acceptedDTypes = "BOOL, F4, F6_E2M3, F6_E3M2, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ, I16, " +
	"U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64"

// Valid reports whether d is one of the safetensors types above.
func (d DType) Valid() bool {
	_, ok := dtypeInfo[d]
	return ok
}

// Size returns the bytes of one element of d, or 0 if d is not valid or is a sub-byte type (F4,
// F6: see Bits).
func (d DType) Size() int { return dtypeInfo[d].size }

// Bits returns the bits of one element of d (4 for F4, 6 for F6, 8·Size otherwise).
func (d DType) Bits() int {
	if b, ok := subByteBits[d]; ok {
		return b
	}
	return 8 * d.Size()
}

// tensorBytes returns the bytes of the data of a tensor of d and the given shape: false when the
// shape has a negative dimension, its elements' bits overflow an int64, or (sub-byte types)
// they do not fill whole bytes, as the reference implementation requires.
func tensorBytes[T int | int64](d DType, shape []T) (uint64, bool) {
	bits := uint64(d.Bits())
	elements, ok := fileio.Elements(shape, math.MaxInt64/bits)
	if !ok || elements*bits%8 != 0 {
		return 0, false
	}
	return elements * bits / 8, true
}

// GoMLX returns the GoMLX dtype of d; false for the 8-bit and sub-byte float types, which GoMLX
// tensors do not hold, and for invalid types.
func (d DType) GoMLX() (dtypes.DType, bool) {
	g := dtypeInfo[d].gomlx
	return g, g != dtypes.InvalidDType
}

// fromGoMLX returns the safetensors type of a GoMLX dtype.
func fromGoMLX(dtype dtypes.DType) (DType, error) {
	for d, info := range dtypeInfo {
		if info.gomlx == dtype && dtype != dtypes.InvalidDType {
			return d, nil
		}
	}
	return "", errors.Wrapf(ErrUnsupported, "safetensors: GoMLX dtype %s has no safetensors type; accepted: "+
		"Bool, Uint8, Int8, Int16, Uint16, Float16, BFloat16, Int32, Uint32, Float32, Complex64, Float64, Int64, Uint64",
		dtype)
}
