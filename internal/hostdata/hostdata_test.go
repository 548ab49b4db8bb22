package hostdata_test

import (
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/internal/hostdata"
	"github.com/x448/float16"
)

func TestUnflatten(t *testing.T) {
	if got, want := hostdata.Unflatten(23, []int{2, 3, 4}), []int{1, 2, 3}; !slices.Equal(got, want) {
		t.Errorf("Unflatten(23, [2 3 4]) = %v, want %v", got, want)
	}
}

func TestFloat64s(t *testing.T) {
	for _, tc := range []struct {
		name string
		x    *tensors.Tensor
		want []float64
	}{
		{"float64", tensors.FromFlatDataAndDimensions([]float64{1.5, -2}, 2), []float64{1.5, -2}},
		{"float32", tensors.FromFlatDataAndDimensions([]float32{0.25, -3}, 2), []float64{0.25, -3}},
		{"bfloat16", tensors.FromFlatDataAndDimensions([]bfloat16.BFloat16{bfloat16.FromFloat32(1.5)}, 1), []float64{1.5}},
		{"float16", tensors.FromFlatDataAndDimensions([]float16.Float16{float16.Fromfloat32(-0.5)}, 1), []float64{-0.5}},
		{"int8", tensors.FromFlatDataAndDimensions([]int8{-128, 127}, 2), []float64{-128, 127}},
		{"int64", tensors.FromFlatDataAndDimensions([]int64{-1 << 40}, 1), []float64{-1 << 40}},
		{"uint8", tensors.FromFlatDataAndDimensions([]uint8{0, 255}, 2), []float64{0, 255}},
		{"uint32", tensors.FromFlatDataAndDimensions([]uint32{1 << 31}, 1), []float64{1 << 31}},
		{"bool", tensors.FromFlatDataAndDimensions([]bool{true, false}, 2), []float64{1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := hostdata.Float64s(tc.x)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Float64s = %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := hostdata.Float64s(tensors.FromFlatDataAndDimensions([]complex64{1}, 1)); err == nil {
		t.Error("Float64s of complex64: no error")
	}
}

func TestFloat32s(t *testing.T) {
	got, ok := hostdata.Float32s(tensors.FromFlatDataAndDimensions([]float64{0.1, 2}, 2))
	if want := []float32{0.1, 2}; !ok || !slices.Equal(got, want) {
		t.Errorf("Float32s = %v, %v; want %v, true", got, ok, want)
	}
	if _, ok := hostdata.Float32s(tensors.FromFlatDataAndDimensions([]int32{1}, 1)); ok {
		t.Error("Float32s of int32: ok")
	}
}

func TestTranspose(t *testing.T) {
	// 70×3 crosses a tile boundary; reversed rows stand for any permutation.
	const rows, cols = 70, 3
	src := make([]float32, rows*cols)
	for i := range src {
		src[i] = float32(i)
	}
	reversed := func(r int) int { return rows - 1 - r }
	for _, tc := range []struct {
		name   string
		srcRow func(int) int
	}{{"identity", nil}, {"reversed", reversed}} {
		t.Run(tc.name, func(t *testing.T) {
			dst := make([]float32, rows*cols)
			hostdata.Transpose(src, dst, rows, cols, tc.srcRow)
			for r := range rows {
				from := r
				if tc.srcRow != nil {
					from = tc.srcRow(r)
				}
				for c := range cols {
					if got, want := dst[c*rows+r], src[from*cols+c]; got != want {
						t.Fatalf("dst[%d][%d] = %v, want %v", c, r, got, want)
					}
				}
			}
		})
	}
	got := hostdata.Transposed(tensors.FromFlatDataAndDimensions([]float32{1, 2, 3, 4, 5, 6}, 2, 3))
	if want := []float32{1, 4, 2, 5, 3, 6}; got.Shape().String() != "(Float32)[3 2]" || !slices.Equal(tensors.MustCopyFlatData[float32](got), want) {
		t.Errorf("Transposed([[1 2 3] [4 5 6]]) = %s %v, want (Float32)[3 2] %v", got.Shape(), tensors.MustCopyFlatData[float32](got), want)
	}
}

func TestConcatenateColumns(t *testing.T) {
	a := tensors.FromValue([][]float32{{1, 2}, {3, 4}})
	b := tensors.FromValue([][]float32{{5}, {6}})
	c := tensors.FromValue([][]float32{{7, 8, 9}, {10, 11, 12}})
	got, err := hostdata.ConcatenateColumns([]*tensors.Tensor{a, b, c})
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{1, 2, 5, 7, 8, 9, 3, 4, 6, 10, 11, 12}; got.Shape().String() != "(Float32)[2 6]" || !slices.Equal(tensors.MustCopyFlatData[float32](got), want) {
		t.Errorf("ConcatenateColumns = %s %v, want (Float32)[2 6] %v", got.Shape(), tensors.MustCopyFlatData[float32](got), want)
	}
	for _, bad := range [][]*tensors.Tensor{nil, {a, tensors.FromValue([][]float32{{1}})}, {a, tensors.FromValue([]float32{1, 2})}, {a, tensors.FromValue([][]float64{{1}, {2}})}} {
		if _, err := hostdata.ConcatenateColumns(bad); err == nil {
			t.Errorf("ConcatenateColumns(%v): no error", bad)
		}
	}
}
