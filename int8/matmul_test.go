package int8_test

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/testutil"
)

func randomTensor(rng *rand.Rand, dims ...int) *tensors.Tensor {
	size := 1
	for _, d := range dims {
		size *= d
	}
	data := make([]float32, size)
	for i := range data {
		data[i] = float32(rng.NormFloat64())
	}
	return tensors.FromFlatDataAndDimensions(data, dims...)
}

// product is a dot_general written once for both the implicit and the dense reference.
type product struct {
	name          string
	x, w          []int // dimensions
	axes          []int // quantized axes of w
	op            func(x, w implicitarray.Value) implicitarray.Value
	materializing bool // the scale layout needs LoweringDequantize
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
				product{name: "batched", x: []int{3, m, 6}, w: []int{3, 6, 4}, axes: axes, op: matmul, materializing: len(axes) == 1 && axes[0] == 0},
			)
		}
		ps = append(ps,
			product{name: "vector", x: []int{6}, w: []int{6, 4}, axes: []int{0}, op: matmul},
			product{name: "rank3-shared-axis1", x: []int{m, 5}, w: []int{2, 5, 3}, axes: []int{1}, op: einsum("bk,jkn->bjn")},
			// Scale (1, K, N) varies along contracting and free axes: dequantize in the handler.
			product{name: "rank3-axis0", x: []int{m, 5}, w: []int{2, 5, 3}, axes: []int{0}, op: einsum("bk,jkn->bjn"), materializing: true},
			product{name: "multi-contract", x: []int{m, 2, 3}, w: []int{4, 2, 3}, axes: []int{0}, op: einsum("bij,nij->bn")},
		)
	}
	return ps
}

// TestDotGeneral compares the weight-only product, for every lowering that serves the layout, with
// the dense product of the materialized weight, and checks that the fused lowerings neither fall
// back nor materialize.
func TestDotGeneral(t *testing.T) {
	backend := testutil.Backend(t)
	rng := rand.New(rand.NewSource(5))
	for _, p := range products() {
		for _, actDType := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
			name := fmt.Sprintf("%s/x=%v/w=%v/axes=%v/%s", p.name, p.x, p.w, p.axes, actDType)
			t.Run(name, func(t *testing.T) {
				w := qint8.MustQuantize(randomTensor(rng, p.w...), p.axes...)
				x := randomTensor(rng, p.x...)
				wDense, err := implicitarray.MaterializeOnHost(backend, w)
				if err != nil {
					t.Fatal(err)
				}
				ref := implicitarray.MustNewExec(backend, func(x, w *graph.Node) *graph.Node {
					return p.op(graph.ConvertDType(graph.ConvertDType(x, actDType), dtypes.Float32), w).(*graph.Node)
				}).MustCall1(x, wDense).(*tensors.Tensor)
				want := tensors.MustCopyFlatData[float32](ref)
				tol := 1e-4
				if actDType == dtypes.BFloat16 {
					tol = 2e-2
				}
				for _, lowering := range []qint8.Lowering{qint8.LoweringAuto, qint8.LoweringScaled, qint8.LoweringReduce, qint8.LoweringSlabs,
					qint8.LoweringDequantize, qint8.LoweringMaterialize, qint8.LoweringSliced} {
					if !servesLayout(lowering, p) || (actDType != dtypes.Float32 && lowering != qint8.LoweringAuto) {
						continue
					}
					implicitarray.ResetStats()
					e := implicitarray.MustNewExec(backend, func(x *graph.Node, w *qint8.Array) *graph.Node {
						return p.op(graph.ConvertDType(x, actDType), w.WithLowering(lowering)).(*graph.Node)
					})
					out := e.MustCall1(x, w).(*tensors.Tensor)
					if out.DType() != actDType || !equalInts(out.Shape().Dimensions, ref.Shape().Dimensions) {
						t.Fatalf("%s: result %s, want dims %v in %s", lowering, out.Shape(), ref.Shape().Dimensions, actDType)
					}
					got := float64s(t, out)
					for i := range got {
						if d := math.Abs(got[i] - float64(want[i])); d > tol*(1+math.Abs(float64(want[i]))) {
							t.Fatalf("%s: [%d] = %g, want %g", lowering, i, got[i], want[i])
						}
					}
					st := implicitarray.CurrentStats()
					if len(st.Fallbacks) != 0 {
						t.Errorf("%s: fallbacks %v", lowering, st.Fallbacks)
					}
					fused := lowering != qint8.LoweringDequantize && lowering != qint8.LoweringMaterialize && !p.materializing
					if n := st.Materializations["*int8.Array"]; fused && n != 0 {
						t.Errorf("%s: %d materializations on a fused path", lowering, n)
					}
				}
			})
		}
	}
}

