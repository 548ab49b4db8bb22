package int8

import (
	"slices"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/quanta-ml/quanta/implicitarray"
)

// The handlers of eformer's Array8B (see the package documentation for the table).
func init() {
	t := implicitarray.TypeOf[*Array]()
	dense := implicitarray.Dense
	register := func(op implicitarray.Op, name string, h implicitarray.Handler, operands ...implicitarray.Match) {
		implicitarray.Register(implicitarray.Rule{Op: op, Operands: operands, Handler: h, Name: "int8." + name})
	}
	materialize := func(c *implicitarray.Call) implicitarray.Value { return c.MaterializeAndApply() }

	register(implicitarray.OpDotGeneral, "dotGeneral(dense, int8)", dotGeneralHandler, dense, t)
	register(implicitarray.OpDotGeneral, "dotGeneral(int8, dense)", dotGeneralHandler, t, dense)
	register(implicitarray.OpDotGeneral, "dotGeneral(int8, int8)", materialize, t, t)
	register(implicitarray.OpTranspose, "transpose", transposeHandler, t)
	register(implicitarray.OpBroadcastInDim, "broadcastInDim", broadcastInDimHandler, t)
	register(implicitarray.OpReshape, "reshape", reshapeHandler, t)
	register(implicitarray.OpConvertDType, "convertDType", convertDTypeHandler, t)

	// eformer's materializing handlers: the result is dense.
	for _, op := range []implicitarray.Op{implicitarray.OpAdd, implicitarray.OpMul, implicitarray.OpDiv,
		implicitarray.OpMax, implicitarray.OpLessThan, implicitarray.OpConvGeneral, implicitarray.OpGather} {
		register(op, string(op)+"(int8, dense)", materialize, t, dense)
		register(op, string(op)+"(dense, int8)", materialize, dense, t)
		register(op, string(op)+"(int8, int8)", materialize, t, t)
	}
	for _, op := range []implicitarray.Op{implicitarray.OpExp, implicitarray.OpLog, implicitarray.OpSqrt,
		implicitarray.OpIntegerPow, implicitarray.OpReduceSum, implicitarray.OpReduceMax,
		implicitarray.OpReduceMin, implicitarray.OpReduceProduct} {
		register(op, string(op), materialize, t)
	}
	implicitarray.Register(implicitarray.Rule{Op: implicitarray.OpConcatenate, Operands: []implicitarray.Match{t},
		Variadic: true, Handler: materialize, Name: "int8.concatenate"})
}

func dotGeneralHandler(c *implicitarray.Call) implicitarray.Value {
	x, w, wIsRhs := operands(c.Operands[0], c.Operands[1])
	return dotGeneral(x, w, c.Params.(*implicitarray.DotGeneralParams), wIsRhs, w.lowering)
}

// transposeHandler transposes weight and scale; quantized axis a moves to the output axis i with
// perm[i] == a (the inverse permutation; eformer applies the forward one).
func transposeHandler(c *implicitarray.Call) implicitarray.Value {
	a := c.Operands[0].(*Array)
	a.mustNotBeDeleted("Transpose")
	perm := c.Params.(*implicitarray.TransposeParams).Permutation
	b := a.clone()
	b.weight = implicitarray.NodeComponent(graph.TransposeAllAxes(a.weight.Node(), perm...))
	b.scale = implicitarray.NodeComponent(graph.TransposeAllAxes(a.scale.Node(), perm...))
	b.shape.Dimensions = b.weight.Shape().Dimensions
	b.axes = make([]int, len(a.axes))
	for i, axis := range a.axes {
		b.axes[i] = slices.Index(perm, axis)
	}
	b.Placement = a.Placement.Transposed(perm)
	return b
}

// broadcastInDimHandler broadcasts the weight, and reshapes the scale to the output rank keeping
// it compact: size 1 on the new axes (added to the quantized axes) and where it was 1.
func broadcastInDimHandler(c *implicitarray.Call) implicitarray.Value {
	a := c.Operands[0].(*Array)
	a.mustNotBeDeleted("BroadcastInDim")
	p := c.Params.(*implicitarray.BroadcastInDimParams)
	b := a.clone()
	b.weight = implicitarray.NodeComponent(c.Dense(a.weight.Node()))
	sd := a.scale.Shape().Dimensions
	dims := ones(len(p.Dimensions))
	for i, o := range p.BroadcastAxes {
		dims[o] = sd[i]
	}
	b.scale = implicitarray.NodeComponent(graph.Reshape(a.scale.Node(), dims...))
	b.shape.Dimensions = slices.Clone(p.Dimensions)
	b.Placement = a.Placement.Broadcasted(p.BroadcastAxes, len(p.Dimensions))
	for i, axis := range a.axes {
		b.axes[i] = p.BroadcastAxes[axis]
	}
	for o := range p.Dimensions {
		if !slices.Contains(p.BroadcastAxes, o) {
			b.axes = append(b.axes, o)
		}
	}
	return b
}

// reshapeHandler is eformer's: materialize, reshape, re-quantize with the default axis (-1,) in
// the array's dtype, keeping the lowering and the sharding of the unchanged leading axes.
func reshapeHandler(c *implicitarray.Call) implicitarray.Value {
	a := c.Operands[0].(*Array)
	dense := c.MaterializeAndApply()
	b := quantizeNodeAs(dense, a.shape.DType)
	b.Placement, b.lowering = a.Placement.Reshaped(a.shape.Dimensions, b.shape.Dimensions), a.lowering
	return b
}

// convertDTypeHandler is lazy for a float target: a new Array that materializes as the new dtype
// (eformer mutates the array in place; quanta never does). Other targets materialize.
func convertDTypeHandler(c *implicitarray.Call) implicitarray.Value {
	a := c.Operands[0].(*Array)
	dtype := c.Params.(*implicitarray.ConvertDTypeParams).DType
	if !dtype.IsFloat() || dtype.IsComplex() {
		return c.MaterializeAndApply()
	}
	a.mustNotBeDeleted("ConvertDType")
	return a.withDType(dtype)
}
