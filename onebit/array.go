package onebit

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/mesh"
)

// ErrDeleted is returned (host side) or panicked (graph side) when an array is used after Delete.
var ErrDeleted = errors.New("onebit: array was deleted")

// Array holds binary or ternary values packed 2 bits each, 4 a byte along the first axis, in
// eformer's Array1B layout (TwoBit), with an optional float32 scale. See the package
// documentation for the layout, the scale and the operations.
//
// The same Array serves on the host (components are tensors, from Pack or Quantize*) and in a
// graph (components are nodes, inside implicitarray.Exec or after implicitarray.OnGraph).
type Array struct{ core }

// BitArray holds binary values packed 1 bit each, 8 a byte along the first axis (OneBit), with an
// optional float32 scale. It has the same API as Array and half its bytes.
type BitArray struct{ core }

var (
	_ implicitarray.Array             = (*Array)(nil)
	_ implicitarray.Array             = (*BitArray)(nil)
	_ implicitarray.MaterializeWarner = (*Array)(nil)
	_ implicitarray.MaterializeWarner = (*BitArray)(nil)
	_ mesh.Sharded                    = (*Array)(nil)
	_ mesh.ComponentSharder           = (*Array)(nil)
	_ mesh.Sharded                    = (*BitArray)(nil)
	_ mesh.ComponentSharder           = (*BitArray)(nil)
)

// packedArray is what the handlers need of *Array and *BitArray.
type packedArray interface {
	implicitarray.Array
	base() *core
	withCore(c core) packedArray
}

func (a *Array) base() *core                    { return &a.core }
func (a *BitArray) base() *core                 { return &a.core }
func (a *Array) withCore(c core) packedArray    { return &Array{c} }
func (a *BitArray) withCore(c core) packedArray { return &BitArray{c} }

// core is the state shared by both types.
type core struct {
	layout Layout
	packed implicitarray.Component
	// scale is valid when scaleAxes != nil: float32, the logical rank, dimension 1 on the axes
	// it was reduced over.
	scale          implicitarray.Component
	scaleAxes      []int
	shape          shapes.Shape
	strategy       MatMulStrategy
	mesh.Placement // IsSharded, Sharding
	deleted        bool
}

func (c *core) typeName() string {
	if c.layout == OneBit {
		return "onebit.BitArray"
	}
	return "onebit.Array"
}

func (c *core) checkLive(what string) {
	if c.deleted {
		panic(errors.Wrapf(ErrDeleted, "%s.%s of %s (Delete freed its packed bytes; quantize or load it again)",
			c.typeName(), what, c.shape))
	}
}

// Shape is the logical shape: the dimensions of the unpacked values and the materialization dtype.
func (c *core) Shape() shapes.Shape { return c.shape }

// DType is the materialization dtype.
func (c *core) DType() dtypes.DType { return c.shape.DType }

// Layout is TwoBit for Array and OneBit for BitArray.
func (c *core) Layout() Layout { return c.layout }

// Packed returns the packed uint8 component: dimensions of the logical shape with the first
// divided by Layout().ValuesPerByte(). It panics after Delete.
func (c *core) Packed() implicitarray.Component {
	c.checkLive("Packed")
	return c.packed
}

// Scale returns the float32 scale component and true, or false when the array keeps no scale.
// The scale has the logical rank, with dimension 1 on the axes it was reduced over (ScaleAxes).
func (c *core) Scale() (implicitarray.Component, bool) {
	c.checkLive("Scale")
	return c.scale, c.scaleAxes != nil
}

// ScaleAxes returns the axes the scale was reduced over (all axes for a per-tensor scale), or nil
// when the array keeps no scale.
func (c *core) ScaleAxes() []int { return slices.Clone(c.scaleAxes) }

// IsScaled reports whether the array keeps a scale.
func (c *core) IsScaled() bool { return c.scaleAxes != nil }

