package main

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/internal/trainctx"
)

// TestDotGradient checks the replaced gradient of a matrix product on a case computed by hand:
// loss = Σ (x·w) ⊙ c, so d/dx = c·wᵀ and d/dw = xᵀ·c.
func TestDotGradient(t *testing.T) {
	x := [][]float32{{1, 2}}
	w := [][]float32{{1, 0, 2}, {3, 1, 0}}
	c := [][]float32{{1, 2, 3}}
	out := graph.MustExecOnceN(testutil.Backend(t), func(x, w, c *graph.Node) []*graph.Node {
		return graph.Gradient(graph.ReduceAllSum(graph.Mul(graph.Dot(x, w), c)), x, w)
	}, x, w, c)
	for i, want := range [][]float64{{1*1 + 2*0 + 3*2, 1*3 + 2*1 + 3*0}, {1, 2, 3, 2, 4, 6}} {
		if diff, _ := testutil.MaxAbsDiff(testutil.Float64s(t, out[i]), want); diff != 0 {
			t.Errorf("gradient %d = %v, want %v", i, out[i], want)
		}
	}
}

// BenchmarkTrainStep is one training step of the full-size MLP on a batch of 128, float and QAT.
func BenchmarkTrainStep(b *testing.B) {
	backend := testutil.Backend(b)
	for _, f := range []format{formats[0], formats[2], formats[6]} {
		b.Run(f.name, func(b *testing.B) {
			step := newTrainStep(backend, trainctx.New(1), f.cfg, settings{hidden: 512, learningRate: 1e-3})
			x := tensors.FromShape(shapes.Make(dtypes.Float32, 128, pixels))
			y := tensors.FromShape(shapes.Make(dtypes.Int32, 128, 1))
			if _, err := step(x, y); err != nil { // compiles
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := step(x, y); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
