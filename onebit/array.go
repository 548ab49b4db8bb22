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
	"github.com/quanta-ml/quanta/internal/qarray"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/sharding"
)

// Array holds binary or ternary values packed 2 bits each, 4 a byte along the first axis
// (TwoBit), with an optional float32 scale. See the package documentation for the layout, the
// scale and the operations.
//
// The same Array serves on the host (components are tensors, from Pack or Quantize*) and in a
// graph (components are nodes, inside implicitarray.Exec or after implicitarray.OnGraph). An
// Array is immutable: the With methods return new arrays.
type Array struct{ core }

// BitArray holds binary values packed 1 bit each, 8 a byte along the first axis (OneBit), with an
// optional float32 scale. It has the same API as Array and half its bytes.
type BitArray struct{ core }

var (
	_ lowering.Quantized           = (*Array)(nil)
	_ lowering.Quantized           = (*BitArray)(nil)
	_ implicitarray.FallbackPolicy = (*Array)(nil)
	_ sharding.Sharded             = (*Array)(nil)
	_ sharding.ComponentSharder    = (*Array)(nil)
	_ sharding.ComponentSharder    = (*BitArray)(nil)
)

// packedArray is what the handlers need of *Array and *BitArray.
type packedArray interface {
	lowering.Quantized
	base() *core
	withCore(c core) packedArray
}

func (a *Array) base() *core                    { return &a.core }
func (a *BitArray) base() *core                 { return &a.core }
func (a *Array) withCore(c core) packedArray    { return &Array{c} }
func (a *BitArray) withCore(c core) packedArray { return &BitArray{c} }

// core is the state shared by both types: the packed bytes (component 0) and, when scaleAxes is
// not nil, a float32 scale (component 1) of the logical rank with dimension 1 on the axes it was
// reduced over.
type core struct {
	qarray.Base
	packing   Packing
	scaleAxes []int
}

const (
	packedIndex = iota
	scaleIndex
)

func typeNameOf(l Packing) string {
	if l == OneBit {
		return "onebit.BitArray"
	}
	return "onebit.Array"
}

// newCore assembles the state of an array of the given logical shape: the packed bytes and, if
// scaleAxes is not nil, the scale.
func newCore(l Packing, shape shapes.Shape, packed implicitarray.Component, scale implicitarray.Component, scaleAxes []int) core {
	comps := []implicitarray.Component{packed}
	if scaleAxes != nil {
		comps = append(comps, scale)
	}
	return core{Base: qarray.New(typeNameOf(l), shape, comps...), packing: l, scaleAxes: slices.Clone(scaleAxes)}
}

// Packing is TwoBit for Array and OneBit for BitArray.
func (c *core) Packing() Packing { return c.packing }

// Packed returns the packed uint8 component: dimensions of the logical shape with the first
// divided by Packing().ValuesPerByte().
func (c *core) Packed() implicitarray.Component { return qarray.Component(&c.Base, packedIndex) }

// Scale returns the float32 scale component and true, or false when the array keeps no scale.
// The scale has the logical rank, with dimension 1 on the axes it was reduced over (ScaleAxes).
func (c *core) Scale() (implicitarray.Component, bool) {
	if c.scaleAxes == nil {
		return implicitarray.Component{}, false
	}
	return qarray.Component(&c.Base, scaleIndex), true
}

// ScaleAxes returns the axes the scale was reduced over (all axes for a per-tensor scale), or nil
// when the array keeps no scale.
func (c *core) ScaleAxes() []int { return slices.Clone(c.scaleAxes) }

// IsScaled reports whether the array keeps a scale.
func (c *core) IsScaled() bool { return c.scaleAxes != nil }

// Metadata describes the static fields canonically.
func (c *core) Metadata() string {
	return qarray.Metadata(&c.Base, fmt.Sprintf("packing=%s scaleAxes=%v", c.packing, c.scaleAxes))
}

