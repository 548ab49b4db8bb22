package qarray

import (
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/sharding"
)

// Handlers are the implicitarray handlers of a format's array type that keep it in its format
// (Register). An op without one reaches implicitarray's generic fallback, which materializes.
type Handlers struct {
	// Ops are the handlers of the ops whose one operand is the array (reshape, transpose, ...).
	Ops map[implicitarray.Op]implicitarray.Handler
	// Concatenate, if not nil, handles a concatenation whose first operand is the array. It sees
	// only dense operands and arrays of the type: an implicit operand of another type sends the
	// call to the generic fallback, under that type's FallbackPolicy.
	Concatenate implicitarray.Handler
	// Gather, if not nil, handles a gather from the array with dense indices.
	Gather implicitarray.Handler
}

// Register registers, for array type A of the format called name ("nf4", "onebit.BitArray"),
// lowering's dot_general handlers and h; the rules are named after name. Format packages call it
// from init().
func Register[A lowering.Quantized](name string, h Handlers) {
	lowering.RegisterDotGeneral[A](name)
	t := implicitarray.TypeOf[A]()
	implicitarray.RegisterOps(name, t, h.Ops)
	if h.Concatenate != nil {
		concatenate := func(c *implicitarray.Call) implicitarray.Value {
			for _, v := range c.Operands {
				if _, implicit := v.(implicitarray.Array); implicit {
					if _, own := v.(A); !own {
						return c.Next()
					}
				}
			}
			return h.Concatenate(c)
		}
		implicitarray.Register(implicitarray.Rule{Op: implicitarray.OpConcatenate, Operands: []implicitarray.Match{t, implicitarray.Anything},
			Variadic: true, Handler: concatenate, Name: name + ".concatenate"})
	}
	if h.Gather != nil {
		implicitarray.Register(implicitarray.Rule{Op: implicitarray.OpGather, Operands: []implicitarray.Match{t, implicitarray.Dense},
			Handler: h.Gather, Name: name + ".gather"})
	}
}

// The steps the shape handlers of the format packages share: the logical dimensions a gather, a
// transpose or a concatenation gives, and the broadcast of a component whose trailing axes stay
// put.

// RowGather reads a gather call from an array (operand 0) with dense indices (operand 1): when
// the array shards no axis (it has no sharding, or one that replicates it over its mesh) and the
// indices pick whole slices of leading axes (their last dimension, the number of axes they index,
// is below the array's rank) it returns the indices, whether they are sorted and the logical
// dimensions of the result; otherwise ok is false (the fallback gathers a sharded array). The
// result's placement is ReplicatedPlacement.
func RowGather(c *implicitarray.Call) (indices *graph.Node, sorted bool, dims []int, ok bool) {
	if a, isArray := c.Operands[0].(sharding.Sharded); isArray {
		if s, isSharded := a.Sharding(); isSharded && slices.ContainsFunc(s.Spec, func(a sharding.AxisSpec) bool { return len(a) > 0 }) {
			return nil, false, nil, false
		}
	}
	shape := c.Operands[0].Shape()
	indices = c.Operands[1].(*graph.Node)
	if indices.Rank() < 1 || indices.Shape().Dim(-1) >= shape.Rank() {
		return nil, false, nil, false
	}
	k := indices.Shape().Dim(-1)
	dims = append(slices.Clone(indices.Shape().Dimensions[:indices.Rank()-1]), shape.Dimensions[k:]...)
	return indices, c.Params.(*implicitarray.GatherParams).IndicesAreSorted, dims, true
}

// ReplicatedPlacement is b's placement replicated: none if b has none, else replicated over b's
// mesh with a spec of no axes, which fits any rank. It is the placement of what an op makes of
// the array when b's spec cannot follow, e.g. the rows RowGather gathers (the rank changes).
func ReplicatedPlacement(b *Base) sharding.Placement {
	s, ok := b.placement.Sharding()
	if !ok {
		return b.placement
	}
	return b.placement.With(sharding.Sharding{Mesh: s.Mesh, Spec: sharding.PartitionSpec{}})
}

// ConvertFloatDType is the convert_element_type handler of an array type A that materializes in
// any real float dtype: lazy for such a target (A's WithDType, sharing the buffers); any other
// defers to the generic fallback, which materializes.
func ConvertFloatDType[A interface {
	implicitarray.Value
	WithDType(dtypes.DType) A
}](c *implicitarray.Call) implicitarray.Value {
	dtype := c.Params.(*implicitarray.ConvertDTypeParams).DType
	if !dtype.IsFloat() || dtype.IsComplex() {
		return c.Next()
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

// The ops that move whole rows of a blocked format (nf4, ggml): each row of the last axis is
// stored as blocks, so a component holds the logical leading axes, then its per-row block axes
// (rank-1 of them leading). A reshape, transpose or broadcast that leaves the last axis in place
// is that op on each component, the block axes carried along: exact.

// ReshapeKeepsRows reports whether the reshape of logical dimensions from to dims leaves the last
// axis unchanged.
func ReshapeKeepsRows(from, dims []int) bool {
	return len(dims) > 0 && dims[len(dims)-1] == from[len(from)-1]
}

// ReshapeRows reshapes component x of an array of the given logical rank to the logical dims
// (ReshapeKeepsRows).
func ReshapeRows(x *graph.Node, rank int, dims []int) *graph.Node {
	return graph.Reshape(x, append(slices.Clone(dims[:len(dims)-1]), x.Shape().Dimensions[rank-1:]...)...)
}

// TransposeKeepsRows reports whether the transpose by perm leaves the last axis last.
func TransposeKeepsRows(perm []int) bool { return perm[len(perm)-1] == len(perm)-1 }

// TransposeRows transposes component x by the logical perm (TransposeKeepsRows).
func TransposeRows(x *graph.Node, perm []int) *graph.Node {
	full := slices.Clone(perm)
	for i := len(perm); i < x.Rank(); i++ {
		full = append(full, i)
	}
	return graph.TransposeAllAxes(x, full...)
}

// BroadcastKeepsRows reports whether the broadcast p of an array whose last axis has size last
// maps that axis, unbroadcast, to the last output axis (new and broadcast leading axes copy whole
// rows).
func BroadcastKeepsRows(p *implicitarray.BroadcastInDimParams, last int) bool {
	outRank := len(p.Dimensions)
	return p.BroadcastAxes[len(p.BroadcastAxes)-1] == outRank-1 && p.Dimensions[outRank-1] == last
}

// BroadcastRows broadcasts component x of an array of the given logical rank by the logical p
// (BroadcastKeepsRows).
func BroadcastRows(x *graph.Node, rank int, p *implicitarray.BroadcastInDimParams) *graph.Node {
	outRank := len(p.Dimensions)
	dims := append(slices.Clone(p.Dimensions[:outRank-1]), x.Shape().Dimensions[rank-1:]...)
	axes := slices.Clone(p.BroadcastAxes[:rank-1])
	for i := range x.Rank() - rank + 1 {
		axes = append(axes, outRank-1+i)
	}
	return BroadcastComponent(x, dims, axes)
}
