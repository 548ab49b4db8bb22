package mesh

import (
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
)

// Exec compiles and runs a graph function over a mesh of devices, with its arguments — dense
// tensors and implicit arrays — sharded: the analogue of jax.jit with in_shardings over a mesh
// (XLA's automatic SPMD partitioning, GoMLX's distributed.AutoSharding strategy).
//
// The function is written as for implicitarray.Exec: one parameter per argument of Call (a
// *graph.Node, an implicit array type, an implicitarray.Value, or a structure of them), one or
// more results (*graph.Node, an implicit array type or implicitarray.Value). It sees logical
// shapes; XLA partitions it, inserting the collectives the shardings need (e.g. the all-reduce of
// a matmul whose contracting axis is sharded). Each argument is flattened into its components,
// every component is cut into one shard per device by FlatSpecs, and each device receives only
// its shards. Results come back replicated, as host tensors or implicit arrays of host tensors.
type Exec struct {
	backend  backends.Backend
	mesh     *Mesh
	fn       reflect.Value
	fnType   reflect.Type
	hostOut  []reflect.Type
	name     string
	argSpecs []PartitionSpec

	mu      sync.Mutex
	entries map[string]*execEntry
}

type execEntry struct {
	exec    *graph.Exec
	inDefs  []*implicitarray.TreeDef
	outDefs []*implicitarray.TreeDef
}

var (
	nodeType   = reflect.TypeFor[*graph.Node]()
	tensorType = reflect.TypeFor[*tensors.Tensor]()
	arrayType  = reflect.TypeFor[implicitarray.Array]()
)

// NewExec returns an Exec that runs fn over m on backend. It fails if backend has fewer devices
// than m (see Mesh.CheckDevices) or fn is not a valid graph function.
func NewExec(backend backends.Backend, m *Mesh, fn any) (*Exec, error) {
	if m == nil {
		return nil, errors.New("mesh.NewExec: nil mesh")
	}
	if err := m.CheckDevices(backend); err != nil {
		return nil, errors.WithMessage(err, "mesh.NewExec")
	}
	if _, err := m.DeviceMesh(); err != nil {
		return nil, errors.WithMessage(err, "mesh.NewExec")
	}
	fv := reflect.ValueOf(fn)
	if fv.Kind() != reflect.Func || fv.IsNil() {
		return nil, errors.Errorf("mesh.NewExec: graph function is a %T; accepted: a func", fn)
	}
	ft := fv.Type()
	if ft.IsVariadic() || ft.NumOut() == 0 {
		return nil, errors.Errorf("mesh.NewExec: graph function %s must be non-variadic and return at least one value", ft)
	}
	e := &Exec{backend: backend, mesh: m, fn: fv, fnType: ft, entries: map[string]*execEntry{},
		name: fmt.Sprintf("mesh:%s", ft)}
	for i := range ft.NumOut() {
		out := ft.Out(i)
		switch {
		case out == nodeType:
			e.hostOut = append(e.hostOut, tensorType)
		case out.Kind() == reflect.Interface || out.Implements(arrayType):
			e.hostOut = append(e.hostOut, out)
		default:
			return nil, errors.Errorf("mesh.NewExec: result #%d of %s is a %s; accepted: *graph.Node, an implicit array type or implicitarray.Value", i, ft, out)
		}
	}
	return e, nil
}

// MustNewExec is NewExec that panics on error.
func MustNewExec(backend backends.Backend, m *Mesh, fn any) *Exec {
	e, err := NewExec(backend, m, fn)
	if err != nil {
		panic(err)
	}
	return e
}

// WithArgSpecs sets the PartitionSpec of the arguments, one per argument of Call (missing ones,
// and nil, mean replicated): it shards a dense tensor argument, or an implicit array argument
// that has no Sharding of its own (see FlatSpecs). Call it before the first Call; it returns e.
func (e *Exec) WithArgSpecs(specs ...PartitionSpec) *Exec {
	e.argSpecs = specs
	return e
}

