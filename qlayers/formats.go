package qlayers

import (
	"fmt"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/implicitarray"
)

// fakeQuantize is the value inference sees for the float kernel w: quantized then materialized, in
// w's dtype, with the identity gradient (the straight-through estimator) so that training
// updates w.
func fakeQuantize(w *graph.Node, cfg quanta.Config) *graph.Node {
	return quanta.StraightThrough(w, cfg)
}

// template returns a host-side array of cfg's format for a kernel of the given logical shape: the
// static metadata and component shapes that the stored components are put into. Templates are
// quantized once per shape and format (of a zero kernel) and kept for the process, so building a
// graph does not quantize a weight-sized tensor each time.
func template(shape shapes.Shape, cfg quanta.Config) (implicitarray.Array, error) {
	key := fmt.Sprintf("%s %s strategy=%s", shape, formatString(cfg), cfg.Strategy)
	if t, ok := templates.Load(key); ok {
		return t.(implicitarray.Array), nil
	}
	t, err := quanta.Quantize(tensors.FromShape(shape), cfg)
	if err != nil {
		return nil, err
	}
	templates.Store(key, t)
	return t, nil
}

// templates caches template's arrays by shape and format.
var templates sync.Map
