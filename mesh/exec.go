package mesh

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/execcache"
	"github.com/quanta-ml/quanta/sharding"
)

// Exec compiles and runs a graph function over a mesh of devices, with its arguments — dense
// tensors and implicit arrays — sharded: the analogue of jax.jit with in_shardings over a mesh
// (XLA's automatic SPMD partitioning, GoMLX's distributed.AutoSharding strategy).
//
// The function is an implicitarray.Func, written as for implicitarray.Exec: one parameter per
// argument of Call (a *graph.Node, an implicit array type, an implicitarray.Value, or a structure
// of them), one or more results of the same kinds. It sees logical
// shapes; XLA partitions it, inserting the collectives the shardings need (e.g. the all-reduce of
// a matmul whose contracting axis is sharded). Each argument is flattened into its components,
// every component is cut into one shard per device by flatSpecs, and each device receives only
// its shards. Results come back replicated, as host tensors or implicit arrays of host tensors.
type Exec struct {
	backend  backends.Backend
	mesh     *sharding.Mesh
	fn       *implicitarray.Func
	name     string
	argSpecs []sharding.PartitionSpec

	cache execcache.Cache[*implicitarray.TreeDef]
}

// NewExec returns an Exec that runs fn over m on backend. It fails if backend has fewer devices
// than m (see sharding.Mesh.CheckDevices) or fn is not a valid graph function.
func NewExec(backend backends.Backend, m *sharding.Mesh, fn any) (*Exec, error) {
	if m == nil {
		return nil, errors.New("mesh.NewExec: nil mesh")
	}
	if err := m.CheckDevices(backend); err != nil {
		return nil, errors.WithMessage(err, "mesh.NewExec")
	}
	if _, err := m.DeviceMesh(); err != nil {
		return nil, errors.WithMessage(err, "mesh.NewExec")
	}
	f, err := implicitarray.NewFunc(fn)
	if err != nil {
		return nil, errors.WithMessage(err, "mesh.NewExec")
	}
	e := &Exec{backend: backend, mesh: m, fn: f, name: fmt.Sprintf("mesh:%s", f)}
	return e, nil
}

// MustNewExec is NewExec that panics on error.
func MustNewExec(backend backends.Backend, m *sharding.Mesh, fn any) *Exec {
	e, err := NewExec(backend, m, fn)
	if err != nil {
		panic(err)
	}
	return e
}

// WithArgSpecs sets the sharding.PartitionSpec of the arguments, one per argument of Call
// (missing ones, and nil, mean replicated; more specs than arguments is an error of Place and
// Call): it shards a dense tensor argument, or an implicit array argument that has no Sharding of
// its own (see flatSpecs). Call it before the first Call; it returns e.
func (e *Exec) WithArgSpecs(specs ...sharding.PartitionSpec) *Exec {
	e.argSpecs = specs
	return e
}

// Mesh returns the mesh e runs over.
func (e *Exec) Mesh() *sharding.Mesh { return e.mesh }

// Placed holds the arguments of a call flattened into their leaves, each cut into shards by its
// sharding.PartitionSpec and each shard on its device: Leaves[i].Shards()[d] lives on device d. Placing
// once and calling CallPlaced many times keeps weights on the devices: Place returns one, which a
// caller keeps (in a struct field, say) for as long as the weights are used.
type Placed struct {
	// Leaves are the flattened arguments (implicit arrays as their components), in order.
	Leaves []*distributed.Tensor

	// Specs are the leaves' PartitionSpecs (flatSpecs).
	Specs []sharding.PartitionSpec

	key    string
	defs   []*implicitarray.TreeDef
	mesh   *sharding.Mesh // the mesh and function type of the Exec that placed them
	fnType string
}

// Place flattens args, shards every leaf over the mesh (flatSpecs, with the specs of
// WithArgSpecs) and copies each shard to its device.
func (e *Exec) Place(args ...any) (*Placed, error) {
	// The arguments first (their number included): a missing argument is reported as such, not
	// as a spec too many.
	leaves, defs, key, err := e.fn.FlattenArgs(args)
	if err != nil {
		return nil, errors.WithMessagef(err, "mesh.Exec %s", e.name)
	}
	if len(e.argSpecs) > len(args) {
		// A spec past the last argument would be dropped silently, leaving its array placed
		// other than intended (usually specs and arguments out of step).
		return nil, errors.Errorf("mesh.Exec %s: %d specs (WithArgSpecs %v) for %d arguments; accepted: at most one spec per argument",
			e.name, len(e.argSpecs), e.argSpecs, len(args))
	}
	p := &Placed{defs: defs, mesh: e.mesh, fnType: e.fn.String()}
	var argOf []int // the argument each leaf comes from
	for i, arg := range args {
		var argSpec sharding.PartitionSpec
		if i < len(e.argSpecs) {
			argSpec = e.argSpecs[i]
		}
		specs, err := flatSpecs(e.mesh, arg, argSpec)
		if err != nil {
			return nil, errors.WithMessagef(err, "mesh.Exec: argument #%d", i)
		}
		p.Specs = append(p.Specs, specs...)
		for range specs {
			argOf = append(argOf, i)
		}
	}
	for j, t := range leaves {
		dt, err := e.shard(t, p.Specs[j])
		if err != nil {
			return nil, errors.WithMessagef(err, "mesh.Exec: argument #%d (leaf #%d)", argOf[j], j)
		}
		p.Leaves = append(p.Leaves, dt)
	}
	specKeys := make([]string, len(p.Specs))
	for i, s := range p.Specs {
		specKeys[i] = s.String()
	}
	p.key = key + "|" + strings.Join(specKeys, ";")
	return p, nil
}

