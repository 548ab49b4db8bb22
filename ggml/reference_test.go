package ggml_test

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/ggml"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/refdata"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// TestMatchesGGML checks every block type against ggml's C code (reference/testdata/ggml): the
// bytes Quantize stores are quantize_row_*_ref's, from float32 and from float64 inputs (the same
// values), and Materialize in the graph gives dequantize_row_*'s values on those blocks and on
// random blocks with random half scales (subnormal, zero, ±65504, ±inf).
func TestMatchesGGML(t *testing.T) {
	refdata.Require(t, "ggml", "x.npy")
	for _, typ := range gguf.BlockTypes() {
		t.Run(typ.String(), func(t *testing.T) {
			v, err := refdata.GGML(typ.String())
			if err != nil {
				t.Fatal(err)
			}
			x := tensors.FromFlatDataAndDimensions(v.X, v.Rows, v.RowLen)
			x64 := make([]float64, len(v.X))
			for i, f := range v.X {
				x64[i] = float64(f)
			}
			for _, input := range []*tensors.Tensor{x, tensors.FromFlatDataAndDimensions(x64, v.Rows, v.RowLen)} {
				a, err := ggml.Quantize(input, typ)
				if err != nil {
					t.Fatal(err)
				}
				if got := testutil.TensorBytes(t, a.Blocks().Tensor()); string(got) != string(v.Q) {
					t.Errorf("Quantize(%s) differs from quantize_row_%s_ref", input.DType(), typ)
				}
				if a.DType() != input.DType() {
					t.Errorf("Quantize(%s) materializes as %s", input.DType(), a.DType())
				}
			}
			q, err := ggml.FromBytes(typ, []int{v.Rows, v.RowLen}, v.Q)
			if err != nil {
				t.Fatal(err)
			}
			testutil.SameBits(t, "Materialize of the quantized rows", testutil.Float32s(t, testutil.Materialize(t, q)), v.Deq)
			raw, err := ggml.FromBytes(typ, []int{v.RawRows, v.RowLen}, v.Raw)
			if err != nil {
				t.Fatal(err)
			}
			testutil.SameBits(t, "Materialize of random blocks", testutil.Float32s(t, testutil.Materialize(t, raw)), v.RawDeq)
			if typ != gguf.TypeQ4_K && typ != gguf.TypeQ8_0 {
				return // the layout's rank and the dtype do not depend on the type: two types suffice
			}
			raw3, err := ggml.FromBytes(typ, []int{2, v.RawRows / 2, v.RowLen}, v.Raw)
			if err != nil {
				t.Fatal(err)
			}
			testutil.SameBits(t, "Materialize of random blocks, rank 3", testutil.Float32s(t, testutil.Materialize(t, raw3)), v.RawDeq)
			wide := testutil.Float32s(t, testutil.Materialize(t, raw.WithDType(dtypes.Float64)))
			testutil.SameBits(t, "Materialize as float64", wide, v.RawDeq)
		})
	}
}