// servesLayout says which forced lowerings accept the product (Auto always does).
func servesLayout(l qint8.Lowering, p product) bool {
	switch l {
	case qint8.LoweringScaled, qint8.LoweringSlabs:
		return !p.materializing
	case qint8.LoweringReduce:
		// Reduce needs the weight's contracting axes last and no batch axes.
		return p.name == "bk,nk->bn" || p.name == "multi-contract"
	case qint8.LoweringSliced:
		// Sliced needs a rank-2 weight contracted on its first axis.
		return p.name == "x@w" || p.name == "w-left" || p.name == "vector"
	}
	return true
}

// TestDotGeneralBadInput checks the messages of the lowerings that cannot serve a layout.
func TestDotGeneralBadInput(t *testing.T) {
	backend := testutil.Backend(t)
	w := qint8.MustQuantize(randomTensor(rand.New(rand.NewSource(1)), 4, 3))
	for _, tc := range []struct {
		name string
		fn   func(x *graph.Node, w *qint8.Array) *graph.Node
	}{
		{"reduce-on-leading-axis", func(x *graph.Node, w *qint8.Array) *graph.Node {
			return qint8.DotGeneral(x, []int{1}, nil, w, []int{0}, nil, qint8.LoweringReduce)
		}},
		{"integer-activations", func(x *graph.Node, w *qint8.Array) *graph.Node {
			return qint8.DotGeneral(graph.ConvertDType(x, dtypes.Int32), []int{1}, nil, w, []int{0}, nil, qint8.LoweringAuto)
		}},
		{"two-dense", func(x *graph.Node, w *qint8.Array) *graph.Node {
			return qint8.DotGeneral(x, []int{1}, nil, x, []int{1}, nil, qint8.LoweringAuto)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := implicitarray.MustNewExec(backend, tc.fn)
			if _, err := e.Call(randomTensor(rand.New(rand.NewSource(2)), 2, 4), w); err == nil {
				t.Fatal("no error")
			} else {
				t.Logf("error: %v", firstLine(err.Error()))
			}
		})
	}
}

func firstLine(s string) string {
	for i, r := range s {
		if r == '\n' {
			return s[:i]
		}
	}
	return s
}

// TestDotGeneralSlabs runs LoweringSlabs on a weight of several slabs (the other tests' weights
// fit in one), with both scale placements and the weight on either side.
func TestDotGeneralSlabs(t *testing.T) {
	backend := testutil.Backend(t)
	rng := rand.New(rand.NewSource(9))
	const k, n = 1100, 2048 // 8 KiB per row of float32: 512 rows a slab, three slabs
	for _, axes := range [][]int{{-1}, {0}} {
		w := qint8.MustQuantize(randomTensor(rng, k, n), axes...)
		x := randomTensor(rng, 2, k)
		wDense, err := implicitarray.MaterializeOnHost(backend, w)
		if err != nil {
			t.Fatal(err)
		}
		for _, left := range []bool{false, true} {
			op := func(x, w implicitarray.Value) implicitarray.Value {
				if left {
					return implicitarray.Einsum("kn,bk->nb", w, x)
				}
				return implicitarray.MatMul(x, w)
			}
			want := tensors.MustCopyFlatData[float32](implicitarray.MustNewExec(backend, func(x, w *graph.Node) *graph.Node {
				return op(x, w).(*graph.Node)
			}).MustCall1(x, wDense).(*tensors.Tensor))
			implicitarray.ResetStats()
			got := tensors.MustCopyFlatData[float32](implicitarray.MustNewExec(backend, func(x *graph.Node, w *qint8.Array) *graph.Node {
				return op(x, w).(*graph.Node) // LoweringAuto picks slabs: 2 rows, three slabs
			}).MustCall1(x, w).(*tensors.Tensor))
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); d > 1e-3*(1+math.Abs(float64(want[i]))) {
					t.Fatalf("axes %v left %v: [%d] = %g, want %g", axes, left, i, got[i], want[i])
				}
			}
			if n := implicitarray.CurrentStats().Materializations["*int8.Array"]; n != 0 {
				t.Errorf("%d materializations", n)
			}
		}
	}
}
