package onebit

import (
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/hostdata"
)

// Packing says how values are stored in the packed bytes.
type Packing int

const (
	// TwoBit stores each value v in {-1, 0, +1} as the 2-bit code v+1, four codes a byte along the
	// first axis, quarter-strided: eformer's Array1B layout (see the package documentation).
	TwoBit Packing = iota
	// OneBit stores each binary value in {-1, +1} as one bit (1 for +1), eight a byte along the
	// first axis, eighth-strided.
	OneBit
)

// String returns "2bit" or "1bit".
func (l Packing) String() string {
	if l == OneBit {
		return "1bit"
	}
	return "2bit"
}

// ValuesPerByte is the number of values one byte holds: 4 for TwoBit, 8 for OneBit. The first
// dimension of a packed array must be a multiple of it.
func (l Packing) ValuesPerByte() int {
	if l == OneBit {
		return 8
	}
	return 4
}

// bitsPerValue is 2 or 1.
func (l Packing) bitsPerValue() int { return 8 / l.ValuesPerByte() }

// radix is the factor between consecutive groups in a byte: 4 (2 bits) or 2 (1 bit).
func (l Packing) radix() int { return 1 << l.bitsPerValue() }

// checkPackable returns an error naming the shape if dims cannot be packed in layout l: a
// scalar, an empty shape, a first dimension that is not a multiple of the values per byte.
func (l Packing) checkPackable(what string, dims []int) error {
	if len(dims) == 0 {
		return errors.Errorf("%s: cannot pack a scalar; accepted: rank >= 1 with the first dimension a multiple of %d",
			what, l.ValuesPerByte())
	}
	if slices.Contains(dims, 0) {
		return errors.Errorf("%s: shape %v is empty; accepted: every dimension >= 1, the first a multiple of %d",
			what, dims, l.ValuesPerByte())
	}
	if dims[0]%l.ValuesPerByte() != 0 {
		return errors.Errorf("%s: first dimension of shape %v is %d, not a positive multiple of %d (the %s layout packs %d values a byte along the first axis)",
			what, dims, dims[0], l.ValuesPerByte(), l, l.ValuesPerByte())
	}
	return nil
}

// packedDims returns the dimensions of the packed byte array for logical dims.
func (l Packing) packedDims(dims []int) []int {
	out := append([]int(nil), dims...)
	out[0] /= l.ValuesPerByte()
	return out
}

// code maps a value to its stored code: v+1 for TwoBit, 1 for +1 and 0 for -1 for OneBit.
func (l Packing) code(v int8) uint8 {
	if l == OneBit {
		if v > 0 {
			return 1
		}
		return 0
	}
	return uint8(v + 1)
}

// value maps a stored code back to its value.
func (l Packing) value(code uint8) int8 {
	if l == OneBit {
		return int8(2*code) - 1
	}
	return int8(code) - 1
}

// packValues packs values (row-major, logical dims) into bytes (row-major, packed dims). Values
// must be valid for the layout (checked by the callers).
func (l Packing) packValues(values []int8, dims []int) []uint8 {
	groups := l.ValuesPerByte()
	rowSize := len(values) / dims[0]
	rows := dims[0] / groups
	bits := l.bitsPerValue()
	packed := make([]uint8, rows*rowSize)
	for g := range groups {
		for p := range rows {
			src := values[(g*rows+p)*rowSize : (g*rows+p+1)*rowSize]
			dst := packed[p*rowSize : (p+1)*rowSize]
			for j, v := range src {
				dst[j] |= l.code(v) << (bits * g)
			}
		}
	}
	return packed
}

// unpackValues is the inverse of packValues. A TwoBit code 3 (never written by this package)
// decodes as +2, as eformer's unpack does.
func (l Packing) unpackValues(packed []uint8, dims []int) []int8 {
	groups := l.ValuesPerByte()
	rows := dims[0] / groups
	rowSize := len(packed) / rows
	bits := l.bitsPerValue()
	mask := uint8(l.radix() - 1)
	values := make([]int8, len(packed)*groups)
	for g := range groups {
		for p := range rows {
			src := packed[p*rowSize : (p+1)*rowSize]
			dst := values[(g*rows+p)*rowSize : (g*rows+p+1)*rowSize]
			for j, b := range src {
				dst[j] = l.value((b >> (bits * g)) & mask)
			}
		}
	}
	return values
}

// PackValues packs values in {-1, 0, +1} ({-1, +1} for OneBit), given row-major with dimensions
// dims, into the packing's bytes (row-major, first dimension divided by ValuesPerByte). It is the
// host-side form of eformer's pack_weights_1bit, validated: a bad shape or value is an error
// naming it.
func PackValues(packing Packing, values []int8, dims ...int) ([]uint8, error) {
	if err := packing.checkPackable("onebit.PackValues", dims); err != nil {
		return nil, err
	}
	if size := product(dims); size != len(values) {
		return nil, errors.Errorf("onebit.PackValues: %d values for dimensions %v (%d elements)", len(values), dims, size)
	}
	for i, v := range values {
		if !packing.valid(float64(v)) {
			return nil, badValueError("onebit.PackValues", packing, float64(v), i, dims)
		}
	}
	return packing.packValues(values, dims), nil
}

// UnpackValues is the inverse of PackValues: dims are the logical dimensions.
func UnpackValues(packing Packing, packed []uint8, dims ...int) ([]int8, error) {
	if err := packing.checkPackable("onebit.UnpackValues", dims); err != nil {
		return nil, err
	}
	if want := product(packing.packedDims(dims)); want != len(packed) {
		return nil, errors.Errorf("onebit.UnpackValues: %d bytes for dimensions %v (%s packing: %d bytes)",
			len(packed), dims, packing, want)
	}
	return packing.unpackValues(packed, dims), nil
}

func (l Packing) valid(v float64) bool {
	if l == OneBit {
		return v == -1 || v == 1
	}
	return v == -1 || v == 0 || v == 1
}

func (l Packing) accepted() string {
	if l == OneBit {
		return "{-1, +1}"
	}
	return "{-1, 0, +1}"
}

func badValueError(what string, l Packing, v float64, flat int, dims []int) error {
	return errors.Errorf("%s: value %v at index %v (flat %d) of shape %v is not in %s (the %s layout)",
		what, v, hostdata.Unflatten(flat, dims), flat, dims, l.accepted(), l)
}

func product(dims []int) int {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return n
}

// checkDType rejects dtypes an array cannot materialize to.
func checkDType(what string, dtype dtypes.DType, scaled bool) error {
	switch {
	case scaled && !dtype.IsFloat():
		return errors.Errorf("%s: dtype %s for a scaled array; accepted: a float dtype (the scale multiplies the values)", what, dtype)
	case !dtype.IsFloat() && !dtype.IsInt():
		return errors.Errorf("%s: dtype %s; accepted: a float or integer dtype", what, dtype)
	}
	return nil
}
