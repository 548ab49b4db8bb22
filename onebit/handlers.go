package onebit

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/mesh"
)

func init() {
	registerHandlers[*Array]("onebit.Array")
	registerHandlers[*BitArray]("onebit.BitArray")
}

// registerHandlers registers the handlers eformer's Array1B has (one div handler is enough),
// with operand patterns that name the type exactly, so they never compete with other formats.
func registerHandlers[T packedArray](name string) {
	t := implicitarray.TypeOf[T]()
	dense := implicitarray.Dense
	reg := func(op implicitarray.Op, operands []implicitarray.Match, h implicitarray.Handler, what string) {
		implicitarray.Register(implicitarray.Rule{Op: op, Operands: operands, Handler: h, Name: name + "." + what})
	}
	reg(implicitarray.OpDotGeneral, []implicitarray.Match{dense, t},
		func(c *implicitarray.Call) implicitarray.Value { return dotGeneral(c, 1) }, "dotGeneral(dense, packed)")
	reg(implicitarray.OpDotGeneral, []implicitarray.Match{t, dense},
		func(c *implicitarray.Call) implicitarray.Value { return dotGeneral(c, 0) }, "dotGeneral(packed, dense)")
	reg(implicitarray.OpTranspose, []implicitarray.Match{t}, transpose, "transpose")
	reg(implicitarray.OpReshape, []implicitarray.Match{t}, reshape, "reshape")
	reg(implicitarray.OpBroadcastInDim, []implicitarray.Match{t}, broadcastInDim, "broadcastInDim")
	reg(implicitarray.OpConvertDType, []implicitarray.Match{t}, convertDType, "convertDType")

	materialize := func(c *implicitarray.Call) implicitarray.Value { return c.MaterializeAndApply() }
	for _, op := range []implicitarray.Op{implicitarray.OpAdd, implicitarray.OpMul, implicitarray.OpDiv,
		implicitarray.OpMax, implicitarray.OpLessThan, implicitarray.OpConvGeneral} {
		for _, operands := range [][]implicitarray.Match{{t, dense}, {dense, t}, {t, t}} {
			reg(op, operands, materialize, string(op)+"(materialize)")
		}
	}
	for _, op := range []implicitarray.Op{implicitarray.OpExp, implicitarray.OpLog, implicitarray.OpSqrt,
		implicitarray.OpIntegerPow, implicitarray.OpReduceSum, implicitarray.OpReduceMax,
		implicitarray.OpReduceMin, implicitarray.OpReduceProduct} {
		reg(op, []implicitarray.Match{t}, materialize, string(op)+"(materialize)")
	}
	reg(implicitarray.OpGather, []implicitarray.Match{t, dense}, materialize, "gather(materialize)")
	implicitarray.Register(implicitarray.Rule{Op: implicitarray.OpConcatenate, Operands: []implicitarray.Match{t},
		Variadic: true, Handler: materialize, Name: name + ".concatenate(materialize)"})
}

// convertDType is lazy: a new array with the new materialization dtype, same bytes.
func convertDType(c *implicitarray.Call) implicitarray.Value {
	pa := c.Operands[0].(packedArray)
	nc, err := pa.base().withDType(c.Params.(*implicitarray.ConvertDTypeParams).DType)
	if err != nil {
		return c.MaterializeAndApply()
	}
	return pa.withCore(nc)
}

// repack materializes the values (int8, no scale), applies the call's dense op and packs the
// result again: exact, since the values are ternary. If the new first dimension cannot be packed,
// the result is dense (materialized, scale included).
func repack(c *implicitarray.Call, w *core, newScale func(*graph.Node) *graph.Node, placement mesh.Placement) implicitarray.Value {
	values := c.Dense(decodeValues(w.layout, w.packed.Node(), dtypes.Int8))
	if w.layout.checkPackable("", values.Shape().Dimensions) != nil {
		return c.MaterializeAndApply()
	}
	out := *w
	out.packed = implicitarray.NodeComponent(packValues(w.layout, values))
	out.shape = shapes.Make(w.shape.DType, values.Shape().Dimensions...)
	if w.scaleAxes != nil {
		out.setScale(newScale(w.scale.Node()))
	}
	out.Placement = placement
	return c.Operands[0].(packedArray).withCore(out)
}

