package lowering_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/ggml"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/cpukernels"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/onebit"
)

// TestKernelDeterminism: a compiled product that a kernel serves returns the same bits on every
// call, from one goroutine or from many at once, whatever the kernels' thread count and whether
// they run on quanta's pool or on XLA's — as XLA's own dense product does. The weight (4608 × 264, or 264 × 4608 for GGUF's x·Wᵀ) is large enough
// that the kernels split its rows at the smaller m; at m = 2 the GGML types take their integer
// route.
func TestKernelDeterminism(t *testing.T) {
	backend := needKernels(t)
	defer cpukernels.SetThreads(0)
	defer cpukernels.SetXLAPool(cpukernels.SetXLAPool(false))
	const k, n = 4608, 264
	r := rand.New(rand.NewPCG(23, 1))
	weight := testutil.NormalTensor(r, k, n)
	weightT := testutil.NormalTensor(r, n, k) // GGUF's layout: x·Wᵀ
	xW := lowering.Axes{XContracting: []int{1}, WContracting: []int{0}}
	xWt := lowering.Axes{XContracting: []int{1}, WContracting: []int{1}}
	weights := []struct {
		name, layout string
		w            lowering.Quantized
		axes         lowering.Axes
	}{
		{"nf4", "blockwise4", nf4.MustQuantize(weight, 64), xW},
		{"nf4-dq", "blockwise4-dq", nf4.MustDoubleQuantize(nf4.MustQuantize(weight, 64)), xW},
		{"int8", "int8", qint8.MustQuantize(weight), xW},
		{"ternary-scaled", "signs2", onebit.MustQuantizeTernary(weight, &onebit.Options{Scale: true, ScaleAxes: []int{0}}), xW},
		{"1-bit", "signs1", onebit.MustQuantizeBinaryBits(weight, nil), xW},
		{"ggml-q4_k", "ggml-q4_k", ggml.MustQuantize(weightT, gguf.TypeQ4_K), xWt},
		{"ggml-q8_0", "ggml-q8_0", ggml.MustQuantize(weightT, gguf.TypeQ8_0), xWt},
	}
	for _, wc := range weights {
		e := implicitarray.MustNewExec(backend, func(x *graph.Node, w implicitarray.Array) *graph.Node {
			return lowering.DotGeneral(x, w.(lowering.Quantized), wc.axes)
		})
		for _, m := range []int{2, 17, 64, 300} {
			t.Run(fmt.Sprintf("%s/m=%d", wc.name, m), func(t *testing.T) {
				x := testutil.NormalTensor(r, m, k)
				call := func() []float32 {
					out, err := e.Call1(x, wc.w)
					if err != nil {
						t.Error(err)
						return nil
					}
					return tensors.MustCopyFlatData[float32](out.(*tensors.Tensor))
				}
				lowering.ResetBuilt()
				want := call()
				if lowering.Built()[lowering.Choice{Layout: wc.layout, Strategy: lowering.Kernel}] == 0 {
					t.Fatalf("no kernel served the product: %v", lowering.Built())
				}
				check := func(what string, got []float32) {
					t.Helper()
					for i := range want {
						if got == nil || math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s: output %d differs from the first call's", what, i)
						}
					}
				}
				for _, threads := range []int{1, 2, 3, 0} {
					cpukernels.SetThreads(threads)
					for c := range 3 {
						check(fmt.Sprintf("%d kernel threads, call %d", cpukernels.Threads(), c), call())
					}
				}
				cpukernels.SetXLAPool(true)
				check("on XLA's pool", call())
				cpukernels.SetXLAPool(false)
				results := make([][]float32, 16*4)
				var wg sync.WaitGroup
				for g := range 16 {
					wg.Go(func() {
						for c := range 4 {
							results[4*g+c] = call()
						}
					})
				}
				wg.Wait()
				for i, got := range results {
					check(fmt.Sprintf("goroutine %d of 16, call %d", i/4, i%4), got)
				}
			})
		}
		e.Finalize()
	}
}
