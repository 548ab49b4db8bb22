// Package hostdata reads the flat data of host tensors as the float values quanta computes with,
// maps flat row-major positions to indices, and transposes and concatenates float32 matrices on
// the host. It is
// the one home of these conversions for the host quantizers, the model loaders, the conformance
// checker and the tests (through package testutil).
package hostdata

import (
	"reflect"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/x448/float16"
)

// Float64s returns the values of a host tensor of any float, integer or boolean dtype as float64
// (true is 1). It returns an error for another dtype.
func Float64s(x *tensors.Tensor) ([]float64, error) {
	if out, ok := floats[float64](x); ok {
		return out, nil
	}
	var out []float64
	var err error
	x.MustConstFlatData(func(flat any) { out, err = integerFloat64s(flat, x) })
	return out, err
}

// Float32s returns the values of a host tensor of a float dtype as float32 (a copy; float64
// values rounded to nearest), or false for another dtype.
func Float32s(x *tensors.Tensor) ([]float32, bool) { return floats[float32](x) }

// Unflatten returns the multi-dimensional index of a flat row-major position in dims.
func Unflatten(flat int, dims []int) []int {
	idx := make([]int, len(dims))
	for i := len(dims) - 1; i >= 0; i-- {
		idx[i] = flat % dims[i]
		flat /= dims[i]
	}
	return idx
}

// Transpose writes src, row-major [rows][cols], into dst as [cols][rows], in 64×64 tiles so that
// neither side is walked with a large stride. With srcRow, row r of the matrix is read from row
// srcRow(r) of src (a permutation of the rows); nil reads row r.
func Transpose(src, dst []float32, rows, cols int, srcRow func(r int) int) {
	const tile = 64
	for r0 := 0; r0 < rows; r0 += tile {
		for c0 := 0; c0 < cols; c0 += tile {
			for r := r0; r < min(r0+tile, rows); r++ {
				from := r
				if srcRow != nil {
					from = srcRow(r)
				}
				row := src[from*cols:]
				for c := c0; c < min(c0+tile, cols); c++ {
					dst[c*rows+r] = row[c]
				}
			}
		}
	}
}

// Transposed returns a new float32 tensor holding the transpose of the rank-2 float32 tensor t.
func Transposed(t *tensors.Tensor) *tensors.Tensor {
	rows, cols := t.Shape().Dim(0), t.Shape().Dim(1)
	out := tensors.FromShape(shapes.Make(dtypes.Float32, cols, rows))
	tensors.MustConstFlatData(t, func(src []float32) {
		tensors.MustMutableFlatData(out, func(dst []float32) { Transpose(src, dst, rows, cols, nil) })
	})
	return out
}

// ConcatenateColumns returns a new float32 tensor [rows, Σ cols] holding the rank-2 float32
// tensors parts [rows, cols_i] side by side (concatenated along the last axis), or an error when
// they are not float32 matrices of one row count.
func ConcatenateColumns(parts []*tensors.Tensor) (*tensors.Tensor, error) {
	if len(parts) == 0 {
		return nil, errors.New("hostdata.ConcatenateColumns: no tensors")
	}
	rows, total := parts[0].Shape().Dim(0), 0
	for _, p := range parts {
		if s := p.Shape(); s.Rank() != 2 || s.DType != dtypes.Float32 || s.Dim(0) != rows {
			return nil, errors.Errorf("hostdata.ConcatenateColumns: %s after %s; accepted: float32 matrices of one row count", s, parts[0].Shape())
		}
		total += p.Shape().Dim(1)
	}
	out := tensors.FromShape(shapes.Make(dtypes.Float32, rows, total))
	tensors.MustMutableFlatData(out, func(dst []float32) {
		at := 0
		for _, p := range parts {
			cols := p.Shape().Dim(1)
			tensors.MustConstFlatData(p, func(src []float32) {
				for r := range rows {
					copy(dst[r*total+at:r*total+at+cols], src[r*cols:(r+1)*cols])
				}
			})
			at += cols
		}
	})
	return out, nil
}

// floats converts the values of a float tensor to F, or returns false for another dtype.
func floats[F float32 | float64](x *tensors.Tensor) ([]F, bool) {
	var out []F
	ok := true
	x.MustConstFlatData(func(flat any) {
		switch v := flat.(type) {
		case []float32:
			out = Convert(v, func(e float32) F { return F(e) })
		case []float64:
			out = Convert(v, func(e float64) F { return F(e) })
		case []bfloat16.BFloat16:
			out = Convert(v, func(e bfloat16.BFloat16) F { return F(e.Float32()) })
		case []float16.Float16:
			out = Convert(v, func(e float16.Float16) F { return F(e.Float32()) })
		default:
			ok = false
		}
	})
	return out, ok
}

// Convert returns f of each of values, in a new slice: the one element-wise conversion of host
// data the packages and tests share.
func Convert[T, U any](values []T, f func(T) U) []U {
	out := make([]U, len(values))
	for i, v := range values {
		out[i] = f(v)
	}
	return out
}

// integerFloat64s converts a slice of a built-in integer or boolean type, read through
// reflection so that no type needs its own case.
func integerFloat64s(flat any, x *tensors.Tensor) ([]float64, error) {
	v := reflect.ValueOf(flat)
	var get func(reflect.Value) float64
	switch v.Type().Elem().Kind() {
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Int:
		get = func(e reflect.Value) float64 { return float64(e.Int()) }
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
		get = func(e reflect.Value) float64 { return float64(e.Uint()) }
	case reflect.Bool:
		get = func(e reflect.Value) float64 {
			if e.Bool() {
				return 1
			}
			return 0
		}
	default:
		return nil, errors.Errorf("tensor %s; accepted: a float, integer or boolean dtype", x.Shape())
	}
	out := make([]float64, v.Len())
	for i := range out {
		out[i] = get(v.Index(i))
	}
	return out, nil
}
