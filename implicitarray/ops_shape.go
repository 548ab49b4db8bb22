package implicitarray

import (
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
)

// normalizeAxis maps a possibly negative axis into [0, rank), or panics naming what is accepted.
func normalizeAxis(axis, rank int, what string) int {
	a := axis
	if a < 0 {
		a += rank
	}
	if a < 0 || a >= rank {
		panic(errors.Errorf("%s %d out of range for rank %d; accepted: -%d..%d", what, axis, rank, rank, rank-1))
	}
	return a
}

// normalizeAxes maps axes into [0, rank) and rejects repeats.
func normalizeAxes(axes []int, rank int, what string) []int {
	out := make([]int, len(axes))
	for i, a := range axes {
		out[i] = normalizeAxis(a, rank, what)
		if slices.Contains(out[:i], out[i]) {
			panic(errors.Errorf("%s %v repeat axis %d; accepted: distinct axes", what, axes, out[i]))
		}
	}
	return out
}

// ReshapeParams are the parameters of Reshape: the new dimensions, with any -1 resolved.
type ReshapeParams struct{ Dimensions []int }

// Reshape returns x with new dimensions (one of them may be -1) and the same number of elements.
// A reshape to x's own dimensions returns x itself: an implicit array is not re-quantized or
// materialized by it.
func Reshape(x Value, dimensions ...int) Value {
	defer annotate(OpReshape, x)
	mustNotBeNil(x)
	dims := slices.Clone(dimensions)
	size, unknown := 1, -1
	for i, d := range dims {
		switch {
		case d == -1 && unknown == -1:
			unknown = i
		case d < 0:
			panic(errors.Errorf("invalid dimensions %v; accepted: positive dimensions and at most one -1", dimensions))
		default:
			size *= d
		}
	}
	total := x.Shape().Size()
	if unknown >= 0 && size == 0 {
		panic(errors.Errorf("cannot reshape %s to %v: next to a zero dimension, -1 stands for any size; "+
			"accepted: explicit dimensions", x.Shape(), dimensions))
	}
	if unknown >= 0 && total%size == 0 {
		dims[unknown] = total / size
		size *= dims[unknown]
	}
	if size != total {
		panic(errors.Errorf("cannot reshape %s (%d elements) to %v", x.Shape(), total, dimensions))
	}
	if slices.Equal(dims, x.Shape().Dimensions) {
		checkOperands(OpReshape, []Value{x}) // rejects what dispatch would (a host tensor)
		return x
	}
	return dispatch(OpReshape, []Value{x}, &ReshapeParams{dims}, func(n []*graph.Node) *graph.Node {
		return graph.Reshape(n[0], dims...)
	})
}

// TransposeParams are the parameters of Transpose and TransposeAllAxes: output axis i is input
// axis Permutation[i].
type TransposeParams struct{ Permutation []int }

// Transpose swaps the axes axisA and axisB of x (negative allowed), as graph.Transpose.
func Transpose(x Value, axisA, axisB int) Value {
	defer annotate(OpTranspose, x)
	mustNotBeNil(x)
	rank := x.Shape().Rank()
	a, b := normalizeAxis(axisA, rank, "axisA"), normalizeAxis(axisB, rank, "axisB")
	perm := make([]int, rank)
	for i := range perm {
		perm[i] = i
	}
	perm[a], perm[b] = b, a
	return transposeAllAxes(x, perm)
}

// TransposeAllAxes permutes the axes of x: output axis i is input axis permutation[i] (negative
// allowed), as graph.TransposeAllAxes.
func TransposeAllAxes(x Value, permutation ...int) Value {
	defer annotate(OpTranspose, x)
	mustNotBeNil(x)
	return transposeAllAxes(x, permutation)
}

// transposeAllAxes is TransposeAllAxes without its error annotation, which its callers add once.
func transposeAllAxes(x Value, permutation []int) Value {
	rank := x.Shape().Rank()
	if len(permutation) != rank {
		panic(errors.Errorf("permutation %v has %d axes; accepted: a permutation of all %d axes", permutation, len(permutation), rank))
	}
	perm := normalizeAxes(permutation, rank, "permutation")
	return dispatch(OpTranspose, []Value{x}, &TransposeParams{perm}, func(n []*graph.Node) *graph.Node {
		return graph.TransposeAllAxes(n[0], perm...)
	})
}

// BroadcastInDimParams are the parameters of BroadcastInDim, as XLA's broadcast_in_dim: the output
// dimensions, and for each input axis the output axis it maps to (strictly increasing).
type BroadcastInDimParams struct {
	Dimensions    []int
	BroadcastAxes []int
}

// BroadcastInDim broadcasts x to dimensions: input axis i becomes output axis broadcastAxes[i]
// (strictly increasing), whose dimension must equal x's or x's must be 1; other output axes are new.
// A broadcast to x's own dimensions returns x itself: an implicit array is not re-quantized or
// materialized by it.
func BroadcastInDim(x Value, dimensions []int, broadcastAxes []int) Value {
	defer annotate(OpBroadcastInDim, x)
	mustNotBeNil(x)
	in := x.Shape()
	if slices.ContainsFunc(dimensions, func(d int) bool { return d < 0 }) {
		panic(errors.Errorf("dimensions %v of %s; accepted: sizes >= 0", dimensions, in))
	}
	if len(broadcastAxes) != in.Rank() {
		panic(errors.Errorf("broadcastAxes %v must have one entry per axis of %s", broadcastAxes, in))
	}
	axes := normalizeAxes(broadcastAxes, len(dimensions), "broadcastAxes")
	for i, a := range axes {
		if i > 0 && a <= axes[i-1] {
			panic(errors.Errorf("broadcastAxes %v must be strictly increasing", broadcastAxes))
		}
		if d := in.Dimensions[i]; d != 1 && d != dimensions[a] {
			panic(errors.Errorf("axis %d of %s (dim %d) cannot broadcast to output axis %d of %v", i, in, d, a, dimensions))
		}
	}
	if slices.Equal(dimensions, in.Dimensions) {
		checkOperands(OpBroadcastInDim, []Value{x}) // rejects what dispatch would (a host tensor)
		return x
	}
	params := &BroadcastInDimParams{Dimensions: slices.Clone(dimensions), BroadcastAxes: axes}
	return dispatch(OpBroadcastInDim, []Value{x}, params, func(n []*graph.Node) *graph.Node {
		return denseBroadcastInDim(n[0], params)
	})
}

