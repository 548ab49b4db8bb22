package ste_test

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/ste"
)

// roundToHalf is a stand-in quantizer: round to the nearest multiple of 0.5, in int32.
func roundToHalf(x *graph.Node) *graph.Node {
	return graph.ConvertDType(graph.Round(graph.MulScalar(x, 2)), dtypes.Int32)
}

func TestApply(t *testing.T) {
	backend := testutil.Backend(t)
	w := []float32{0.3, -1.26, 2.0, 0.74}
	c := []float32{1.5, -2, 0.25, 4}
	e := graph.MustNewExec(backend, func(w, c *graph.Node) (*graph.Node, *graph.Node) {
		q := ste.Apply(w, func(x *graph.Node) *graph.Node {
			return graph.MulScalar(graph.ConvertDType(roundToHalf(x), dtypes.Float32), 0.5)
		})
		loss := graph.ReduceAllSum(graph.Mul(q, c))
		return q, graph.Gradient(loss, w)[0]
	})
	q, grad := e.MustExec2(w, c)
	wantQ := []float32{0.5, -1.5, 2, 0.5}
	for i, v := range q.Value().([]float32) {
		if v != wantQ[i] {
			t.Errorf("forward[%d] = %v, want %v", i, v, wantQ[i])
		}
	}
	// The gradient of sum(q*c) w.r.t. w is exactly c.
	for i, v := range grad.Value().([]float32) {
		if v != c[i] {
			t.Errorf("grad[%d] = %v, want %v", i, v, c[i])
		}
	}
}

func TestApplyConvertsDTypeAndChecksShape(t *testing.T) {
	backend := testutil.Backend(t)
	e := graph.MustNewExec(backend, func(w *graph.Node) *graph.Node { return ste.Apply(w, roundToHalf) })
	got := e.MustExec1([]float64{0.26, -0.74})
	if v := got.Value().([]float64); v[0] != 1 || v[1] != -1 {
		t.Errorf("got %v, want [1 -1] as float64 (the int32 codes converted to x's dtype)", v)
	}
	bad := graph.MustNewExec(backend, func(w *graph.Node) *graph.Node {
		return ste.Apply(w, func(x *graph.Node) *graph.Node { return graph.ReduceAllSum(x) })
	})
	if _, err := bad.Exec([]float32{1, 2}); err == nil {
		t.Error("a quantize function that changes the shape was accepted")
	}
}
