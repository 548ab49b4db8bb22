package implicitarray

import (
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
)

// Materialize returns the dense node a Value stands for: a *graph.Node is returned as is, an
// implicit Array is materialized level by level until dense. Every level is counted in Stats.
// It panics, naming the type, if v is nil, a host tensor or anything else.
func Materialize(v Value) *graph.Node {
	for {
		switch x := v.(type) {
		case *graph.Node:
			if x == nil {
				break
			}
			return x
		case Array:
			if isNil(x) {
				break
			}
			v = materializeOnce(x)
			continue
		}
		panic(errors.Errorf("implicitarray.Materialize: cannot materialize %s; accepted: *graph.Node or an "+
			"implicitarray.Array whose components are graph nodes", describe(v)))
	}
}

// MaterializeNested materializes an implicit array one level (full=false: the result may itself be
// implicit) or until dense (full=true).
func MaterializeNested(a Array, full bool) Value {
	if isNil(a) {
		panic(errors.New("implicitarray.MaterializeNested: nil array"))
	}
	if full {
		return Materialize(a)
	}
	return materializeOnce(a)
}

func materializeOnce(a Array) Value {
	stats.countMaterialize(a)
	v := a.Materialize()
	if isNil(v) {
		panic(errors.Errorf("implicitarray: %s.Materialize returned nil for %s", TypeName(a), a.Shape()))
	}
	if !v.Shape().Equal(a.Shape()) {
		panic(errors.Errorf("implicitarray: %s.Materialize returned shape %s, but the array's logical shape is %s",
			TypeName(a), v.Shape(), a.Shape()))
	}
	return v
}

// OnGraph returns a copy of a host-side array whose tensor components (nested ones included) are
// constants of g. Handy for tests and for small arrays baked into a graph; to feed weights that
// change, pass the array to Exec instead, which makes them parameters.
func OnGraph(g *graph.Graph, a Array) Array {
	comps := a.Components()
	out := make([]Component, len(comps))
	for i, c := range comps {
		switch {
		case c.IsTensor():
			out[i] = NodeComponent(graph.ConstTensor(g, c.Tensor()))
		case c.IsArray():
			out[i] = ArrayComponent(OnGraph(g, c.Array()))
		default:
			out[i] = c
		}
	}
	return a.WithComponents(out)
}

// MaterializeOnHost runs a small graph on backend that materializes a host-side array, and returns
// the dense tensor. For inspection and tests; inside models, keep arrays implicit and let the
// graph materialize (or better, not).
func MaterializeOnHost(backend backends.Backend, a Array) (*tensors.Tensor, error) {
	e, err := NewExec(backend, func(x Array) *graph.Node { return Materialize(x) })
	if err != nil {
		return nil, err
	}
	defer e.Finalize()
	out, err := e.Call1(a)
	if err != nil {
		return nil, err
	}
	return out.(*tensors.Tensor), nil
}