// shard cuts t by spec into one shard per device of the mesh and copies shard d to device d.
func (e *Exec) shard(t *tensors.Tensor, spec sharding.PartitionSpec) (*distributed.Tensor, error) {
	if t.Shape().Size() == 0 {
		// distributed.ShardTensor (and XLA's host-to-device copy) panic on an empty tensor.
		return nil, errors.Errorf("mesh: sharding %s by %s over %s: the tensor is empty; accepted: tensors with at least one element",
			t.Shape(), spec, e.mesh)
	}
	ss, err := sharding.ShardingSpec(e.mesh, spec, t.Shape())
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

// CallPlaced runs the function on arguments placed by Place (on this Exec, or on one of a function
// of the same type over the same mesh), compiling it once per structure, metadata, shapes and
// specs of the arguments, and returns its results on the host.
func (e *Exec) CallPlaced(p *Placed) ([]any, error) {
	if p == nil {
		return nil, errors.Errorf("mesh.Exec %s: nil placed arguments; accepted: what Place returns", e.name)
	}
	if fnType := e.fn.String(); p.fnType != fnType || !p.mesh.Equal(e.mesh) {
		return nil, errors.Errorf("mesh.Exec %s over %s: arguments placed for a function %s over %s; accepted: those Place "+
			"returns on an Exec of a function of the same type over the same mesh", e.name, e.mesh, p.fnType, p.mesh)
	}
	entry, err := e.entry(p)
	if err != nil {
		return nil, err
	}
	inputs := make([]any, len(p.Leaves))
	for i, l := range p.Leaves {
		inputs[i] = l
	}
	outputs, err := entry.Exec.Exec(inputs...)
	if err != nil {
		return nil, errors.WithMessagef(err, "mesh.Exec %s over %s", e.name, e.mesh)
	}
	// Results are replicated: keep device 0's copy, free the others.
	numOut := len(outputs) / e.mesh.NumDevices()
	for _, extra := range outputs[numOut:] {
		_ = extra.FinalizeAll()
	}
	results, err := e.fn.Results(entry.OutDefs, outputs[:numOut])
	if err != nil {
		return nil, errors.WithMessagef(err, "mesh.Exec %s", e.name)
	}
	return results, nil
}

// Finalize releases the compiled graphs.
func (e *Exec) Finalize() { e.cache.Finalize() }

func (e *Exec) entry(p *Placed) (*execcache.Entry[*implicitarray.TreeDef], error) {
	return e.cache.Get(p.key, e.fn, p.defs, func(graphFn func([]*graph.Node) []*graph.Node) (*graph.Exec, error) {
		dm, _ := e.mesh.DeviceMesh()
		inSpecs := make([]*distributed.ShardingSpec, len(p.Leaves))
		for i, l := range p.Leaves {
			inSpecs[i] = l.ShardingSpec()
		}
		exec, err := graph.NewExecAny(e.backend, graphFn)
		if err != nil {
			return nil, errors.WithMessagef(err, "mesh.Exec %s", e.name)
		}
		if e.mesh.NumDevices() == 1 {
			// XLA refuses to compile a one-device SPMD program ("not (device) portable"): run the
			// plain graph on device 0, where the single shard of every leaf already lives.
			return exec.WithName(e.name), nil
		}
		return exec.WithName(e.name).AutoSharding(dm).WithInputShardingSpecs(inSpecs...).
			WithOutputShardingSpecs(distributed.NewReplicatedShardingSpec(dm)), nil
	})
}

// ShardShapes returns the shape of leaf i's shard on each device, read from the device buffers.
// It returns an error for an i that is not the index of a leaf.
func (p *Placed) ShardShapes(backend backends.Backend, i int) ([]shapes.Shape, error) {
	if i < 0 || i >= len(p.Leaves) {
		return nil, errors.Errorf("mesh.Placed.ShardShapes: leaf #%d; accepted: 0 to %d (%d leaves)", i, len(p.Leaves)-1, len(p.Leaves))
	}
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
