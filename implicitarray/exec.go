package implicitarray

import (
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/execcache"
)

// Func is a graph function whose parameters and results may hold implicit arrays, as Exec runs
// it: one parameter per argument, each a *graph.Node, an implicit array type (e.g. *nf4.Array), a
// Value, or a struct / pointer to struct / map / slice mirroring the argument's structure with
// those at the leaves; one or more results of the same kinds. It is the plumbing Exec shares with
// executors that place their inputs differently (package mesh): FlattenArgs on the host, Build
// inside the graph, Results back on the host.
type Func struct {
	fn      reflect.Value
	fnType  reflect.Type
	hostOut []reflect.Type
}

// NewFunc validates fn (see Func).
func NewFunc(fn any) (*Func, error) {
	fv := reflect.ValueOf(fn)
	if fv.Kind() != reflect.Func || fv.IsNil() {
		return nil, errors.Errorf("graph function is a %T; accepted: a func", fn)
	}
	ft := fv.Type()
	if ft.IsVariadic() || ft.NumOut() == 0 {
		return nil, errors.Errorf("graph function %s must be non-variadic and return at least one value", ft)
	}
	f := &Func{fn: fv, fnType: ft}
	for i := range ft.NumOut() {
		ht, err := hostType(ft.Out(i))
		if err != nil {
			return nil, errors.WithMessagef(err, "result #%d of %s", i, ft)
		}
		f.hostOut = append(f.hostOut, ht)
	}
	return f, nil
}

// String names the function's type, for messages.
func (f *Func) String() string { return f.fnType.String() }

// FlattenArgs flattens host arguments into their leaves (host tensors only) and returns the
// TreeDefs to rebuild them, plus a key naming their structure, metadata and shapes.
func (f *Func) FlattenArgs(args []any) (leaves []*tensors.Tensor, defs []*TreeDef, key string, err error) {
	if len(args) != f.fnType.NumIn() {
		return nil, nil, "", errors.Errorf("got %d arguments, the function takes %d", len(args), f.fnType.NumIn())
	}
	defs = make([]*TreeDef, len(args))
	keys := make([]string, len(args))
	for i, arg := range args {
		l, def, err := Flatten(arg)
		if err != nil {
			return nil, nil, "", errors.WithMessagef(err, "argument #%d", i)
		}
		for _, leaf := range l {
			t, ok := leaf.(*tensors.Tensor)
			if !ok {
				return nil, nil, "", errors.Errorf("argument #%d holds a %s; accepted: host tensors "+
					"(graph nodes cannot cross into another graph)", i, describe(leaf))
			}
			leaves = append(leaves, t)
		}
		// Check on the host, with the host values, that the argument fits its parameter, so the
		// error names what the caller passed (inside the graph it would name nodes).
		if ht, err := hostType(f.fnType.In(i)); err == nil {
			if _, err := def.UnflattenAs(l, ht); err != nil {
				return nil, nil, "", errors.WithMessagef(err, "argument #%d (%s) does not fit parameter type %s",
					i, describe(arg), f.fnType.In(i))
			}
		}
		defs[i], keys[i] = def, def.String()
	}
	if len(leaves) == 0 {
		return nil, nil, "", errors.New("the arguments hold no arrays")
	}
	return leaves, defs, strings.Join(keys, ";"), nil
}

// Build runs inside graph construction: it rebuilds the arguments described by inDefs with nodes
// (one per leaf, in order) in place of tensors, calls the function, and returns the results'
// leaf nodes with the TreeDefs to rebuild them. It panics, as graph building does, on a mismatch.
func (f *Func) Build(inDefs []*TreeDef, nodes []*graph.Node) ([]*graph.Node, []*TreeDef) {
	in := make([]reflect.Value, len(inDefs))
	next := 0
	for i, def := range inDefs {
		leaves := make([]any, def.NumLeaves())
		for j := range leaves {
			leaves[j] = nodes[next]
			next++
		}
		v, err := def.UnflattenAs(leaves, f.fnType.In(i))
		if err != nil {
			panic(errors.WithMessagef(err, "argument #%d does not fit parameter type %s", i, f.fnType.In(i)))
		}
		in[i] = v
	}
	out := f.fn.Call(in)
	var outNodes []*graph.Node
	outDefs := make([]*TreeDef, len(out))
	for i, o := range out {
		leaves, def, err := Flatten(o.Interface())
		if err != nil {
			panic(errors.WithMessagef(err, "result #%d", i))
		}
		for _, leaf := range leaves {
			n, ok := leaf.(*graph.Node)
			if !ok {
				panic(errors.Errorf("result #%d holds a %s; accepted: graph nodes and implicit arrays of nodes", i, describe(leaf)))
			}
			outNodes = append(outNodes, n)
		}
		outDefs[i] = def
	}
	return outNodes, outDefs
}

// Results rebuilds the function's results on the host from the output tensors (in the order of
// Build's leaf nodes): a *graph.Node result becomes a *tensors.Tensor, an implicit array the same
// type holding tensors.
func (f *Func) Results(outDefs []*TreeDef, outputs []*tensors.Tensor) ([]any, error) {
	results := make([]any, len(outDefs))
	next := 0
	for i, def := range outDefs {
		if next+def.NumLeaves() > len(outputs) {
			return nil, errors.Errorf("result #%d: %d outputs for %d leaves", i, len(outputs), next+def.NumLeaves())
		}
		leaves := make([]any, def.NumLeaves())
		for j := range leaves {
			leaves[j] = outputs[next]
			next++
		}
		v, err := def.UnflattenAs(leaves, f.hostOut[i])
		if err != nil {
			return nil, errors.WithMessagef(err, "result #%d", i)
		}
		results[i] = v.Interface()
	}
	return results, nil
}

