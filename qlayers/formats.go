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
	return cachedTemplate(fmt.Sprintf("%s %s strategy=%s", shape, formatString(cfg), cfg.Strategy), func() (implicitarray.Array, error) {
		return quanta.Quantize(tensors.FromShape(shape), cfg)
	})
}

// cachedTemplate returns the template array cached under key, building it (and caching it when
// build succeeds) the first time.
func cachedTemplate(key string, build func() (implicitarray.Array, error)) (implicitarray.Array, error) {
	if t, ok := templates.Load(key); ok {
		return t.(implicitarray.Array), nil
	}
	t, err := build()
	if err != nil {
		return nil, err
	}
	templates.Store(key, t)
	return t, nil
}

// templates caches the template arrays by shape and format.
var templates sync.Map