func denseBroadcastInDim(x *graph.Node, p *BroadcastInDimParams) *graph.Node {
	var expanded []int
	for a := range p.Dimensions {
		if !slices.Contains(p.BroadcastAxes, a) {
			expanded = append(expanded, a)
		}
	}
	if len(expanded) == 0 {
		return graph.BroadcastToDims(x, p.Dimensions...)
	}
	return graph.ExpandAndBroadcast(x, p.Dimensions, expanded)
}

// ConcatenateParams are the parameters of Concatenate.
type ConcatenateParams struct{ Axis int }

// Concatenate joins values along axis; all other dimensions and the dtypes must agree.
func Concatenate(values []Value, axis int) Value {
	defer annotate(OpConcatenate, values...)
	if len(values) == 0 {
		panic(errors.New("no values to concatenate; accepted: one or more"))
	}
	mustNotBeNil(values...)
	first := values[0].Shape()
	if first.Rank() == 0 {
		panic(errors.Errorf("values of rank 0 (%s) have no axis to concatenate on; accepted: values of rank >= 1", first))
	}
	a := normalizeAxis(axis, first.Rank(), "axis")
	for _, v := range values[1:] {
		s := v.Shape()
		ok := s.Rank() == first.Rank() && s.DType == first.DType
		for i := 0; ok && i < s.Rank(); i++ {
			ok = i == a || s.Dimensions[i] == first.Dimensions[i]
		}
		if !ok {
			panic(errors.Errorf("shapes %s and %s cannot be concatenated on axis %d", first, s, axis))
		}
	}
	params := &ConcatenateParams{a}
	return dispatch(OpConcatenate, values, params, func(n []*graph.Node) *graph.Node {
		return graph.Concatenate(n, params.Axis)
	})
}

// GatherParams are the parameters of Gather.
type GatherParams struct{ IndicesAreSorted bool }

// Gather is GoMLX's Gather: it picks slices of params at the positions in indices, whose last axis
// indexes the leading axes of params.
func Gather(params, indices Value, indicesAreSorted ...bool) Value {
	defer annotate(OpGather, params, indices)
	sorted := len(indicesAreSorted) > 0 && indicesAreSorted[0]
	return dispatch(OpGather, []Value{params, indices}, &GatherParams{sorted}, func(n []*graph.Node) *graph.Node {
		return graph.Gather(n[0], n[1], sorted)
	})
}

// ConvertDTypeParams are the parameters of ConvertDType.
type ConvertDTypeParams struct{ DType dtypes.DType }

// ConvertDType returns x converted to dtype. Format handlers make this lazy: the result stays
// implicit and only its materialization dtype changes. It panics, naming x, if dtype is not one
// GoMLX converts to (a bool, integer, float or complex dtype; InvalidDType is none).
func ConvertDType(x Value, dtype dtypes.DType) Value {
	defer annotate(OpConvertDType, x)
	if !dtype.IsSupported() && dtype != dtypes.Uint64 {
		panic(errors.Errorf("target dtype %s; accepted: Bool, Int8, Int16, Int32, Int64, Uint8, Uint16, Uint32, Uint64, "+
			"Float16, BFloat16, Float32, Float64, Complex64 or Complex128", dtype))
	}
	return dispatch(OpConvertDType, []Value{x}, &ConvertDTypeParams{dtype}, func(n []*graph.Node) *graph.Node {
		return graph.ConvertDType(n[0], dtype)
	})
}

// ReduceParams are the parameters of the reductions: the reduced axes, normalized (all axes when
// none were given).
type ReduceParams struct{ Axes []int }

func reduce(op Op, x Value, axes []int, fn func(*graph.Node, ...int) *graph.Node) Value {
	defer annotate(op, x)
	mustNotBeNil(x)
	rank := x.Shape().Rank()
	norm := normalizeAxes(axes, rank, "axes")
	if len(axes) == 0 {
		norm = make([]int, rank)
		for i := range norm {
			norm[i] = i
		}
	}
	return dispatch(op, []Value{x}, &ReduceParams{norm}, func(n []*graph.Node) *graph.Node { return fn(n[0], norm...) })
}

// ReduceSum sums x over axes (all axes if none given).
func ReduceSum(x Value, axes ...int) Value { return reduce(OpReduceSum, x, axes, graph.ReduceSum) }

// ReduceMax takes the maximum of x over axes (all axes if none given).
func ReduceMax(x Value, axes ...int) Value { return reduce(OpReduceMax, x, axes, graph.ReduceMax) }

// ReduceMin takes the minimum of x over axes (all axes if none given).
func ReduceMin(x Value, axes ...int) Value { return reduce(OpReduceMin, x, axes, graph.ReduceMin) }

// ReduceMultiply multiplies x over axes (all axes if none given).
func ReduceMultiply(x Value, axes ...int) Value {
	return reduce(OpReduceMultiply, x, axes, graph.ReduceMultiply)
}
