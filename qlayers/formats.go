package qlayers

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/implicitarray"
)

// quantizeHost quantizes a float kernel on the host in the format cfg names (quanta.Quantize,
// never simulated).
func quantizeHost(w *tensors.Tensor, cfg quanta.Config) (implicitarray.Array, error) {
	cfg.Simulate = false
	v, err := quanta.Quantize(w, cfg)
	if err != nil {
		return nil, err
	}
	a, ok := v.(implicitarray.Array)
	if !ok {
		return nil, errors.Errorf("qlayers: quanta.Quantize returned a %T, not an implicit array", v)
	}
	return a, nil
}

// fakeQuantize is the value inference sees for the float kernel w: quantized then materialized, in
// w's dtype, with the identity gradient (the straight-through estimator) so that training
// updates w.
func fakeQuantize(w *graph.Node, cfg quanta.Config) *graph.Node {
	return quanta.StraightThrough(w, cfg)
}

// template returns a host-side array of cfg's format for a kernel of the given logical shape: the
// static metadata and component shapes that the stored components are put into.
func template(shape shapes.Shape, cfg quanta.Config) (implicitarray.Array, error) {
	return quantizeHost(tensors.FromShape(shape), cfg)
}
