package safetensors

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/pkg/errors"
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

// dtypeInfo is the element size of each type and the GoMLX dtype that holds it (InvalidDType if
// none does).
var dtypeInfo = map[DType]struct {
	size  int
	gomlx dtypes.DType
}{
	Bool: {1, dtypes.Bool}, U8: {1, dtypes.Uint8}, I8: {1, dtypes.Int8},
	F8E5M2: {1, dtypes.InvalidDType}, F8E4M3: {1, dtypes.InvalidDType},
	I16: {2, dtypes.Int16}, U16: {2, dtypes.Uint16}, F16: {2, dtypes.Float16}, BF16: {2, dtypes.BFloat16},
	I32: {4, dtypes.Int32}, U32: {4, dtypes.Uint32}, F32: {4, dtypes.Float32},
	F64: {8, dtypes.Float64}, I64: {8, dtypes.Int64}, U64: {8, dtypes.Uint64},
}

const acceptedDTypes = "BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64"

// Valid reports whether d is one of the safetensors types above.
func (d DType) Valid() bool {
	_, ok := dtypeInfo[d]
	return ok
}

// Size returns the bytes of one element of d, or 0 if d is not valid.
func (d DType) Size() int { return dtypeInfo[d].size }

// GoMLX returns the GoMLX dtype of d; false for the 8-bit float types, which GoMLX tensors do
// not hold, and for invalid types.
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
		"Bool, Uint8, Int8, Int16, Uint16, Float16, BFloat16, Int32, Uint32, Float32, Float64, Int64, Uint64", dtype)
}
