package lowering_test

import (
	"math/rand/v2"
	"testing"

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

// TestGradientEveryStrategy: every CPU formulation of every format can be differentiated with
// respect to its activations on the test backend, the pure-Go one included (which has no Pad, the
// gradient of a slice in GoMLX), and the gradient is the dense product's: Auto at one row picks
// SlicedSum there for NF4 x·W and for signs weights up to 16 rows. On XLA CPU without
// QUANTA_TEST_ALL=1: x·W at 3 rows, Auto and SlicedSum.
func TestGradientEveryStrategy(t *testing.T) {
	backend := testutil.Backend(t)
	kernels := lowering.PlatformOf(backend)&lowering.Kernels != 0
	r := rand.New(rand.NewPCG(9, 10))
	fs := append(formats(), format{name: "nf4/padded", layout: "blockwise4",
		make: func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized {
			return nf4.MustQuantize(testutil.NormalTensor(r, dims...), 8).WithStrategy(s) // 12 = 16 - 4 padded
		}})
	var cases []productCase
	for _, c := range productCases() {
		if c.name == "x@W/m=3" || !xlaQuick(t) && (c.name == "x@W/m=1" || c.name == "Wt@x" || c.name == "x@Wt") {
			cases = append(cases, c)
		}
	}
	strategies := []lowering.Strategy{lowering.Auto, lowering.DecodeDot, lowering.MulReduce, lowering.SlicedSum, lowering.ProductTable}
	if xlaQuick(t) {
		strategies = []lowering.Strategy{lowering.Auto, lowering.SlicedSum}
	}
	for _, f := range fs {
		for _, c := range cases {
			w := f.make(r, c.wDims, lowering.Auto)
			x := activations(t, r, c.xDims, dtypes.Float32)
			dense := testutil.Materialize(t, w)
			for _, s := range strategies {
				if !served(s, f, c, dtypes.Float32, kernels) {
					continue
				}
				t.Run(f.name+"/"+c.name+"/"+s.String(), func(t *testing.T) {
					e := implicitarray.MustNewExec(backend, func(x *graph.Node, w implicitarray.Array, dense *graph.Node) (*graph.Node, *graph.Node) {
						loss := func(y *graph.Node) *graph.Node { return graph.ReduceAllSum(graph.Mul(y, y)) }
						got := graph.Gradient(loss(lowering.DotGeneral(x, w.(lowering.Quantized), c.axes)), x)[0]
						d := graph.ConvertDType(dense, dtypes.Float32)
						var y *graph.Node
						if c.axes.WeightOnLeft {
							y = graph.DotGeneral(d, c.axes.WContracting, nil, x, c.axes.XContracting, nil)
						} else {
							y = graph.DotGeneral(x, c.axes.XContracting, nil, d, c.axes.WContracting, nil)
						}
						return got, graph.Gradient(loss(y), x)[0]
					})
					defer e.Finalize()
					out, err := e.Call(x, withComponentsOf(f.make(r, c.wDims, s), w), dense)
					if err != nil {
						t.Fatalf("%+v", err)
					}
					got, want := testutil.Float64s(t, out[0].(*tensors.Tensor)), testutil.Float64s(t, out[1].(*tensors.Tensor))
					if d, scale := testutil.MaxAbsDiff(got, want); d > 1e-4*max(1, scale) {
						t.Errorf("gradient differs from the dense product's by %g (scale %g)", d, scale)
					}
				})
			}
		}
	}
}
