package implicitarray_test

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/quanta-ml/quanta/implicitarray"
)

// scaled is the toy implicit type of these tests: a dense payload times a scalar scale.
type scaled struct {
	payload, scale implicitarray.Component
	warn           bool
}

var _ implicitarray.Array = (*scaled)(nil)

func newScaled(payload, scale implicitarray.Component) *scaled {
	return &scaled{payload: payload, scale: scale}
}

func (s *scaled) Shape() shapes.Shape { return s.payload.Shape() }
func (s *scaled) Components() []implicitarray.Component {
	return []implicitarray.Component{s.payload, s.scale}
}
func (s *scaled) Metadata() string { return fmt.Sprintf("warn=%v", s.warn) }
func (s *scaled) WithComponents(c []implicitarray.Component) implicitarray.Array {
	return &scaled{payload: c[0], scale: c[1], warn: s.warn}
}
func (s *scaled) Materialize() implicitarray.Value {
	p := implicitarray.Materialize(s.payload.Value())
	return graph.Mul(p, graph.ConvertDType(s.scale.Node(), p.DType()))
}
func (s *scaled) WarnOnMaterialize() bool { return s.warn }
