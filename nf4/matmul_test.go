package nf4_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
)

// dotCase is one dot_general of an activation x with an NF4 weight w.
type dotCase struct {
	name            string
	xDims, wDims    []int
	weightOnLeft    bool
	xc, xb, wc, wb  []int
	blockSize       int
	activationDType dtypes.DType
}

func dotCases() []dotCase {
	var cases []dotCase
	for _, m := range []int{1, 8, 64} {
		cases = append(cases,
			dotCase{name: fmt.Sprintf("x@W/m=%d", m), xDims: []int{m, 48}, wDims: []int{48, 80}, xc: []int{1}, wc: []int{0}, blockSize: 32},
			dotCase{name: fmt.Sprintf("x@Wt/m=%d", m), xDims: []int{m, 80}, wDims: []int{48, 80}, xc: []int{1}, wc: []int{1}, blockSize: 32},
			dotCase{name: fmt.Sprintf("W@x/m=%d", m), xDims: []int{80, m}, wDims: []int{48, 80}, weightOnLeft: true, xc: []int{0}, wc: []int{1}, blockSize: 32},
			dotCase{name: fmt.Sprintf("Wt@x/m=%d", m), xDims: []int{48, m}, wDims: []int{48, 80}, weightOnLeft: true, xc: []int{0}, wc: []int{0}, blockSize: 32},
		)
	}
	return append(cases,
		dotCase{name: "rank3-x@W", xDims: []int{3, 5, 48}, wDims: []int{48, 70}, xc: []int{-1}, wc: []int{0}, blockSize: 64},
		dotCase{name: "rank3-x@Wt-contract-first", xDims: []int{70, 3, 5}, wDims: []int{48, 70}, xc: []int{0}, wc: []int{-1}, blockSize: 16},
		dotCase{name: "vector@W", xDims: []int{48}, wDims: []int{48, 80}, xc: []int{0}, wc: []int{0}, blockSize: 32},
		dotCase{name: "W@vector", xDims: []int{80}, wDims: []int{48, 80}, weightOnLeft: true, xc: []int{0}, wc: []int{1}, blockSize: 32},
		dotCase{name: "bf16-x@W", xDims: []int{4, 48}, wDims: []int{48, 80}, xc: []int{1}, wc: []int{0}, blockSize: 32, activationDType: dtypes.BFloat16},
		dotCase{name: "bf16-x@Wt", xDims: []int{4, 80}, wDims: []int{48, 80}, xc: []int{1}, wc: []int{1}, blockSize: 32, activationDType: dtypes.BFloat16},
		dotCase{name: "batched-rank3-W", xDims: []int{2, 4, 24}, wDims: []int{2, 24, 40}, xc: []int{2}, xb: []int{0}, wc: []int{1}, wb: []int{0}, blockSize: 8},
		dotCase{name: "two-contracting", xDims: []int{6, 4, 24}, wDims: []int{4, 24, 40}, xc: []int{1, 2}, wc: []int{0, 1}, blockSize: 8},
	)
}

