package lowering_test

import (
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
)

// TestGradientThroughSlabs: a product DecodeDot slabs (a few rows, a weight larger than two
// slabs) can be differentiated with respect to its activations — the slabs' ordering term
// (lowering.After) carries no gradient — and the gradient is c·Wᵀ of the materialized weight, for
// NF4 and double-quantized NF4.
func TestGradientThroughSlabs(t *testing.T) {
	backend := testutil.Backend(t)
	if !backend.Capabilities().Operations[backends.OpTypePad] {
		t.Skipf("backend %s has no Pad, which the gradient of a slice needs", backend.Name())
	}
	r := rand.New(rand.NewPCG(5, 6))
	w := testutil.NormalTensor(r, 2048, 1100)
	x := testutil.NormalTensor(r, 4, 2048)
	c := testutil.NormalTensor(r, 4, 1100)
	plain := nf4.MustQuantize(w, 64)
	for name, a := range map[string]*nf4.Array{"nf4": plain, "nf4-dq": nf4.MustDoubleQuantize(plain)} {
		t.Run(name, func(t *testing.T) {
			e := implicitarray.MustNewExec(backend, func(x, c *graph.Node, w *nf4.Array) *graph.Node {
				y := lowering.DotGeneral(x, w.WithStrategy(lowering.DecodeDot), lowering.Axes{XContracting: []int{1}, WContracting: []int{0}})
				return graph.Gradient(graph.ReduceAllSum(graph.Mul(y, c)), x)[0]
			})
			defer e.Finalize()
			got, err := e.Call1(x, c, a)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			dense := testutil.Materialize(t, a)
			want := graph.MustExecOnce(backend, func(c, w *graph.Node) *graph.Node {
				return graph.DotGeneral(graph.ConvertDType(c, dtypes.Float64), []int{1}, nil, graph.ConvertDType(w, dtypes.Float64), []int{1}, nil)
			}, c, dense)
			if d, scale := testutil.MaxAbsDiff(testutil.Float64s(t, got.(*tensors.Tensor)), testutil.Float64s(t, want)); d > 1e-4*max(1, scale) {
				t.Errorf("gradient differs from c·Wᵀ by %g (scale %g)", d, scale)
			}
		})
	}
}
