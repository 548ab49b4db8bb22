package lowering_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/ggml"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
)

// identity returns the n×n identity matrix in float32.
func identity(n int) *tensors.Tensor {
	v := make([]float32, n*n)
	for i := range n {
		v[i*n+i] = 1
	}
	return tensors.FromFlatDataAndDimensions(v, n, n)
}

// TestDecodeKernel: on a backend with quanta's kernels, DecodeDot (forced: Auto takes it beyond
// the product kernels' rows) decodes NF4 weights (both layouts, also double-quantized) and GGML
// weights with the decode kernel, whose values are the materialized weight's: the product with
// the identity (each output one weight times 1, plus zeros) returns them exactly (a zero's sign
// aside; package cpukernels checks the decode's bits).
func TestDecodeKernel(t *testing.T) {
	needKernels(t)
	r := rand.New(rand.NewPCG(21, 22))
	xWt := lowering.Axes{XContracting: []int{1}, WContracting: []int{1}}
	xW := lowering.Axes{XContracting: []int{1}, WContracting: []int{0}}
	cases := []struct {
		name string
		w    lowering.Quantized
		axes lowering.Axes
	}{
		{"nf4/x@Wt", nf4.MustQuantize(testutil.NormalTensor(r, 40, 4200), 64).WithStrategy(lowering.DecodeDot), xWt},
		{"nf4/x@W", nf4.MustQuantize(testutil.NormalTensor(r, 300, 70), 64).WithStrategy(lowering.DecodeDot), xW},
		{"nf4/padded", nf4.MustQuantize(testutil.NormalTensor(r, 5, 100), 64).WithStrategy(lowering.DecodeDot), xWt},
		{"nf4-dq/x@Wt", nf4.MustDoubleQuantize(nf4.MustQuantize(testutil.NormalTensor(r, 40, 4200), 64)).
			WithStrategy(lowering.DecodeDot), xWt},
	}
	for _, typ := range []gguf.Type{gguf.TypeQ4_0, gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeQ6_K} {
		cases = append(cases, struct {
			name string
			w    lowering.Quantized
			axes lowering.Axes
		}{typ.String(), ggml.MustQuantize(testutil.NormalTensor(r, 24, 4352), typ).WithStrategy(lowering.DecodeDot), xWt})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dims := tc.w.Shape().Dimensions
			k := dims[tc.axes.WContracting[0]]
			c := productCase{name: tc.name, xDims: []int{k, k}, wDims: dims, axes: tc.axes, rank2: true,
				kMajor: tc.axes.WContracting[0] == 0}
			before := lowering.DecodeKernels()
			got, err := runProduct(t, tc.w, identity(k), c)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			if lowering.DecodeKernels() == before {
				t.Fatal("DecodeDot emitted no decode kernel")
			}
			want := testutil.Float64s(t, testutil.Materialize(t, tc.w))
			for i, g := range got { // got is (k, n): row l holds W's element l of every output
				l, j := i/(len(got)/k), i%(len(got)/k)
				wi := j*k + l
				if c.kMajor {
					wi = l*(len(got)/k) + j
				}
				if float32(g) != float32(want[wi]) { // a -0 weight comes out +0: -0·1 + 0·0 = +0
					t.Fatalf("%s: output (%d, %d) = %v, want the weight's %v", fmt.Sprint(dims), l, j, g, want[wi])
				}
			}
		})
	}
}
