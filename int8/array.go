package int8

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/qarray"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/sharding"
)

// Array is a float array stored as int8 codes (Weight, the logical dimensions) times a float
// Scale (the logical rank, size 1 on the quantized axes). See the package documentation for the
// layout. An Array is immutable: the With methods return new arrays.
type Array struct {
	qarray.Base
	axes []int // normalized quantized axes, in the order given
}

var (
	_ lowering.Quantized           = (*Array)(nil)
	_ implicitarray.FallbackPolicy = (*Array)(nil)
	_ sharding.Sharded             = (*Array)(nil)
	_ sharding.ComponentSharder    = (*Array)(nil)
)

const typeName = "int8.Array"

const (
	weightIndex = iota
	scaleIndex
)

func newArray(weight, scale implicitarray.Component, shape shapes.Shape, axes []int) *Array {
	return &Array{Base: qarray.New(typeName, shape, weight, scale), axes: axes}
}

// New assembles an Array from stored components, e.g. read from a checkpoint: weight is int8
// with the logical dimensions, scale a float array of the same rank whose dimensions are 1 or the
// weight's, and 1 on every one of axes (the quantized axes, negative allowed; none means (-1,)).
// dtype is the materialization dtype (a float dtype; dtypes.InvalidDType means the scale's). Both
// components are host tensors or both graph nodes.
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
	norm, err := qarray.NormalizeAxes(axes, ws.Rank())
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
	return newArray(weight, scale, shapes.Make(dtype, ws.Dimensions...), norm), nil
}

// Axes are the quantized axes (non-negative, in the order given): the scale has size 1 on them.
func (a *Array) Axes() []int { return slices.Clone(a.axes) }

// Weight is the int8 component, with the logical dimensions.
func (a *Array) Weight() implicitarray.Component { return qarray.Component(&a.Base, weightIndex) }

// Scale is the float scale component: the logical rank, size 1 on the quantized axes.
func (a *Array) Scale() implicitarray.Component { return qarray.Component(&a.Base, scaleIndex) }

// Metadata is the canonical form of the static fields.
func (a *Array) Metadata() string {
	return qarray.Metadata(&a.Base, fmt.Sprintf("axes=%v", a.axes))
}

// WithComponents returns a copy holding components [weight, scale] (same shapes).
func (a *Array) WithComponents(components []implicitarray.Component) implicitarray.Array {
	qarray.CheckComponents(&a.Base, components, qarray.ComponentShapes(&a.Base)...)
	return a.with(qarray.WithComponents(a.Base, nil, components...))
}

// Layout returns the graph-side view of the components that package lowering reads. It panics
// if the components are host tensors.
func (a *Array) Layout() lowering.Layout {
	return lowering.Int8{Codes: qarray.Node(&a.Base, weightIndex), Scale: qarray.Node(&a.Base, scaleIndex)}
}

// Materialize returns weight × scale computed in float32 (float64 for a float64 scale or
// dtype), converted to the array's dtype. Library code calls implicitarray.Materialize, which counts it.
func (a *Array) Materialize() implicitarray.Value { return a.Layout().Dequantize(a.DType()) }

// ComponentSpecs returns the specs of [weight, scale] when the logical array is sharded by logical
// over m: the weight has the logical spec; the scale too, except on its size-1 axes, which are
// replicated (sharding.ScaleSpec).
func (a *Array) ComponentSpecs(m *sharding.Mesh, logical sharding.PartitionSpec) ([]sharding.PartitionSpec, error) {
	if err := sharding.Validate(m, logical, a.Shape()); err != nil {
		return nil, errors.WithMessage(err, "int8.Array.ComponentSpecs")
	}
	scale, err := sharding.ScaleSpec(m, logical, a.Shape(), a.Scale().Shape())
	if err != nil {
		return nil, errors.WithMessage(err, "int8.Array.ComponentSpecs")
	}
	return []sharding.PartitionSpec{logical.Padded(a.Shape().Rank()), scale}, nil
}

// String describes the array, e.g. "int8.Array(Float32)[128 256] axes [1]".
func (a *Array) String() string { return qarray.Describe(&a.Base, fmt.Sprintf("axes %v", a.axes)) }

// with returns an array of a's quantized axes on base b.
func (a *Array) with(b qarray.Base) *Array { return &Array{Base: b, axes: a.axes} }

// withParts returns a copy with new components, logical dimensions, quantized axes and placement.
func (a *Array) withParts(weight, scale implicitarray.Component, dims, axes []int, p sharding.Placement) *Array {
	b := qarray.WithComponents(a.Base, dims, weight, scale)
	return &Array{Base: qarray.WithPlacement(b, p), axes: axes}
}
