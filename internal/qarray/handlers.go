package qarray

import (
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/quanta-ml/quanta/implicitarray"
)

// The steps the shape handlers of the format packages share: the logical dimensions a transpose
// or a concatenation gives, and the broadcast of a component whose trailing axes stay put.

// ConvertFloatDType is the convert_element_type handler of an array type A that materializes in
// any real float dtype: lazy for such a target (A's WithDType, sharing the buffers), a
// materialization for any other.
func ConvertFloatDType[A interface {
	implicitarray.Value
	WithDType(dtypes.DType) A
}](c *implicitarray.Call) implicitarray.Value {
	dtype := c.Params.(*implicitarray.ConvertDTypeParams).DType
	if !dtype.IsFloat() || dtype.IsComplex() {
		return c.MaterializeAndApply()
	}
	return c.Operands[0].(A).WithDType(dtype)
}

// TransposedDims returns the dimensions of dims transposed by perm: output axis i has dims[perm[i]].
func TransposedDims(dims, perm []int) []int {
	out := make([]int, len(perm))
	for i, p := range perm {
		out[i] = dims[p]
	}
	return out
}

// ConcatenatedDims returns the logical dimensions of operands concatenated along axis: the
// first operand's, with the sum of all along axis.
func ConcatenatedDims(operands []implicitarray.Value, axis int) []int {
	dims := slices.Clone(operands[0].Shape().Dimensions)
	dims[axis] = 0
	for _, v := range operands {
		dims[axis] += v.Shape().Dim(axis)
	}
	return dims
}

// BroadcastComponent is broadcast_in_dim of a stored component x to dims, input axis i going to
// output axis axes[i] (axes increasing, the component's trailing axes among them).
func BroadcastComponent(x *graph.Node, dims, axes []int) *graph.Node {
	var expanded []int
	for i := range dims {
		if !slices.Contains(axes, i) {
			expanded = append(expanded, i)
		}
	}
	if len(expanded) == 0 {
		return graph.BroadcastToDims(x, dims...)
	}
	return graph.ExpandAndBroadcast(x, dims, expanded)
}