// withComponents checks and installs components.
func (c core) withComponents(comps []implicitarray.Component) core {
	qarray.CheckComponents(&c.Base, comps, qarray.ComponentShapes(&c.Base)...)
	c.Base = qarray.WithComponents(c.Base, nil, comps...)
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

// Layout returns the graph-side view of the components that package lowering reads. It panics
// if the components are host tensors.
func (c *core) Layout() lowering.Layout {
	w := lowering.Signs{Packed: qarray.Node(&c.Base, packedIndex), Bits: c.packing.bitsPerValue()}
	if s, ok := c.Scale(); ok {
		w.Scale = s.Node()
	}
	return w
}

// Materialize builds the dense values (times the scale, if any) in the array's dtype, inside the
// graph of its components. Library code calls implicitarray.Materialize, which counts it.
func (c *core) Materialize() implicitarray.Value { return c.Layout().Dequantize(c.DType()) }

// Values returns the unpacked values in {-1, 0, +1} as an int8 host tensor of the logical
// dimensions, without the scale. It needs host components (the array straight from Pack or
// Quantize, or returned by implicitarray.Exec).
func (c *core) Values() (*tensors.Tensor, error) {
	if c.IsDeleted() {
		return nil, errors.Wrapf(implicitarray.ErrDeleted, "%s.Values", typeNameOf(c.packing))
	}
	packed := c.Packed()
	if !packed.IsTensor() {
		return nil, errors.Errorf("%s.Values: the packed component is a %s; accepted: a host tensor", typeNameOf(c.packing), packed)
	}
	bytes, err := tensors.CopyFlatData[uint8](packed.Tensor())
	if err != nil {
		return nil, errors.WithMessagef(err, "%s.Values", typeNameOf(c.packing))
	}
	dims := c.Shape().Dimensions
	return tensors.FromFlatDataAndDimensions(c.packing.unpackValues(bytes, dims), dims...), nil
}

// withDType returns a copy materializing to dtype.
func (c core) withDType(dtype dtypes.DType) (core, error) {
	if err := checkDType(typeNameOf(c.packing)+".WithDType", dtype, c.scaleAxes != nil); err != nil {
		return c, err
	}
	c.Base = qarray.WithDType(c.Base, dtype)
	return c, nil
}

// WithDType returns a new array that materializes to dtype, sharing the packed bytes. A scaled
// array needs a float dtype; an unscaled one accepts integer dtypes too. It panics on another
// dtype.
func (a *Array) WithDType(dtype dtypes.DType) *Array { return &Array{must(a.withDType(dtype))} }

// WithDType returns a new array that materializes to dtype (see Array.WithDType).
func (a *BitArray) WithDType(dtype dtypes.DType) *BitArray {
	return &BitArray{must(a.withDType(dtype))}
}

// WithStrategy returns a new array whose products use strategy s (see package lowering).
func (a *Array) WithStrategy(s lowering.Strategy) *Array {
	return &Array{a.with(qarray.WithStrategy(a.Base, s))}
}

// WithStrategy returns a new array whose products use strategy s (see package lowering).
func (a *BitArray) WithStrategy(s lowering.Strategy) *BitArray {
	return &BitArray{a.with(qarray.WithStrategy(a.Base, s))}
}

// WithSharding returns a new array with sharding s on its logical axes (the packed bytes and the
// scale follow it, see ComponentSpecs); a is untouched. The zero sharding.Sharding{} clears it.
func (a *Array) WithSharding(s sharding.Sharding) *Array {
	return &Array{a.with(qarray.WithSharding(a.Base, s))}
}

// WithSharding returns a new array with sharding s (see Array.WithSharding).
func (a *BitArray) WithSharding(s sharding.Sharding) *BitArray {
	return &BitArray{a.with(qarray.WithSharding(a.Base, s))}
}

// ComponentSpecs returns the specs of [packed] or [packed, scale] when the logical array is
// sharded by logical over m: packed has the logical spec (sharding.PackedRowsSpec: a sharded
// first axis needs (d0/4) % shards == 0 and holds quarter-strided rows, see ShardRows), the scale
// too except on its size-1 axes, which are replicated (sharding.ScaleSpec).
func (c *core) ComponentSpecs(m *sharding.Mesh, logical sharding.PartitionSpec) ([]sharding.PartitionSpec, error) {
	packed, err := sharding.PackedRowsSpec(m, logical, c.Shape(), c.packing.ValuesPerByte())
	if err != nil {
		return nil, errors.WithMessagef(err, "%s.ComponentSpecs", typeNameOf(c.packing))
	}
	s, ok := c.Scale()
	if !ok {
		return []sharding.PartitionSpec{packed}, nil
	}
	scale, err := sharding.ScaleSpec(m, logical, c.Shape(), s.Shape())
	if err != nil {
		return nil, errors.WithMessagef(err, "%s.ComponentSpecs", typeNameOf(c.packing))
	}
	return []sharding.PartitionSpec{packed, scale}, nil
}

// WithMeshAndAxis returns a new array sharded over m as axis says (the forms sharding.SpecFrom
// accepts), checked at once against the shape, the mesh and the packed layout (ComponentSpecs).
func (a *Array) WithMeshAndAxis(m *sharding.Mesh, axis any) (*Array, error) {
	return qarray.WithMeshAndAxis(&a.Base, m, axis, a.ComponentSpecs, a.WithSharding)
}

// WithMeshAndAxis returns a new array sharded over m (see Array.WithMeshAndAxis).
func (a *BitArray) WithMeshAndAxis(m *sharding.Mesh, axis any) (*BitArray, error) {
	return qarray.WithMeshAndAxis(&a.Base, m, axis, a.ComponentSpecs, a.WithSharding)
}

// ShardRows returns the logical rows (first-axis indices) held by shard s of n of an array with
// d0 rows packed perByte a byte (4 for Array, 8 for BitArray) whose packed rows are sharded along
// the first axis: for each group g, rows g·Q + s·Q/n … g·Q + (s+1)·Q/n − 1, with Q = d0/perByte.
// It returns an error unless d0 % perByte == 0, Q % n == 0 and 0 <= s < n.
func ShardRows(d0, perByte, n, s int) ([]int, error) {
	if perByte != 4 && perByte != 8 || d0%perByte != 0 || n <= 0 || (d0/perByte)%n != 0 || s < 0 || s >= n {
		return nil, errors.Errorf("onebit.ShardRows(d0=%d, perByte=%d, n=%d, s=%d): accepted: perByte 4 or 8, d0 %% perByte == 0, "+
			"(d0/perByte) %% n == 0, 0 <= s < n", d0, perByte, n, s)
	}
	q := d0 / perByte
	per := q / n
	rows := make([]int, 0, perByte*per)
	for g := range perByte {
		for j := range per {
			rows = append(rows, g*q+s*per+j)
		}
	}
	return rows, nil
}

// String describes the array, e.g. "onebit.Array(Int8)[8 4] 2bit".
func (c *core) String() string {
	details := c.packing.String()
	if c.scaleAxes != nil {
		details += fmt.Sprintf(" scale over %v", c.scaleAxes)
	}
	return qarray.Describe(&c.Base, details)
}

// with returns c's packing and scale axes on base b.
func (c *core) with(b qarray.Base) core { return core{b, c.packing, c.scaleAxes} }

// withParts returns a copy with new graph components, logical dimensions, scale axes and placement.
func (c *core) withParts(packed, scale *graph.Node, dims []int, scaleAxes []int, p sharding.Placement) core {
	comps := []implicitarray.Component{implicitarray.NodeComponent(packed)}
	if scale != nil {
		comps = append(comps, implicitarray.NodeComponent(scale))
	}
	b := qarray.WithComponents(c.Base, dims, comps...)
	return core{qarray.WithPlacement(b, p), c.packing, scaleAxes}
}
