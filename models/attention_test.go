package models_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
)

// TestApplyRoPE checks one rotation by hand: head width 4, base 100, position 1, so the angles
// are θ0 = 1 and θ1 = 100^(-1/2) = 0.1.
func TestApplyRoPE(t *testing.T) {
	backend := testutil.Backend(t)
	c1, s1, c2, s2 := math.Cos(1), math.Sin(1), math.Cos(0.1), math.Sin(0.1)
	tests := []struct {
		adjacent bool
		want     []float64
	}{
		// pairs (x0, x2) at θ0 and (x1, x3) at θ1
		{false, []float64{c1 - 3*s1, 2*c2 - 4*s2, s1 + 3*c1, 2*s2 + 4*c2}},
		// pairs (x0, x1) at θ0 and (x2, x3) at θ1
		{true, []float64{c1 - 2*s1, s1 + 2*c1, 3*c2 - 4*s2, 3*s2 + 4*c2}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("adjacent=%v", tc.adjacent), func(t *testing.T) {
			out := graph.MustExecOnce(backend, func(x, pos *graph.Node) *graph.Node {
				cos, sin := models.RoPETables(pos, 4, 100)
				return models.ApplyRoPE(x, cos, sin, tc.adjacent)
			}, [][][][]float32{{{{1, 2, 3, 4}}}}, []int32{1})
			got := out.Value().([][][][]float32)[0][0][0]
			for i, w := range tc.want {
				if math.Abs(float64(got[i])-w) > 1e-6 {
					t.Errorf("element %d = %g, want %g", i, got[i], w)
				}
			}
		})
	}
}

// TestNewKVCacheErrors: the cache view names what it accepts.
func TestNewKVCacheErrors(t *testing.T) {
	backend := testutil.Backend(t)
	c := shapes.Make(dtypes.Float32, 1, 2, 8, 4)
	for _, tc := range []struct {
		name   string
		caches []shapes.Shape
		window int
		want   string
	}{
		{"odd", []shapes.Shape{c}, 8, "keys and values"},
		{"rank", []shapes.Shape{shapes.Make(dtypes.Float32, 2, 8, 4), shapes.Make(dtypes.Float32, 2, 8, 4)}, 8, "[batch, kvHeads, length, headDim]"},
		{"mixed", []shapes.Shape{c, shapes.Make(dtypes.Float32, 1, 2, 9, 4)}, 8, "one shape"},
		{"window", []shapes.Shape{c, c}, 9, "window 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := catch(func() {
				graph.MustExecOnce(backend, func(g *graph.Graph) *graph.Node {
					var nodes []*graph.Node
					for _, s := range tc.caches {
						nodes = append(nodes, graph.Zeros(g, s))
					}
					models.NewKVCache(graph.Const(g, int32(0)), tc.window, nodes)
					return graph.Const(g, 0)
				})
			})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want one naming %q", err, tc.want)
			}
		})
	}
}

// TestSlidingCausalMask: a query at position q sees the keys q−window+1..q, by hand.
func TestSlidingCausalMask(t *testing.T) {
	backend := testutil.Backend(t)
	out := graph.MustExecOnce(backend, func(pos *graph.Node) *graph.Node {
		return models.SlidingCausalMask(pos, 6, 3)
	}, []int32{0, 2, 5})
	want := [][]bool{
		{true, false, false, false, false, false},
		{true, true, true, false, false, false},
		{false, false, false, true, true, true},
	}
	if got := out.Value().([][]bool); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("mask %v, want %v", got, want)
	}
}
