package int8_test

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// product is a dot_general written once for both the implicit and the dense reference.
type product struct {
	name string
	x, w []int // dimensions
	axes []int // quantized axes of w
	op   func(x, w implicitarray.Value) implicitarray.Value
}

func products() []product {
	matmul := func(x, w implicitarray.Value) implicitarray.Value { return implicitarray.MatMul(x, w) }
	einsum := func(eq string) func(x, w implicitarray.Value) implicitarray.Value {
		return func(x, w implicitarray.Value) implicitarray.Value { return implicitarray.Einsum(eq, x, w) }
	}
	left := func(x, w implicitarray.Value) implicitarray.Value { return implicitarray.Einsum("kn,bk->nb", w, x) }
	var ps []product
	for _, m := range []int{1, 12} {
		for _, axes := range [][]int{{-1}, {0}, {0, 1}} {
			ps = append(ps,
				product{name: "x@w", x: []int{m, 6}, w: []int{6, 4}, axes: axes, op: matmul},
				// K == N: eformer's fast path computes x @ w here, silently wrong.
				product{name: "bk,nk->bn", x: []int{m, 6}, w: []int{6, 6}, axes: axes, op: einsum("bk,nk->bn")},
				product{name: "w-left", x: []int{m, 6}, w: []int{6, 4}, axes: axes, op: left},
				// Scale (1, 6, 4) for axes (0,) varies along contracting and free axes.
				product{name: "batched", x: []int{3, m, 6}, w: []int{3, 6, 4}, axes: axes, op: matmul},
			)
		}
		ps = append(ps,
			product{name: "vector", x: []int{6}, w: []int{6, 4}, axes: []int{0}, op: matmul},
			product{name: "rank3-shared-axis1", x: []int{m, 5}, w: []int{2, 5, 3}, axes: []int{1}, op: einsum("bk,jkn->bjn")},
			// Scale (1, K, N) varies along contracting and free axes: dequantize in the handler.
			product{name: "rank3-axis0", x: []int{m, 5}, w: []int{2, 5, 3}, axes: []int{0}, op: einsum("bk,jkn->bjn")},
			product{name: "multi-contract", x: []int{m, 2, 3}, w: []int{4, 2, 3}, axes: []int{0}, op: einsum("bij,nij->bn")},
		)
	}
	return ps
}

// TestDotGeneral compares the weight-only product with the dense product of the materialized
// weight, for dimension numbers a fast path that ignores them gets wrong, and checks that it
// neither falls back nor materializes.
func TestDotGeneral(t *testing.T) {
	backend := testutil.Backend(t)
	rng := rand.New(rand.NewSource(5))
	for _, p := range products() {
		for _, actDType := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
			name := fmt.Sprintf("%s/x=%v/w=%v/axes=%v/%s", p.name, p.x, p.w, p.axes, actDType)
			t.Run(name, func(t *testing.T) {
				w := qint8.MustQuantize(testutil.NormalTensor(rng, p.w...), p.axes...)
				x := testutil.NormalTensor(rng, p.x...)
				wDense := testutil.Materialize(t, w)
				ref := implicitarray.MustNewExec(backend, func(x, w *graph.Node) *graph.Node {
					return p.op(graph.ConvertDType(graph.ConvertDType(x, actDType), dtypes.Float32), w).(*graph.Node)
				}).MustCall1(x, wDense).(*tensors.Tensor)
				want := tensors.MustCopyFlatData[float32](ref)
				tol := 1e-4
				if actDType == dtypes.BFloat16 {
					tol = 2e-2
				}
				implicitarray.ResetStats()
				e := implicitarray.MustNewExec(backend, func(x *graph.Node, w *qint8.Array) *graph.Node {
					return p.op(graph.ConvertDType(x, actDType), w).(*graph.Node)
				})
				out := e.MustCall1(x, w).(*tensors.Tensor)
				if out.DType() != actDType || !slices.Equal(out.Shape().Dimensions, ref.Shape().Dimensions) {
					t.Fatalf("result %s, want dims %v in %s", out.Shape(), ref.Shape().Dimensions, actDType)
				}
				got := testutil.Float64s(t, out)
				for i := range got {
					if d := math.Abs(got[i] - float64(want[i])); d > tol*(1+math.Abs(float64(want[i]))) {
						t.Fatalf("[%d] = %g, want %g", i, got[i], want[i])
					}
				}
				st := implicitarray.CurrentStats()
				if len(st.Fallbacks) != 0 || st.Materializations["*int8.Array"] != 0 {
					t.Errorf("fallbacks %v, materializations %v: the product must decode in place", st.Fallbacks, st.Materializations)
				}
			})
		}
	}
}