// MatMulStrategy returns how DotGeneral lowers a product with this array (Auto by default).
func (c *core) MatMulStrategy() MatMulStrategy { return c.strategy }

// IsDeleted reports whether Delete was called.
func (c *core) IsDeleted() bool { return c.deleted }

// NumBytes is the number of bytes stored: the packed bytes plus 4 per scale element.
func (c *core) NumBytes() int {
	n := c.packed.Shape().Size()
	if c.scaleAxes != nil {
		n += 4 * c.scale.Shape().Size()
	}
	return n
}

// Components are the packed bytes and, for a scaled array, the scale. It panics after Delete
// (implicitarray.Exec reports that as an error).
func (c *core) Components() []implicitarray.Component {
	c.checkLive("Components")
	if c.scaleAxes != nil {
		return []implicitarray.Component{c.packed, c.scale}
	}
	return []implicitarray.Component{c.packed}
}

// Metadata describes the static fields canonically.
func (c *core) Metadata() string {
	return fmt.Sprintf("%s{layout=%s dims=%v dtype=%s scaleAxes=%v strategy=%s sharding=%s}",
		c.typeName(), c.layout, c.shape.Dimensions, c.shape.DType, c.scaleAxes, c.strategy, c.Placement)
}

// withComponents checks and installs components.
func (c core) withComponents(comps []implicitarray.Component) core {
	want := 1
	if c.scaleAxes != nil {
		want = 2
	}
	if len(comps) != want {
		panic(errors.Errorf("%s.WithComponents: got %d components, want %d (packed%s)", c.typeName(), len(comps), want,
			map[bool]string{true: ", scale", false: ""}[want == 2]))
	}
	if got, wantDims := comps[0].Shape(), c.layout.packedDims(c.shape.Dimensions); got.DType != dtypes.Uint8 || !slices.Equal(got.Dimensions, wantDims) {
		panic(errors.Errorf("%s.WithComponents: packed component %s; want (Uint8)%v", c.typeName(), got, wantDims))
	}
	c.packed = comps[0]
	if want == 2 {
		c.scale = comps[1]
	}
	c.deleted = false
	return c
}

// WithComponents returns an Array with the same metadata holding the given components.
func (a *Array) WithComponents(comps []implicitarray.Component) implicitarray.Array {
	return &Array{a.withComponents(comps)}
}

// WithComponents returns a BitArray with the same metadata holding the given components.
func (a *BitArray) WithComponents(comps []implicitarray.Component) implicitarray.Array {
	return &BitArray{a.withComponents(comps)}
}

// WarnOnMaterialize is true, as eformer's warn_on_materialize: the generic fallback logs a warning
// (once per op) when it densifies a packed array.
func (c *core) WarnOnMaterialize() bool { return true }

// Materialize builds the dense values (times the scale, if any) in the array's dtype, inside the
// graph of its components. Library code calls implicitarray.Materialize, which counts it.
func (c *core) Materialize() implicitarray.Value {
	c.checkLive("Materialize")
	dtype := c.shape.DType
	if c.scaleAxes == nil {
		return decodeValues(c.layout, c.packed.Node(), dtype)
	}
	compute := dtype
	if compute != dtypes.Float64 {
		compute = dtypes.Float32
	}
	values := decodeValues(c.layout, c.packed.Node(), compute)
	return graph.ConvertDType(graph.Mul(values, graph.ConvertDType(c.scale.Node(), compute)), dtype)
}

// Delete frees the host tensors holding the packed bytes and the scale, and marks the array
// deleted: any later use panics (or, through implicitarray.Exec, returns an error) with a message
// saying so. Arrays derived from it on the host (WithDType, WithSharding, ...) share its tensors.
// Deleting twice is a no-op. Unlike eformer's delete, it touches no field the array lacks.
func (c *core) Delete() {
	if c.deleted {
		return
	}
	for _, comp := range []implicitarray.Component{c.packed, c.scale} {
		if comp.IsTensor() {
			_ = comp.Tensor().FinalizeAll()
		}
	}
	c.deleted = true
}

