package lowering_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/quanta-ml/quanta/ggml"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
)

// integerRouteRows is the most activation rows for which the GGML kernels of integerRouteTypes
// may multiply 8-bit activations (package cpukernels; Q4_0 only up to 2).
const integerRouteRows = 8

var integerRouteTypes = []gguf.Type{gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K, gguf.TypeQ4_0, gguf.TypeQ4_1,
	gguf.TypeQ5_0, gguf.TypeQ5_1}

// x8Bound returns, per output of x (m×k) · Wᵀ (w n×k), what quantizing x to 8 bits in groups of g
// may change it by: Σ_l |w[j][l]|·amax/254, amax the largest magnitude of x[i][l]'s group.
func x8Bound(x []float64, w []float64, m, k, n, g int) []float64 {
	out := make([]float64, m*n)
	for i := range m {
		for c := 0; c < k; c += g {
			amax := 0.0
			for _, v := range x[i*k+c : i*k+c+g] {
				amax = math.Max(amax, math.Abs(v))
			}
			for j := range n {
				for l := c; l < c+g; l++ {
					out[i*n+j] += math.Abs(w[j*k+l]) * amax / 254
				}
			}
		}
	}
	return out
}

// TestGGMLKernel: on a backend with quanta's kernels, x·Wᵀ of every GGML block type (GGUF's
// linear weight, its block axis contracted) is the kernel's under Kernel and Auto, with float32
// and bfloat16 activations, and equals the dense product of the materialized weight: within
// float32 accumulation, and for the types of integerRouteTypes at up to 8 rows within what their
// 8-bit activations may change. A product contracting another axis is not the kernel's.
func TestGGMLKernel(t *testing.T) {
	needKernels(t)
	const n, k = 24, 512
	r := rand.New(rand.NewPCG(11, 12))
	xWt := productCase{name: "x@Wt", wDims: []int{n, k}, axes: lowering.Axes{XContracting: []int{1}, WContracting: []int{1}},
		rank2: true}
	for _, typ := range gguf.BlockTypes() {
		w := ggml.MustQuantize(testutil.NormalTensor(r, n, k), typ)
		dense := testutil.Materialize(t, w)
		wf := testutil.Float64s(t, dense)
		layout := "ggml-" + strings.ToLower(typ.String())
		for _, m := range []int{1, 3, 17} {
			for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
				if dt == dtypes.BFloat16 && m != 3 {
					continue
				}
				c := xWt
				c.xDims = []int{m, k}
				x := activations(t, r, c.xDims, dt)
				want := denseProduct(t, w, x, c)
				var bound []float64
				if m <= integerRouteRows && slices.Contains(integerRouteTypes, typ) {
					bound = x8Bound(testutil.Float64s(t, x), wf, m, k, n, typ.BlockSize())
				}
				for _, s := range []lowering.Strategy{lowering.Auto, lowering.Kernel} {
					if s == lowering.Auto && (m != 3 || dt != dtypes.Float32) {
						continue
					}
					t.Run(fmt.Sprintf("%s/m=%d/%s/%s", typ, m, dt, s), func(t *testing.T) {
						lowering.ResetBuilt()
						got, err := runProduct(t, w.WithStrategy(s), x, c)
						if err != nil {
							t.Fatalf("%+v", err)
						}
						if lowering.Built()[lowering.Choice{Layout: layout, Strategy: lowering.Kernel}] == 0 {
							t.Fatalf("no kernel served the product: %v", lowering.Built())
						}
						tol := 1e-4 + 6.25e-6*k
						if dt == dtypes.BFloat16 {
							tol = 3e-2 // the result is rounded to bfloat16
						}
						for i := range want {
							limit := tol * math.Max(1, math.Abs(want[i]))
							if bound != nil {
								limit += bound[i]
							}
							if d := math.Abs(got[i] - want[i]); !(d <= limit) {
								t.Fatalf("y[%d] = %v, want %v (limit %g)", i, got[i], want[i], limit)
							}
						}
					})
				}
			}
		}
	}
	t.Run("x@W", func(t *testing.T) {
		w := ggml.MustQuantize(testutil.NormalTensor(r, k, 64), gguf.TypeQ8_0).WithStrategy(lowering.Kernel)
		c := productCase{name: "x@W", xDims: []int{2, k}, wDims: []int{k, 64},
			axes: lowering.Axes{XContracting: []int{1}, WContracting: []int{0}}, rank2: true, kMajor: true}
		_, err := runProduct(t, w, activations(t, r, c.xDims, dtypes.Float32), c)
		if err == nil || !errors.Is(err, lowering.ErrUnsupported) || !strings.Contains(err.Error(), "kernel serves") {
			t.Fatalf("want a panic with ErrUnsupported naming the kernel, got %v", err)
		}
		// The message says what each format needs, this one's included.
		for _, want := range []string{"GGML weights contracted on their block axis (x·Wᵀ", "the kernels' codebook (NF4's)",
			"int8 weights with float32, bfloat16 or float16 scales per tensor, per contracted index or per output column",
			"signs weights contracted on their packed axis"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("message %q lacks %q", err, want)
			}
		}
	})
}

// TestGGMLKernelGradient: differentiating through a GGML product the kernel serves gives the
// dense product's gradient (the graph keeps the decode formulation for GoMLX's gradients).
func TestGGMLKernelGradient(t *testing.T) {
	needKernels(t)
	r := rand.New(rand.NewPCG(13, 14))
	w := ggml.MustQuantize(testutil.NormalTensor(r, 20, 256), gguf.TypeQ8_0)
	x := testutil.NormalTensor(r, 3, 256)
	checkKernelGradient(t, x, w, lowering.Axes{XContracting: []int{1}, WContracting: []int{1}}, "ggml-q8_0")
}
