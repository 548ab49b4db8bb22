package ste

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
)

// Apply returns quantize(x), converted to x's dtype, with the gradient of the identity: the
// incoming gradient reaches x unchanged. quantize must return a value of x's shape.
func Apply(x *graph.Node, quantize func(x *graph.Node) *graph.Node) *graph.Node {
	if x == nil || quantize == nil {
		panic(errors.New("ste.Apply: x and quantize must not be nil"))
	}
	q := quantize(x)
	if q == nil || !q.Shape().EqualDimensions(x.Shape()) {
		got := "nil"
		if q != nil {
			got = q.Shape().String()
		}
		panic(errors.Errorf("ste.Apply: quantize(x) has shape %s, but x is %s; accepted: a value of x's dimensions", got, x.Shape()))
	}
	if q.DType() != x.DType() {
		q = graph.ConvertDType(q, x.DType())
	}
	return graph.Add(graph.StopGradient(q), graph.Sub(x, graph.StopGradient(x)))
}