// Values returns the unpacked values in {-1, 0, +1} as an int8 host tensor of the logical
// dimensions, without the scale. It needs host components (the array straight from Pack or
// Quantize, or returned by implicitarray.Exec).
func (c *core) Values() (*tensors.Tensor, error) {
	if c.deleted {
		return nil, errors.Errorf("%s.Values: the array was deleted", c.typeName())
	}
	if !c.packed.IsTensor() {
		return nil, errors.Errorf("%s.Values: the packed component is a %s; accepted: a host tensor", c.typeName(), c.packed)
	}
	packed, err := tensors.CopyFlatData[uint8](c.packed.Tensor())
	if err != nil {
		return nil, errors.WithMessagef(err, "%s.Values", c.typeName())
	}
	return tensors.FromFlatDataAndDimensions(c.layout.unpackValues(packed, c.shape.Dimensions), c.shape.Dimensions...), nil
}

// withDType returns a copy materializing to dtype.
func (c core) withDType(dtype dtypes.DType) (core, error) {
	if err := checkDType(c.typeName()+".WithDType", dtype, c.scaleAxes != nil); err != nil {
		return c, err
	}
	c.shape = shapes.Make(dtype, c.shape.Dimensions...)
	return c, nil
}

// WithDType returns a new array that materializes to dtype, sharing the packed bytes: eformer's
// lazy convert_element_type, without mutating a. A scaled array needs a float dtype.
func (a *Array) WithDType(dtype dtypes.DType) (*Array, error) {
	c, err := a.withDType(dtype)
	if err != nil {
		return nil, err
	}
	return &Array{c}, nil
}

// WithDType returns a new array that materializes to dtype (see Array.WithDType).
func (a *BitArray) WithDType(dtype dtypes.DType) (*BitArray, error) {
	c, err := a.withDType(dtype)
	if err != nil {
		return nil, err
	}
	return &BitArray{c}, nil
}

// MaterializeAs materializes the array in a graph as dtype (counted as a materialization in
// implicitarray.Stats). It panics if the dtype is not accepted (see WithDType).
func (a *Array) MaterializeAs(dtype dtypes.DType) *graph.Node {
	b, err := a.WithDType(dtype)
	if err != nil {
		panic(err)
	}
	return implicitarray.Materialize(b)
}

// MaterializeAs materializes the array in a graph as dtype (see Array.MaterializeAs).
func (a *BitArray) MaterializeAs(dtype dtypes.DType) *graph.Node {
	b, err := a.WithDType(dtype)
	if err != nil {
		panic(err)
	}
	return implicitarray.Materialize(b)
}

// WithMatMulStrategy returns a new array whose products use strategy s (see MatMulStrategy).
func (a *Array) WithMatMulStrategy(s MatMulStrategy) *Array {
	c := a.core
	c.strategy = s
	return &Array{c}
}

// WithMatMulStrategy returns a new array whose products use strategy s (see MatMulStrategy).
func (a *BitArray) WithMatMulStrategy(s MatMulStrategy) *BitArray {
	c := a.core
	c.strategy = s
	return &BitArray{c}
}

func (c core) withSharding(s mesh.Sharding) core {
	c.Placement = c.Placement.With(s)
	return c
}

// WithSharding returns a new array with sharding s on its logical axes (the packed bytes and the
// scale follow it, see ComponentSpecs); a is untouched. The zero mesh.Sharding{} clears it.
func (a *Array) WithSharding(s mesh.Sharding) *Array { return &Array{a.withSharding(s)} }

// WithSharding returns a new array with sharding s (see Array.WithSharding).
func (a *BitArray) WithSharding(s mesh.Sharding) *BitArray { return &BitArray{a.withSharding(s)} }

// Reshard is WithSharding (eformer's name).
func (a *Array) Reshard(s mesh.Sharding) *Array { return a.WithSharding(s) }