// Mesh returns the mesh e runs over.
func (e *Exec) Mesh() *Mesh { return e.mesh }

// Placed holds the arguments of a call flattened into their leaves, each cut into shards by its
// PartitionSpec and each shard on its device: Leaves[i].Shards()[d] lives on device d. Placing
// once and calling CallPlaced many times keeps weights on the devices.
type Placed struct {
	// Leaves are the flattened arguments (implicit arrays as their components), in order.
	Leaves []*distributed.Tensor

	// Specs are the leaves' PartitionSpecs (FlatSpecs).
	Specs []PartitionSpec

	key  string
	defs []*implicitarray.TreeDef
}

// Place flattens args, shards every leaf over the mesh (FlatSpecs, with the specs of
// WithArgSpecs) and copies each shard to its device.
func (e *Exec) Place(args ...any) (*Placed, error) {
	if len(args) != e.fnType.NumIn() {
		return nil, errors.Errorf("mesh.Exec %s: got %d arguments, the function takes %d", e.name, len(args), e.fnType.NumIn())
	}
	p := &Placed{defs: make([]*implicitarray.TreeDef, len(args))}
	keys := make([]string, len(args))
	for i, arg := range args {
		var argSpec PartitionSpec
		if i < len(e.argSpecs) {
			argSpec = e.argSpecs[i]
		}
		leaves, def, err := implicitarray.Flatten(arg)
		if err != nil {
			return nil, errors.WithMessagef(err, "mesh.Exec: argument #%d", i)
		}
		specs, err := FlatSpecs(e.mesh, arg, argSpec)
		if err != nil {
			return nil, errors.WithMessagef(err, "mesh.Exec: argument #%d", i)
		}
		for j, leaf := range leaves {
			t := leaf.(*tensors.Tensor) // FlatSpecs accepted only host leaves.
			dt, err := e.shard(t, specs[j])
			if err != nil {
				return nil, errors.WithMessagef(err, "mesh.Exec: argument #%d, leaf #%d", i, j)
			}
			p.Leaves = append(p.Leaves, dt)
		}
		p.Specs = append(p.Specs, specs...)
		p.defs[i], keys[i] = def, def.String()
	}
	if len(p.Leaves) == 0 {
		return nil, errors.Errorf("mesh.Exec %s: the arguments hold no arrays", e.name)
	}
	specKeys := make([]string, len(p.Specs))
	for i, s := range p.Specs {
		specKeys[i] = s.String()
	}
	p.key = strings.Join(keys, ";") + "|" + strings.Join(specKeys, ";")
	return p, nil
}

// shard cuts t by spec into one shard per device of the mesh and copies shard d to device d.
func (e *Exec) shard(t *tensors.Tensor, spec PartitionSpec) (*distributed.Tensor, error) {
	ss, err := ShardingSpec(e.mesh, spec, t.Shape())
	if err != nil {
		return nil, err
	}
	dt, err := distributed.ShardTensor(ss, t)
	if err != nil {
		return nil, errors.WithMessagef(err, "mesh: sharding %s by %s over %s", t.Shape(), spec, e.mesh)
	}
	for d, s := range dt.Shards() {
		if err := s.MaterializeOnDevice(e.backend, false, backends.DeviceNum(d)); err != nil {
			return nil, errors.WithMessagef(err, "mesh: copying shard %d of %s to device %d", d, t.Shape(), d)
		}
	}
	return dt, nil
}