// TestDotGeneral: the NF4 dot_general equals the dense dot_general of the materialized weight,
// for every strategy that serves the layout, with the NF4 operand on either side; the fused
// strategies neither hit the fallback nor materialize.
func TestDotGeneral(t *testing.T) {
	backend := testutil.Backend(t)
	for ci, tc := range dotCases() {
		w := nf4.MustQuantize(randomTensor(uint64(10+ci), tc.wDims...), tc.blockSize)
		x := randomTensor(uint64(50+ci), tc.xDims...)
		if tc.activationDType != dtypes.InvalidDType {
			x = graph.MustExecOnce(backend, func(n *graph.Node) *graph.Node { return graph.ConvertDType(n, tc.activationDType) }, x)
		}
		wDense, err := implicitarray.MaterializeOnHost(backend, w)
		if err != nil {
			t.Fatal(err)
		}
		dot := func(x, w implicitarray.Value) implicitarray.Value {
			if tc.weightOnLeft {
				return implicitarray.DotGeneral(w, tc.wc, tc.wb, x, tc.xc, tc.xb)
			}
			return implicitarray.DotGeneral(x, tc.xc, tc.xb, w, tc.wc, tc.wb)
		}
		// Reference: dense product in float32 of the materialized weight, rounded to x's dtype.
		want := flatF32(t, graph.MustExecOnce(backend, func(x, w *graph.Node) *graph.Node {
			return graph.ConvertDType(dot(graph.ConvertDType(x, dtypes.Float32), w).(*graph.Node), x.DType())
		}, x, wDense))
		for _, s := range append([]lowering.Strategy{lowering.Auto}, lowering.Strategies()...) {
			t.Run(tc.name+"/"+s.String(), func(t *testing.T) {
				e := implicitarray.MustNewExec(backend, func(x *graph.Node, w *nf4.Array) *graph.Node {
					return dot(x, w).(*graph.Node)
				})
				defer e.Finalize()
				implicitarray.ResetStats()
				out := e.MustCall1(x, w.WithStrategy(s)).(*tensors.Tensor)
				st := implicitarray.CurrentStats()
				if len(st.Fallbacks) != 0 {
					t.Errorf("fallbacks %v", st.Fallbacks)
				}
				if got := st.Materializations["*nf4.Array"]; (got != 0) != (s == lowering.Materialize) {
					t.Errorf("strategy %s materialized the weight %d times", s, got)
				}
				if st.Handled[implicitarray.Key{Op: implicitarray.OpDotGeneral, Type: "*nf4.Array"}] != 1 {
					t.Errorf("dot_general not handled by nf4: %v", st.Handled)
				}
				if out.DType() != x.DType() {
					t.Errorf("result dtype %s, want the activation's %s", out.DType(), x.DType())
				}
				got := flatF32(t, out)
				if len(got) != len(want) {
					t.Fatalf("result %s has %d values, want %d", out.Shape(), len(got), len(want))
				}
				diff, scale := maxAbsDiff(got, want)
				tol := 1e-5 * math.Max(scale, 1) * math.Sqrt(float64(tc.xDims[len(tc.xDims)-1]))
				if x.DType() == dtypes.BFloat16 {
					tol = 1e-2 * math.Max(scale, 1)
				}
				if diff > tol {
					t.Errorf("max |fused - dense| = %g > %g (scale %g)", diff, tol, scale)
				}
			})
		}
	}
}

// TestDotGeneralSlabbed covers the slab-at-a-time decode of DequantizeDot, which serves weights
// of more than two slabs (lowering.SlabBytes) with blocks along the free axis, including a K that
// is not a multiple of the slab's rows.
func TestDotGeneralSlabbed(t *testing.T) {
	backend := testutil.Backend(t)
	// More than two slabs of float32 rows and a partial one, with K > N (a down-projection).
	k, n := 4*lowering.SlabBytes/(4*1024)+37, 1024
	w := nf4.MustQuantize(randomTensor(91, k, n), 64)
	x := randomTensor(92, 3, k)
	wDense, err := implicitarray.MaterializeOnHost(backend, w)
	if err != nil {
		t.Fatal(err)
	}
	want := flatF32(t, graph.MustExecOnce(backend, graph.MatMul, x, wDense))
	implicitarray.ResetStats()
	e := implicitarray.MustNewExec(backend, func(x *graph.Node, w *nf4.Array) *graph.Node {
		return implicitarray.Materialize(implicitarray.MatMul(x, w))
	})
	got := flatF32(t, e.MustCall1(x, w.WithStrategy(lowering.DequantizeDot)).(*tensors.Tensor))
	if st := implicitarray.CurrentStats(); len(st.Fallbacks) != 0 || st.Materializations["*nf4.Array"] != 0 {
		t.Errorf("stats %+v: want no fallback and no materialization", st)
	}
	diff, scale := maxAbsDiff(got, want)
	if tol := 1e-5 * math.Max(scale, 1) * math.Sqrt(float64(k)); diff > tol {
		t.Errorf("max |slabbed - dense| = %g > %g", diff, tol)
	}
}