// Reshard is WithSharding (eformer's name).
func (a *BitArray) Reshard(s mesh.Sharding) *BitArray { return a.WithSharding(s) }

func (c core) withMeshAndAxis(m *mesh.Mesh, axis any) (core, error) {
	sharding, err := mesh.ShardingFor(m, axis, c.componentSpecs)
	if err != nil {
		return c, errors.WithMessagef(err, "%s.WithMeshAndAxis(%s)", c.typeName(), c.shape)
	}
	return c.withSharding(sharding), nil
}

// componentSpecs returns the specs of Components() when the logical array is sharded by logical
// over m: the packed bytes by mesh.OnebitSpecs (TwoBit) or mesh.OnebitBitSpecs (OneBit), the scale
// by mesh.ScaleSpec (its size-1 axes replicated, the others as the logical spec).
func (c *core) componentSpecs(m *mesh.Mesh, logical mesh.PartitionSpec) ([]mesh.PartitionSpec, error) {
	rule := mesh.OnebitSpecs
	if c.layout == OneBit {
		rule = mesh.OnebitBitSpecs
	}
	packed, err := rule(m, logical, c.shape)
	if err != nil {
		return nil, err
	}
	if c.scaleAxes == nil {
		return []mesh.PartitionSpec{packed}, nil
	}
	scale, err := mesh.ScaleSpec(m, logical, c.shape, c.scale.Shape())
	if err != nil {
		return nil, err
	}
	return []mesh.PartitionSpec{packed, scale}, nil
}

// ComponentSpecs returns the specs of [packed] or [packed, scale] when the logical array is sharded
// by logical over m: packed has the logical spec (mesh.OnebitSpecs: a sharded first axis needs
// (d0/4) % shards == 0 and holds quarter-strided rows), the scale too except on its size-1 axes,
// which are replicated (mesh.ScaleSpec).
func (a *Array) ComponentSpecs(m *mesh.Mesh, logical mesh.PartitionSpec) ([]mesh.PartitionSpec, error) {
	return a.componentSpecs(m, logical)
}

// ComponentSpecs is Array.ComponentSpecs for the 1-bit layout (mesh.OnebitBitSpecs: a sharded
// first axis needs (d0/8) % shards == 0 and holds eighth-strided rows).
func (a *BitArray) ComponentSpecs(m *mesh.Mesh, logical mesh.PartitionSpec) ([]mesh.PartitionSpec, error) {
	return a.componentSpecs(m, logical)
}

// WithMeshAndAxis returns a new array sharded over m as axis says (the forms mesh.SpecFrom
// accepts), checked early against the shape, the mesh and the packed layout (ComponentSpecs): an
// error names a spec longer than the rank, a name the mesh lacks or used twice, an axis not
// divisible by its shards, or packed rows not divisible by the first axis's shards. For a spec
// without a mesh, use WithSharding.
func (a *Array) WithMeshAndAxis(m *mesh.Mesh, axis any) (*Array, error) {
	c, err := a.withMeshAndAxis(m, axis)
	if err != nil {
		return nil, err
	}
	return &Array{c}, nil
}

// WithMeshAndAxis returns a new array sharded over m (see Array.WithMeshAndAxis).
func (a *BitArray) WithMeshAndAxis(m *mesh.Mesh, axis any) (*BitArray, error) {
	c, err := a.withMeshAndAxis(m, axis)
	if err != nil {
		return nil, err
	}
	return &BitArray{c}, nil
}

// String describes the array, e.g. "onebit.Array(Int8)[8 4] 2bit".
func (c *core) String() string {
	s := fmt.Sprintf("%s%s %s", c.typeName(), c.shape, c.layout)
	if c.scaleAxes != nil {
		s += fmt.Sprintf(" scale over %v", c.scaleAxes)
	}
	if c.deleted {
		s += " (deleted)"
	}
	return s
}
