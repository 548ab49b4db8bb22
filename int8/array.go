package int8

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/mesh"
)

// ErrDeleted is returned (or panicked, in graph code) when a deleted Array is used.
var ErrDeleted = errors.New("int8: array was deleted")

// Array is eformer's Array8B: a float array stored as int8 codes (Weight, same shape as the
// logical array) times a float Scale (the logical rank, size 1 on the quantized axes). See the
// package documentation for the layout.
//
// An Array is immutable: every method that changes something returns a new Array.
type Array struct {
	weight, scale  implicitarray.Component
	shape          shapes.Shape // logical dimensions and materialization dtype
	axes           []int        // normalized quantized axes, as given (order kept)
	mesh.Placement              // IsSharded, Sharding
	lowering       Lowering
	deleted        bool
}

var (
	_ implicitarray.Array             = (*Array)(nil)
	_ implicitarray.MaterializeWarner = (*Array)(nil)
	_ mesh.Sharded                    = (*Array)(nil)
	_ mesh.ComponentSharder           = (*Array)(nil)
)

// New assembles an Array from stored components, e.g. read from an eformer checkpoint: weight is
// int8 with the logical dimensions, scale a float array of the same rank whose dimensions are 1
// or the weight's, and 1 on every one of axes (the quantized axes, negative allowed; none means
// (-1,)). dtype is the materialization dtype (a float dtype; dtypes.InvalidDType means the scale's).
// Both components are host tensors or both graph nodes.
func New(weight, scale implicitarray.Component, dtype dtypes.DType, axes ...int) (*Array, error) {
	ws, ss := weight.Shape(), scale.Shape()
	if weight.IsArray() || scale.IsArray() || weight.IsTensor() != scale.IsTensor() {
		return nil, errors.Errorf("int8.New: weight is a %s and scale a %s; accepted: two host tensors or two graph nodes", weight, scale)
	}
	if ws.DType != dtypes.Int8 {
		return nil, errors.Errorf("int8.New: weight %s; accepted: dtype int8", ws)
	}
	if !ss.DType.IsFloat() {
		return nil, errors.Errorf("int8.New: scale %s; accepted: a float dtype", ss)
	}
	if dtype == dtypes.InvalidDType {
		dtype = ss.DType
	}
	if !dtype.IsFloat() {
		return nil, errors.Errorf("int8.New: materialization dtype %s; accepted: a float dtype", dtype)
	}
	if len(axes) == 0 {
		axes = []int{-1}
	}
	norm, err := normalizeAxes(axes, ws.Rank())
	if err != nil {
		return nil, errors.WithMessage(err, "int8.New")
	}
	if ss.Rank() != ws.Rank() {
		return nil, errors.Errorf("int8.New: scale %s and weight %s differ in rank; accepted: equal ranks", ss, ws)
	}
	for i, d := range ss.Dimensions {
		if (d != 1 && d != ws.Dimensions[i]) || (slices.Contains(norm, i) && d != 1) {
			return nil, errors.Errorf("int8.New: scale %s does not fit weight %s with quantized axes %v at axis %d; "+
				"accepted: size 1 on the quantized axes, 1 or the weight's size elsewhere", ss, ws, axes, i)
		}
	}
	return &Array{weight: weight, scale: scale, shape: shapes.Make(dtype, ws.Dimensions...), axes: norm}, nil
}

// normalizeAxes maps axes into [0, rank), rejecting out-of-range and repeated ones.
func normalizeAxes(axes []int, rank int) ([]int, error) {
	out := make([]int, len(axes))
	for i, a := range axes {
		n := a
		if n < 0 {
			n += rank
		}
		if n < 0 || n >= rank {
			return nil, errors.Errorf("axis %d out of range for rank %d; accepted: -%d..%d", a, rank, rank, rank-1)
		}
		if slices.Contains(out[:i], n) {
			return nil, errors.Errorf("axes %v repeat axis %d; accepted: distinct axes", axes, n)
		}
		out[i] = n
	}
	return out, nil
}

func (a *Array) clone() *Array {
	b := *a
	b.axes = slices.Clone(a.axes)
	return &b
}

func (a *Array) mustNotBeDeleted(what string) {
	if a.deleted {
		panic(errors.Wrapf(ErrDeleted, "int8.Array.%s of %s", what, a.shape))
	}
}

// Shape is the logical shape: the weight's dimensions and the materialization dtype.
func (a *Array) Shape() shapes.Shape { return a.shape }

// DType is the materialization dtype.
func (a *Array) DType() dtypes.DType { return a.shape.DType }

// Axes are the quantized axes (non-negative, in the order given): the scale has size 1 on them.
func (a *Array) Axes() []int { return slices.Clone(a.axes) }

// Weight is the int8 component, with the logical dimensions.
func (a *Array) Weight() implicitarray.Component {
	a.mustNotBeDeleted("Weight")
	return a.weight
}

// Scale is the float scale component: the logical rank, size 1 on the quantized axes.
func (a *Array) Scale() implicitarray.Component {
	a.mustNotBeDeleted("Scale")
	return a.scale
}

