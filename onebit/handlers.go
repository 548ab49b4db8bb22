package onebit

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/qarray"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/sharding"
)

// The handlers of the ops that keep a packed array packed; every other op reaches implicitarray's
// generic fallback, which materializes (warning once per op: FallbackWarn).
func init() {
	registerHandlers[*Array]("onebit.Array")
	registerHandlers[*BitArray]("onebit.BitArray")
}

func registerHandlers[T packedArray](name string) {
	qarray.Register[T](name, qarray.Handlers{Ops: map[implicitarray.Op]implicitarray.Handler{
		implicitarray.OpTranspose: transpose, implicitarray.OpReshape: reshape,
		implicitarray.OpBroadcastInDim: broadcastInDim, implicitarray.OpConvertDType: convertDType}})
}

// convertDType is lazy: a new array with the new materialization dtype, same bytes; a dtype the
// array cannot materialize in (an integer dtype for a scaled array) defers to the generic
// fallback, which materializes, and so does an unsigned dtype for an array that materializes in a
// float dtype: the lazy array would wrap -1 around as an integer, where converting the float -1
// is the backend's float-to-unsigned rule.
func convertDType(c *implicitarray.Call) implicitarray.Value {
	pa := c.Operands[0].(packedArray)
	dtype := c.Params.(*implicitarray.ConvertDTypeParams).DType
	if dtype.IsUnsigned() && pa.base().DType().IsFloat() {
		return c.Next()
	}
	nc, err := pa.base().withDType(dtype)
	if err != nil {
		return c.Next()
	}
	return pa.withCore(nc)
}

// scaleAxesOf returns the axes a scale of dims is reduced over for values of valueDims: those of
// dimension 1 where the values' dimension is not 1, or all if the scale is a single value.
func scaleAxesOf(dims, valueDims []int) []int {
	axes := []int{}
	single := product(dims) == 1
	for i, d := range dims {
		if d == 1 && (valueDims[i] != 1 || single) {
			axes = append(axes, i)
		}
	}
	return axes
}

// moved returns w with new packed bytes and logical dimensions, the scale moved by moveScale.
func moved(c *implicitarray.Call, w *core, packed *graph.Node, dims []int, moveScale func(*graph.Node) *graph.Node,
	placement sharding.Placement) implicitarray.Value {
	var scale *graph.Node
	var axes []int
	if s, ok := w.Scale(); ok {
		scale = moveScale(s.Node())
		axes = scaleAxesOf(scale.Shape().Dimensions, dims)
	}
	return c.Operands[0].(packedArray).withCore(w.withParts(packed, scale, dims, axes, placement))
}

// repack decodes the values (int8, no scale), applies the call's dense op and packs the result
// again: exact, since the values are ternary. If the new first dimension cannot be packed, it
// defers to the generic fallback, which materializes (scale included).
func repack(c *implicitarray.Call, w *core, moveScale func(*graph.Node) *graph.Node, placement sharding.Placement) implicitarray.Value {
	raw := lowering.Signs{Packed: w.Packed().Node(), Bits: w.packing.bitsPerValue()}
	values := c.Dense(raw.Dequantize(dtypes.Int8))
	dims := values.Shape().Dimensions
	if w.packing.checkPackable("", dims) != nil {
		return c.Next()
	}
	return moved(c, w, packValues(w.packing, values), dims, moveScale, placement)
}

// transpose keeps the bytes packed when the first axis stays first (a transpose of the packed
// bytes), else re-packs.
func transpose(c *implicitarray.Call) implicitarray.Value {
	w := c.Operands[0].(packedArray).base()
	perm := c.Params.(*implicitarray.TransposeParams).Permutation
	scale := func(s *graph.Node) *graph.Node { return graph.TransposeAllAxes(s, perm...) }
	dims := qarray.TransposedDims(w.Shape().Dimensions, perm)
	placement := packablePlacement(qarray.Placement(&w.Base).Transposed(perm), w.packing, dims, perm[0] != 0)
	if perm[0] != 0 {
		return repack(c, w, scale, placement)
	}
	return moved(c, w, graph.TransposeAllAxes(w.Packed().Node(), perm...), dims, scale, placement)
}

