package lowering_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
)

// denseProducts are DenseMatMul and DenseMatMulTransposed, each with the weight shape it takes
// for k×n, w's element (l, j) in its flat data and the most rows its kernel takes.
var denseProducts = []struct {
	name       string
	product    func(x, w *graph.Node) *graph.Node
	dims       func(k, n int) []int
	at         func(l, j, k, n int) int
	kernelRows int
}{
	{"DenseMatMul", lowering.DenseMatMul, func(k, n int) []int { return []int{k, n} }, func(l, j, k, n int) int { return l*n + j }, 16},
	{"DenseMatMulTransposed", lowering.DenseMatMulTransposed, func(k, n int) []int { return []int{n, k} },
		func(l, j, k, n int) int { return j*k + l }, math.MaxInt},
}

// TestDenseMatMul: x·w (and x·wᵀ) of a dense weight equals the float64 product of the same
// values; with quanta's kernels a float32 product is the kernel's (x·w's up to 16 rows, x·wᵀ's
// at any count), and more rows, or float64 operands, are XLA's dot (Built says which).
func TestDenseMatMul(t *testing.T) {
	backend := testutil.Backend(t)
	kernels := lowering.PlatformOf(backend)&lowering.Kernels != 0
	r := rand.New(rand.NewPCG(21, 22))
	for _, tc := range []struct {
		m, k, n int
		dtype   dtypes.DType
	}{
		{1, 7, 5, dtypes.Float32},
		{1, 576, 960, dtypes.Float32},
		{3, 64, 33, dtypes.Float32},
		{16, 130, 17, dtypes.Float32},
		{17, 64, 8, dtypes.Float32},
		{130, 300, 70, dtypes.Float32},
		{2, 40, 9, dtypes.Float64},
	} {
		for _, p := range denseProducts {
			t.Run(fmt.Sprintf("%s/m=%d/k=%d/n=%d/%s", p.name, tc.m, tc.k, tc.n, tc.dtype), func(t *testing.T) {
				x, w := testutil.NormalTensor(r, tc.m, tc.k), testutil.NormalTensor(r, p.dims(tc.k, tc.n)...)
				xs, ws := testutil.Float64s(t, x), testutil.Float64s(t, w)
				lowering.ResetBuilt()
				out := graph.MustExecOnce(backend, func(x, w *graph.Node) *graph.Node {
					x, w = graph.ConvertDType(x, tc.dtype), graph.ConvertDType(w, tc.dtype)
					return graph.ConvertDType(p.product(x, w), dtypes.Float64)
				}, x, w)
				got := tensors.MustCopyFlatData[float64](out)
				strategy := lowering.Materialize
				if kernels && tc.dtype == dtypes.Float32 && tc.m <= p.kernelRows {
					strategy = lowering.Kernel
				}
				if built := lowering.Built(); built[lowering.Choice{Layout: "dense", Strategy: strategy}] != 1 {
					t.Fatalf("built %v, want one dense/%s", built, strategy)
				}
				tol := 1e-4 + 6.25e-6*float64(tc.k)
				for i := range tc.m {
					for j := range tc.n {
						want := 0.0
						for l := range tc.k {
							want += xs[i*tc.k+l] * ws[p.at(l, j, tc.k, tc.n)]
						}
						if d := math.Abs(got[i*tc.n+j] - want); !(d <= tol*math.Max(1, math.Abs(want))) {
							t.Fatalf("y[%d][%d] = %v, want %v", i, j, got[i*tc.n+j], want)
						}
					}
				}
			})
		}
	}
}

// TestDenseMatMulGradient: the gradient through a product the kernel serves is the dot's: for
// L = Σ x·w, dL/dx[i][l] = Σ_j w[l][j].
func TestDenseMatMulGradient(t *testing.T) {
	const m, k, n = 2, 33, 12
	r := rand.New(rand.NewPCG(23, 24))
	for _, p := range denseProducts {
		t.Run(p.name, func(t *testing.T) {
			x, w := testutil.NormalTensor(r, m, k), testutil.NormalTensor(r, p.dims(k, n)...)
			out := graph.MustExecOnce(testutil.Backend(t), func(x, w *graph.Node) *graph.Node {
				return graph.Gradient(graph.ReduceAllSum(p.product(x, w)), x)[0]
			}, x, w)
			got, ws := testutil.Float64s(t, out), testutil.Float64s(t, w)
			for i := range m {
				for l := range k {
					want := 0.0
					for j := range n {
						want += ws[p.at(l, j, k, n)]
					}
					if d := math.Abs(got[i*k+l] - want); d > 1e-4 {
						t.Fatalf("dL/dx[%d][%d] = %v, want %v", i, l, got[i*k+l], want)
					}
				}
			}
		})
	}
}

// TestDenseMatMulErrors: operands that are not x (M, K) and w (K, N), or w (N, K) for the
// transposed product, of one float dtype panic with the op's name, the shapes and what is
// accepted.
func TestDenseMatMulErrors(t *testing.T) {
	backend := testutil.Backend(t)
	for _, tc := range []struct {
		name   string
		x, w   *tensors.Tensor
		accept string
	}{
		{"rank", tensors.FromFlatDataAndDimensions(make([]float32, 24), 2, 3, 4), tensors.FromFlatDataAndDimensions(make([]float32, 12), 4, 3), "x (M, K)"},
		{"inner", tensors.FromFlatDataAndDimensions(make([]float32, 6), 2, 3), tensors.FromFlatDataAndDimensions(make([]float32, 8), 4, 2), "x (M, K)"},
		{"dtype", tensors.FromFlatDataAndDimensions(make([]float32, 6), 2, 3), tensors.FromFlatDataAndDimensions(make([]float64, 6), 3, 2), "one float dtype"},
		{"integer", tensors.FromFlatDataAndDimensions(make([]int32, 6), 2, 3), tensors.FromFlatDataAndDimensions(make([]int32, 6), 3, 2), "one float dtype"},
	} {
		for _, p := range denseProducts {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				var err error
				func() {
					defer testutil.RecoverError(&err)
					graph.MustExecOnce(backend, p.product, tc.x, tc.w)
				}()
				if err == nil || !strings.Contains(err.Error(), "lowering."+p.name+":") || !strings.Contains(err.Error(), tc.accept) {
					t.Fatalf("want a panic naming lowering.%s and %q, got %v", p.name, tc.accept, err)
				}
			})
		}
	}
}
