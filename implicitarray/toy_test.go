package implicitarray_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// toy is the implicit type of these tests: a payload (dense, or nested implicit) times a scalar
// scale. The type parameter only makes distinct Go types, so each test can register rules for its
// own type without touching the others.
type toy[Tag any] struct {
	payload, scale implicitarray.Component
	warn           bool
}

type (
	plainTag     struct{}
	warnTag      struct{}
	precTag      struct{}
	ambiguousTag struct{}
	forbidTag    struct{}
)

var _ implicitarray.Array = (*toy[plainTag])(nil)

func (s *toy[Tag]) Shape() shapes.Shape { return s.payload.Shape() }
func (s *toy[Tag]) Components() []implicitarray.Component {
	return []implicitarray.Component{s.payload, s.scale}
}
func (s *toy[Tag]) Metadata() string { return fmt.Sprintf("warn=%v", s.warn) }
func (s *toy[Tag]) WithComponents(c []implicitarray.Component) implicitarray.Array {
	return &toy[Tag]{payload: c[0], scale: c[1], warn: s.warn}
}
func (s *toy[Tag]) Materialize() implicitarray.Value {
	p := implicitarray.Materialize(s.payload.Value())
	return graph.Mul(p, graph.ConvertDType(s.scale.Node(), p.DType()))
}

// FallbackPolicy forbids the fallback for the forbidTag instantiation, else warns when asked.
func (s *toy[Tag]) FallbackPolicy() implicitarray.Fallback {
	switch {
	case isForbid(s):
		return implicitarray.FallbackForbid
	case s.warn:
		return implicitarray.FallbackWarn
	}
	return implicitarray.FallbackSilent
}

func isForbid(v any) bool {
	_, ok := v.(*toy[forbidTag])
	return ok
}

// hostToy builds a host-side toy from a Go slice payload and a scale.
func hostToy[Tag any](payload any, scale float32) *toy[Tag] {
	return &toy[Tag]{
		payload: implicitarray.TensorComponent(tensors.FromAnyValue(payload)),
		scale:   implicitarray.TensorComponent(tensors.FromValue(scale)),
	}
}

// graphToy builds a graph-side toy from a node payload and a scale.
func graphToy[Tag any](payload *graph.Node, scale float32) *toy[Tag] {
	return &toy[Tag]{
		payload: implicitarray.NodeComponent(payload),
		scale:   implicitarray.NodeComponent(graph.Const(payload.Graph(), scale)),
	}
}

// run builds and executes a graph with no parameters, returning its outputs.
func run(t *testing.T, backend backends.Backend, build func(g *graph.Graph) []*graph.Node) []*tensors.Tensor {
	t.Helper()
	e, err := graph.NewExec(backend, build)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Finalize()
	out, err := e.Exec()
	if err != nil {
		t.Fatalf("%+v", err)
	}
	return out
}

func assertClose(t *testing.T, got, want *tensors.Tensor, tol float64) {
	t.Helper()
	if !got.Shape().Equal(want.Shape()) {
		t.Fatalf("shape %s, want %s", got.Shape(), want.Shape())
	}
	g, w := testutil.Float64s(t, got), testutil.Float64s(t, want)
	for i := range g {
		if math.Abs(g[i]-w[i]) > tol*(1+math.Abs(w[i])) && !(math.IsNaN(g[i]) && math.IsNaN(w[i])) {
			t.Fatalf("element %d: got %v, want %v", i, g[i], w[i])
		}
	}
}

// newBackend is a shorthand used by every test.
func newBackend(t *testing.T) backends.Backend { return testutil.Backend(t) }

// lazyNeg stands for -inner; its Materialize returns Neg(inner), which stays implicit when a
// handler keeps it so: one level of materialization is then another implicit array.
type lazyNeg struct{ inner implicitarray.Array }

func (l *lazyNeg) Shape() shapes.Shape { return l.inner.Shape() }
func (l *lazyNeg) Components() []implicitarray.Component {
	return []implicitarray.Component{implicitarray.ArrayComponent(l.inner)}
}
func (l *lazyNeg) Metadata() string { return "" }
func (l *lazyNeg) WithComponents(c []implicitarray.Component) implicitarray.Array {
	return &lazyNeg{inner: c[0].Array()}
}
func (l *lazyNeg) Materialize() implicitarray.Value { return implicitarray.Neg(l.inner) }
