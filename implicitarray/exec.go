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
)

// Exec compiles and runs a graph function whose arguments and results may hold implicit arrays:
// the analogue of eformer's jit(implicit(f)).
//
// The function takes one parameter per argument of Call, each a *graph.Node, an implicit array
// type (e.g. *nf4.Array), a Value, or a struct / pointer to struct / map / slice mirroring the
// argument's structure with those at the leaves. It returns one or more such values. Call
// flattens the host arguments into tensors, builds (once per structure, metadata and shapes) a
// graph whose parameters are those tensors, rebuilds the arguments inside it with nodes in place
// of tensors, runs it, and rebuilds the results on the host: a *graph.Node result comes back as a
// *tensors.Tensor, an implicit array as the same type holding tensors.
type Exec struct {
	backend   backends.Backend
	fn        reflect.Value
	fnType    reflect.Type
	hostOut   []reflect.Type
	name      string
	configure func(*graph.Exec)

	mu      sync.Mutex
	entries map[string]*execEntry
}

type execEntry struct {
	exec    *graph.Exec
	inDefs  []*TreeDef
	outDefs []*TreeDef
}

// NewExec validates fn (see Exec) and returns an Exec that runs it on backend.
func NewExec(backend backends.Backend, fn any) (*Exec, error) {
	if backend == nil {
		return nil, errors.New("implicitarray.NewExec: nil backend")
	}
	fv := reflect.ValueOf(fn)
	if fv.Kind() != reflect.Func || fv.IsNil() {
		return nil, errors.Errorf("implicitarray.NewExec: graph function is a %T; accepted: a func", fn)
	}
	ft := fv.Type()
	if ft.IsVariadic() || ft.NumOut() == 0 {
		return nil, errors.Errorf("implicitarray.NewExec: graph function %s must be non-variadic and return at least one value", ft)
	}
	e := &Exec{backend: backend, fn: fv, fnType: ft, entries: map[string]*execEntry{},
		name: fmt.Sprintf("implicit:%s", ft)}
	for i := range ft.NumOut() {
		ht, err := hostType(ft.Out(i))
		if err != nil {
			return nil, errors.WithMessagef(err, "implicitarray.NewExec: result #%d of %s", i, ft)
		}
		e.hostOut = append(e.hostOut, ht)
	}
	return e, nil
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
// assignment, SPMD sharding, ...). It returns e for chaining; call it before the first Call.
func (e *Exec) WithConfig(configure func(*graph.Exec)) *Exec {
	e.configure = configure
	return e
}

// Call runs the function on args (host tensors, host-side implicit arrays, Go numbers, or
// structures of them) and returns its results on the host.
func (e *Exec) Call(args ...any) ([]any, error) {
	if len(args) != e.fnType.NumIn() {
		return nil, errors.Errorf("implicitarray.Exec %s: got %d arguments, the function takes %d", e.name, len(args), e.fnType.NumIn())
	}
	var leaves []any
	defs := make([]*TreeDef, len(args))
	keys := make([]string, len(args))
	for i, arg := range args {
		l, def, err := Flatten(arg)
		if err != nil {
			return nil, errors.WithMessagef(err, "implicitarray.Exec: argument #%d", i)
		}
		for _, leaf := range l {
			if _, ok := leaf.(*tensors.Tensor); !ok {
				return nil, errors.Errorf("implicitarray.Exec: argument #%d holds a %s; accepted: host tensors "+
					"(graph nodes cannot cross into another graph)", i, describe(leaf))
			}
		}
		leaves = append(leaves, l...)
		defs[i], keys[i] = def, def.String()
	}
	if len(leaves) == 0 {
		return nil, errors.Errorf("implicitarray.Exec %s: the arguments hold no arrays", e.name)
	}
	entry := e.entry(strings.Join(keys, ";"), defs)
	outputs, err := entry.exec.Exec(leaves...)
	if err != nil {
		return nil, errors.WithMessagef(err, "implicitarray.Exec %s", e.name)
	}
	results := make([]any, len(entry.outDefs))
	next := 0
	for i, def := range entry.outDefs {
		outLeaves := make([]any, def.NumLeaves())
		for j := range outLeaves {
			outLeaves[j] = outputs[next]
			next++
		}
		v, err := def.UnflattenAs(outLeaves, e.hostOut[i])
		if err != nil {
			return nil, errors.WithMessagef(err, "implicitarray.Exec %s: result #%d", e.name, i)
		}
		results[i] = v.Interface()
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

// Finalize releases the compiled graphs.
func (e *Exec) Finalize() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, entry := range e.entries {
		entry.exec.Finalize()
	}
	e.entries = map[string]*execEntry{}
}

func (e *Exec) entry(key string, defs []*TreeDef) *execEntry {
	e.mu.Lock()
	defer e.mu.Unlock()
	if entry, ok := e.entries[key]; ok {
		return entry
	}
	entry := &execEntry{inDefs: defs}
	entry.exec = graph.MustNewExec(e.backend, func(nodes []*graph.Node) []*graph.Node {
		return e.build(entry, nodes)
	}).WithName(e.name)
	if e.configure != nil {
		e.configure(entry.exec)
	}
	e.entries[key] = entry
	return entry
}

// build runs inside graph construction: rebuild the arguments with nodes, call fn, flatten results.
func (e *Exec) build(entry *execEntry, nodes []*graph.Node) []*graph.Node {
	in := make([]reflect.Value, len(entry.inDefs))
	next := 0
	for i, def := range entry.inDefs {
		leaves := make([]any, def.NumLeaves())
		for j := range leaves {
			leaves[j] = nodes[next]
			next++
		}
		v, err := def.UnflattenAs(leaves, e.fnType.In(i))
		if err != nil {
			panic(errors.WithMessagef(err, "argument #%d does not fit parameter type %s", i, e.fnType.In(i)))
		}
		in[i] = v
	}
	out := e.fn.Call(in)
	var outNodes []*graph.Node
	entry.outDefs = make([]*TreeDef, len(out))
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
		entry.outDefs[i] = def
	}
	return outNodes
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