// Call places args (Place) and runs the function on them (CallPlaced).
func (e *Exec) Call(args ...any) ([]any, error) {
	p, err := e.Place(args...)
	if err != nil {
		return nil, err
	}
	return e.CallPlaced(p)
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

// CallPlaced runs the function on arguments placed by Place (on this Exec), compiling it once per
// structure, metadata, shapes and specs of the arguments, and returns its results on the host.
func (e *Exec) CallPlaced(p *Placed) ([]any, error) {
	entry, err := e.entry(p)
	if err != nil {
		return nil, err
	}
	inputs := make([]any, len(p.Leaves))
	for i, l := range p.Leaves {
		inputs[i] = l
	}
	outputs, err := entry.exec.Exec(inputs...)
	if err != nil {
		return nil, errors.WithMessagef(err, "mesh.Exec %s over %s", e.name, e.mesh)
	}
	// Results are replicated: keep device 0's copy, free the others.
	numOut := len(outputs) / e.mesh.NumDevices()
	for _, extra := range outputs[numOut:] {
		_ = extra.FinalizeAll()
	}
	results := make([]any, len(entry.outDefs))
	next := 0
	for i, def := range entry.outDefs {
		leaves := make([]any, def.NumLeaves())
		for j := range leaves {
			leaves[j] = outputs[next]
			next++
		}
		v, err := def.UnflattenAs(leaves, e.hostOut[i])
		if err != nil {
			return nil, errors.WithMessagef(err, "mesh.Exec %s: result #%d", e.name, i)
		}
		results[i] = v.Interface()
	}
	return results, nil
}

// Finalize releases the compiled graphs.
func (e *Exec) Finalize() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, entry := range e.entries {
		entry.exec.Finalize()
	}
	e.entries = map[string]*execEntry{}
}

func (e *Exec) entry(p *Placed) (*execEntry, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if entry, ok := e.entries[p.key]; ok {
		return entry, nil
	}
	dm, _ := e.mesh.DeviceMesh()
	inSpecs := make([]*distributed.ShardingSpec, len(p.Leaves))
	for i, l := range p.Leaves {
		inSpecs[i] = l.ShardingSpec()
	}
	entry := &execEntry{inDefs: p.defs}
	exec, err := graph.NewExecAny(e.backend, func(nodes []*graph.Node) []*graph.Node {
		return e.build(entry, nodes)
	})
	if err != nil {
		return nil, errors.WithMessagef(err, "mesh.Exec %s", e.name)
	}
	entry.exec = exec.WithName(e.name).AutoSharding(dm).WithInputShardingSpecs(inSpecs...).
		WithOutputShardingSpecs(distributed.NewReplicatedShardingSpec(dm))
	e.entries[p.key] = entry
	return entry, nil
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
			panic(errors.WithMessagef(err, "mesh.Exec %s: argument #%d does not fit parameter type %s", e.name, i, e.fnType.In(i)))
		}
		in[i] = v
	}
	out := e.fn.Call(in)
	var outNodes []*graph.Node
	entry.outDefs = make([]*implicitarray.TreeDef, len(out))
	for i, o := range out {
		leaves, def, err := implicitarray.Flatten(o.Interface())
		if err != nil {
			panic(errors.WithMessagef(err, "mesh.Exec %s: result #%d", e.name, i))
		}
		for _, leaf := range leaves {
			n, ok := leaf.(*graph.Node)
			if !ok {
				panic(errors.Errorf("mesh.Exec %s: result #%d holds a %T; accepted: graph nodes and implicit arrays of nodes", e.name, i, leaf))
			}
			outNodes = append(outNodes, n)
		}
		entry.outDefs[i] = def
	}
	return outNodes
}

// ShardShapes returns the shape of leaf i's shard on each device, read from the device buffers.
func (p *Placed) ShardShapes(backend backends.Backend, i int) ([]shapes.Shape, error) {
	shards := p.Leaves[i].Shards()
	out := make([]shapes.Shape, len(shards))
	for d, s := range shards {
		buf, err := s.Buffer(backend, backends.DeviceNum(d))
		if err != nil {
			return nil, errors.WithMessagef(err, "mesh: leaf #%d has no buffer on device %d", i, d)
		}
		if out[d], err = backend.BufferShape(buf); err != nil {
			return nil, err
		}
	}
	return out, nil
}