// Exec compiles and runs a graph function whose arguments and results may hold implicit arrays:
// the analogue of JAX's jit over functions of implicit arrays.
//
// The function is a Func: parameters and results are nodes, implicit arrays, Values, or
// structures of them. Call flattens the host arguments into tensors, builds (once per structure,
// metadata and shapes) a graph whose parameters are those tensors, rebuilds the arguments inside
// it with nodes in place of tensors, runs it, and rebuilds the results on the host: a *graph.Node
// result comes back as a *tensors.Tensor, an implicit array as the same type holding tensors.
type Exec struct {
	backend   backends.Backend
	fn        *Func
	name      string
	configure func(*graph.Exec)

	mu    sync.Mutex // guards configure
	cache execcache.Cache[*TreeDef]
}

// NewExec validates fn (see Func) and returns an Exec that runs it on backend.
func NewExec(backend backends.Backend, fn any) (*Exec, error) {
	if backend == nil {
		return nil, errors.New("implicitarray.NewExec: nil backend")
	}
	f, err := NewFunc(fn)
	if err != nil {
		return nil, errors.WithMessage(err, "implicitarray.NewExec")
	}
	return &Exec{backend: backend, fn: f, name: fmt.Sprintf("implicit:%s", f)}, nil
}

// MustNewExec is NewExec that panics on error.
func MustNewExec(backend backends.Backend, fn any) *Exec {
	e, err := NewExec(backend, fn)
	if err != nil {
		panic(err)
	}
	return e
}

// WithConfig registers a function applied to every graph.Exec this Exec creates (for device
// assignment, ...). It returns e for chaining; call it before the first Call.
func (e *Exec) WithConfig(configure func(*graph.Exec)) *Exec {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.configure = configure
	return e
}

// Call runs the function on args (host tensors, host-side implicit arrays, Go numbers, or
// structures of them) and returns its results on the host.
func (e *Exec) Call(args ...any) ([]any, error) {
	leaves, defs, key, err := e.fn.FlattenArgs(args)
	if err != nil {
		return nil, errors.WithMessagef(err, "implicitarray.Exec %s", e.name)
	}
	entry := e.entry(key, defs)
	inputs := make([]any, len(leaves))
	for i, l := range leaves {
		inputs[i] = l
	}
	outputs, err := entry.Exec.Exec(inputs...)
	if err != nil {
		return nil, errors.WithMessagef(err, "implicitarray.Exec %s", e.name)
	}
	results, err := e.fn.Results(entry.OutDefs, outputs)
	if err != nil {
		return nil, errors.WithMessagef(err, "implicitarray.Exec %s", e.name)
	}
	return results, nil
}

// MustCall is Call that panics on error.
func (e *Exec) MustCall(args ...any) []any {
	results, err := e.Call(args...)
	if err != nil {
		panic(err)
	}
	return results
}

// Call1 is Call for a function with one result.
func (e *Exec) Call1(args ...any) (any, error) {
	results, err := e.Call(args...)
	if err != nil {
		return nil, err
	}
	return results[0], nil
}

// MustCall1 is Call1 that panics on error.
func (e *Exec) MustCall1(args ...any) any { return e.MustCall(args...)[0] }

// Finalize releases the compiled graphs. Call is safe for concurrent use, but Finalize must not
// run while a Call is in flight.
func (e *Exec) Finalize() { e.cache.Finalize() }

func (e *Exec) entry(key string, defs []*TreeDef) *execcache.Entry[*TreeDef] {
	entry, _ := e.cache.Get(key, e.fn, defs, func(graphFn func([]*graph.Node) []*graph.Node) (*graph.Exec, error) {
		exec := graph.MustNewExec(e.backend, graphFn).WithName(e.name)
		e.mu.Lock()
		configure := e.configure
		e.mu.Unlock()
		if configure != nil {
			configure(exec)
		}
		return exec, nil
	})
	return entry
}

// hostType maps a graph-side result type to the type that carries it on the host: *graph.Node
// becomes *tensors.Tensor, containers convert their elements, interfaces (Value, Array, any) and
// implicit array types stay, and a struct must already accept host values in every field.
func hostType(t reflect.Type) (reflect.Type, error) {
	switch {
	case t == nodeType:
		return tensorType, nil
	case t.Kind() == reflect.Interface || t.Implements(arrayType):
		return t, nil
	}
	switch t.Kind() {
	case reflect.Slice:
		et, err := hostType(t.Elem())
		return reflect.SliceOf(et), err
	case reflect.Array:
		et, err := hostType(t.Elem())
		return reflect.ArrayOf(t.Len(), et), err
	case reflect.Map:
		et, err := hostType(t.Elem())
		return reflect.MapOf(t.Key(), et), err
	case reflect.Pointer:
		if _, err := hostType(t.Elem()); err != nil {
			return nil, err
		}
		return t, nil
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			ht, err := hostType(f.Type)
			if err != nil {
				return nil, err
			}
			if ht != f.Type {
				return nil, errors.Errorf("field %s.%s of type %s cannot carry a host %s; declare it as implicitarray.Value",
					t, f.Name, f.Type, ht)
			}
		}
		return t, nil
	}
	return nil, errors.Errorf("type %s cannot be a result; accepted: *graph.Node, an implicit array, implicitarray.Value, "+
		"or structs, maps and slices of them", t)
}