// packablePlacement returns p, the placement of an array of dims packed by l, with its first axis
// replicated when that axis is sharded in more pieces than the packed rows (dims[0] / values a
// byte) divide into (sharding.PackedRowsSpec): a transpose can bring such an axis to the front
// (moved). A spec alone (no mesh) does not say into how many pieces: an axis brought to the front
// is then replicated, as it may not fit the mesh the array is placed over.
func packablePlacement(p sharding.Placement, l Packing, dims []int, moved bool) sharding.Placement {
	s, ok := p.Sharding()
	if !ok || len(s.Spec) == 0 || len(s.Spec[0]) == 0 || s.Mesh == nil && !moved {
		return p
	}
	if s.Mesh != nil {
		n, err := sharding.NumShards(s.Mesh, s.Spec, len(dims))
		if err != nil || (dims[0]/l.ValuesPerByte())%n[0] == 0 {
			return p
		}
	}
	s.Spec[0] = nil
	return p.With(s)
}

// reshape keeps the bytes packed when the first dimension is unchanged, else re-packs. A scale
// that is not a single value cannot follow a reshape, and a scalar has no axis to pack along:
// those defer to the generic fallback, which materializes.
func reshape(c *implicitarray.Call) implicitarray.Value {
	w := c.Operands[0].(packedArray).base()
	dims := c.Params.(*implicitarray.ReshapeParams).Dimensions
	if s, ok := w.Scale(); ok && s.Shape().Size() != 1 || len(dims) == 0 {
		return c.Next()
	}
	ones := make([]int, len(dims))
	for i := range ones {
		ones[i] = 1
	}
	scale := func(s *graph.Node) *graph.Node { return graph.Reshape(s, ones...) }
	placement := qarray.Placement(&w.Base).Reshaped(w.Shape().Dimensions, dims)
	if dims[0] != w.Shape().Dimensions[0] {
		return repack(c, w, scale, placement)
	}
	return moved(c, w, graph.Reshape(w.Packed().Node(), w.packing.packedDims(dims)...), dims, scale, placement)
}

// broadcastInDim keeps the bytes packed when the first axis maps to the first output axis with
// the same dimension, else re-packs.
func broadcastInDim(c *implicitarray.Call) implicitarray.Value {
	w := c.Operands[0].(packedArray).base()
	p := c.Params.(*implicitarray.BroadcastInDimParams)
	// The scale keeps its dimensions on mapped axes and gets 1 on new ones: a reshape.
	scale := func(s *graph.Node) *graph.Node {
		dims := make([]int, len(p.Dimensions))
		for i := range dims {
			dims[i] = 1
		}
		for i, a := range p.BroadcastAxes {
			dims[a] = s.Shape().Dimensions[i]
		}
		return graph.Reshape(s, dims...)
	}
	placement := qarray.Placement(&w.Base).Broadcasted(p.BroadcastAxes, len(p.Dimensions))
	if len(p.BroadcastAxes) == 0 || p.BroadcastAxes[0] != 0 || p.Dimensions[0] != w.Shape().Dimensions[0] {
		return repack(c, w, scale, placement)
	}
	// Insert the new axes as 1s, then broadcast the 1s.
	packedDims := w.packing.packedDims(w.Shape().Dimensions)
	expanded := make([]int, len(p.Dimensions))
	for i := range expanded {
		expanded[i] = 1
	}
	for i, a := range p.BroadcastAxes {
		expanded[a] = packedDims[i]
	}
	packed := graph.BroadcastToDims(graph.Reshape(w.Packed().Node(), expanded...), w.packing.packedDims(p.Dimensions)...)
	return moved(c, w, packed, p.Dimensions, scale, placement)
}