// setScale installs a graph-side scale node and recomputes the axes it is reduced over (those
// of dimension 1 where the values' dimension is not 1, or all if the scale is a single value).
func (c *core) setScale(s *graph.Node) {
	c.scale = implicitarray.NodeComponent(s)
	sDims := s.Shape().Dimensions
	c.scaleAxes = []int{}
	for i, d := range sDims {
		if d == 1 && (c.shape.Dimensions[i] != 1 || s.Shape().Size() == 1) {
			c.scaleAxes = append(c.scaleAxes, i)
		}
	}
}

// transpose keeps the bytes packed when the first axis stays first (a transpose of the packed
// bytes), else re-packs.
func transpose(c *implicitarray.Call) implicitarray.Value {
	pa := c.Operands[0].(packedArray)
	w := pa.base()
	w.checkLive("Transpose")
	perm := c.Params.(*implicitarray.TransposeParams).Permutation
	scale := func(s *graph.Node) *graph.Node { return graph.TransposeAllAxes(s, perm...) }
	placement := w.Placement.Transposed(perm)
	if perm[0] != 0 {
		return repack(c, w, scale, placement)
	}
	out := *w
	out.packed = implicitarray.NodeComponent(graph.TransposeAllAxes(w.packed.Node(), perm...))
	dims := make([]int, len(perm))
	for i, a := range perm {
		dims[i] = w.shape.Dimensions[a]
	}
	out.shape = shapes.Make(w.shape.DType, dims...)
	if w.scaleAxes != nil {
		out.setScale(scale(w.scale.Node()))
	}
	out.Placement = placement
	return pa.withCore(out)
}

// reshape keeps the bytes packed when the first dimension is unchanged, else re-packs. A scale
// that is not a single value cannot follow a reshape: the result is then dense.
func reshape(c *implicitarray.Call) implicitarray.Value {
	pa := c.Operands[0].(packedArray)
	w := pa.base()
	w.checkLive("Reshape")
	dims := c.Params.(*implicitarray.ReshapeParams).Dimensions
	if w.scaleAxes != nil && w.scale.Shape().Size() != 1 || len(dims) == 0 {
		return c.MaterializeAndApply()
	}
	ones := make([]int, len(dims))
	for i := range ones {
		ones[i] = 1
	}
	scale := func(s *graph.Node) *graph.Node { return graph.Reshape(s, ones...) }
	placement := w.Placement.Reshaped(w.shape.Dimensions, dims)
	if dims[0] != w.shape.Dimensions[0] {
		return repack(c, w, scale, placement)
	}
	out := *w
	out.packed = implicitarray.NodeComponent(graph.Reshape(w.packed.Node(), w.layout.packedDims(dims)...))
	out.shape = shapes.Make(w.shape.DType, dims...)
	if w.scaleAxes != nil {
		out.setScale(scale(w.scale.Node()))
	}
	out.Placement = placement
	return pa.withCore(out)
}

// broadcastInDim keeps the bytes packed when the first axis maps to the first output axis with
// the same dimension, else re-packs.
func broadcastInDim(c *implicitarray.Call) implicitarray.Value {
	pa := c.Operands[0].(packedArray)
	w := pa.base()
	w.checkLive("BroadcastInDim")
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
	placement := w.Placement.Broadcasted(p.BroadcastAxes, len(p.Dimensions))
	if len(p.BroadcastAxes) == 0 || p.BroadcastAxes[0] != 0 || p.Dimensions[0] != w.shape.Dimensions[0] {
		return repack(c, w, scale, placement)
	}
	// Insert the new axes as 1s, then broadcast the 1s.
	packedDims := w.layout.packedDims(w.shape.Dimensions)
	expanded := make([]int, len(p.Dimensions))
	for i := range expanded {
		expanded[i] = 1
	}
	for i, a := range p.BroadcastAxes {
		expanded[a] = packedDims[i]
	}
	packed := graph.BroadcastToDims(graph.Reshape(w.packed.Node(), expanded...), w.layout.packedDims(p.Dimensions)...)
	out := *w
	out.packed = implicitarray.NodeComponent(packed)
	out.shape = shapes.Make(w.shape.DType, p.Dimensions...)
	if w.scaleAxes != nil {
		out.setScale(scale(w.scale.Node()))
	}
	out.Placement = placement
	return pa.withCore(out)
}