// Bytes is the storage size of the components (weight and scale), in bytes.
func (a *Array) Bytes() int {
	return int(a.weight.Shape().Memory() + a.scale.Shape().Memory())
}

// Components are [weight, scale]. (eformer's pytree order is [scale, weight]; the bytes of each
// are the same.) It panics with ErrDeleted after Delete.
func (a *Array) Components() []implicitarray.Component {
	a.mustNotBeDeleted("Components")
	return []implicitarray.Component{a.weight, a.scale}
}

// Metadata is the canonical form of the static fields: dtype, axes, sharding and lowering.
func (a *Array) Metadata() string {
	return fmt.Sprintf("int8{dtype=%s axes=%v lowering=%s sharding=%s}", a.shape.DType, a.axes, a.lowering, a.Placement)
}

// WithComponents returns a copy holding components [weight, scale] (same shapes).
func (a *Array) WithComponents(components []implicitarray.Component) implicitarray.Array {
	if len(components) != 2 {
		panic(errors.Errorf("int8.Array.WithComponents: got %d components; accepted: [weight, scale]", len(components)))
	}
	b := a.clone()
	b.weight, b.scale, b.deleted = components[0], components[1], false
	return b
}

// Materialize returns weight * scale (the int8 codes converted to the scale's dtype, as eformer's
// type promotion does) converted to the array's dtype. Library code calls
// implicitarray.Materialize, which counts it.
func (a *Array) Materialize() implicitarray.Value {
	a.mustNotBeDeleted("Materialize")
	w, s := a.weight.Node(), a.scale.Node()
	dense := graph.Mul(graph.ConvertDType(w, s.DType()), graph.BroadcastToDims(s, w.Shape().Dimensions...))
	return graph.ConvertDType(dense, a.shape.DType)
}

// WarnOnMaterialize is true, as eformer's Array8B: the generic fallback logs a warning once per op.
func (a *Array) WarnOnMaterialize() bool { return true }

// Delete releases the host tensors of the components (eformer's delete). The Array must not be
// used afterwards: its methods that read components panic (or, in Exec, fail) with ErrDeleted.
// Graph-side components are left to the graph. Deleting twice is a no-op.
func (a *Array) Delete() {
	if a.deleted {
		return
	}
	for _, c := range []implicitarray.Component{a.weight, a.scale} {
		if c.IsTensor() {
			_ = c.Tensor().FinalizeAll()
		}
	}
	a.deleted = true
}

// WithSharding returns a copy carrying sharding s (the original is untouched). The zero
// mesh.Sharding{} clears it, as eformer's with_sharding(None). The sharding is static metadata,
// kept by the handlers (following the axes through a transpose); mesh.Exec places the components.
func (a *Array) WithSharding(s mesh.Sharding) *Array {
	b := a.clone()
	b.Placement = a.Placement.With(s)
	return b
}

// Reshard is an alias of WithSharding.
func (a *Array) Reshard(s mesh.Sharding) *Array { return a.WithSharding(s) }

// WithMeshAndAxis returns a copy sharded over m with the axis spec built by mesh.SpecFrom (nil:
// replicated; a PartitionSpec; a name; a []string or []any of names), checked early against the
// array's shape and m (ComponentSpecs: known mesh axes, each used once, divisible axes).
func (a *Array) WithMeshAndAxis(m *mesh.Mesh, axis any) (*Array, error) {
	s, err := mesh.ShardingFor(m, axis, a.ComponentSpecs)
	if err != nil {
		return nil, errors.WithMessagef(err, "int8.Array.WithMeshAndAxis(%s)", a.shape)
	}
	return a.WithSharding(s), nil
}

// ComponentSpecs returns the specs of [weight, scale] when the logical array is sharded by logical
// over m (mesh.Int8Specs): the weight takes the logical spec, the scale too except on its size-1 axes.
func (a *Array) ComponentSpecs(m *mesh.Mesh, logical mesh.PartitionSpec) ([]mesh.PartitionSpec, error) {
	w, s, err := mesh.Int8Specs(m, logical, a.weight.Shape(), a.scale.Shape())
	if err != nil {
		return nil, err
	}
	return []mesh.PartitionSpec{w, s}, nil
}

// Lowering is the array's matmul lowering (LoweringAuto unless set with WithLowering).
func (a *Array) Lowering() Lowering { return a.lowering }

// WithLowering returns a copy whose dot_general handlers use lowering l (part of Metadata, so Exec
// compiles one graph per lowering). LoweringMaterialize forces eformer's materialize-then-dot, for
// comparisons.
func (a *Array) WithLowering(l Lowering) *Array {
	b := a.clone()
	b.lowering = l
	return b
}

// withDType returns a copy that materializes as dtype (the lazy convert_element_type).
func (a *Array) withDType(dtype dtypes.DType) *Array {
	b := a.clone()
	b.shape = shapes.Make(dtype, a.shape.Dimensions...)
	return b
}
