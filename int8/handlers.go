package int8

import (
	"slices"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/qarray"
)

// The handlers of the ops that keep an int8 array quantized; every other op reaches implicitarray's
// generic fallback, which materializes (warning once per op: FallbackWarn).
func init() {
	qarray.Register[*Array]("int8", qarray.Handlers{
		Ops: map[implicitarray.Op]implicitarray.Handler{
			implicitarray.OpTranspose: transposeHandler, implicitarray.OpBroadcastInDim: broadcastInDimHandler,
			implicitarray.OpReshape: reshapeHandler, implicitarray.OpConvertDType: qarray.ConvertFloatDType[*Array]},
		Gather: gatherHandler})
}

// gatherHandler keeps the array quantized when the indices pick slices along leading axes that
// are not quantized (e.g. rows of a table with one scale per row): weight and scale are gathered
// with the same indices, so an embedding lookup reads the looked-up rows only. Otherwise (a
// quantized axis or an axis the scale is broadcast along indexed, or an array sharded along an axis) the
// fallback materializes.
func gatherHandler(c *implicitarray.Call) implicitarray.Value {
	a := c.Operands[0].(*Array)
	indices, sorted, _, rows := qarray.RowGather(c)
	if !rows {
		return c.Next()
	}
	k := indices.Shape().Dim(-1)
	for axis := range k {
		if slices.Contains(a.axes, axis) || a.Scale().Shape().Dim(axis) != a.Shape().Dim(axis) {
			return c.Next()
		}
	}
	lead := indices.Rank() - 1
	weight := graph.Gather(a.Weight().Node(), indices, sorted)
	scale := graph.Gather(a.Scale().Node(), indices, sorted)
	axes := make([]int, len(a.axes))
	for i, axis := range a.axes {
		axes[i] = axis - k + lead
	}
	return a.withParts(implicitarray.NodeComponent(weight), implicitarray.NodeComponent(scale), weight.Shape().Dimensions, axes, qarray.ReplicatedPlacement(&a.Base))
}

// transposeHandler transposes weight and scale; quantized axis a moves to the output axis i with
// perm[i] == a (the inverse permutation).
func transposeHandler(c *implicitarray.Call) implicitarray.Value {
	a := c.Operands[0].(*Array)
	perm := c.Params.(*implicitarray.TransposeParams).Permutation
	weight := graph.TransposeAllAxes(a.Weight().Node(), perm...)
	scale := graph.TransposeAllAxes(a.Scale().Node(), perm...)
	axes := make([]int, len(a.axes))
	for i, axis := range a.axes {
		axes[i] = slices.Index(perm, axis)
	}
	return a.withParts(implicitarray.NodeComponent(weight), implicitarray.NodeComponent(scale), weight.Shape().Dimensions, axes,
		qarray.Placement(&a.Base).Transposed(perm))
}

// broadcastInDimHandler broadcasts the weight, and reshapes the scale to the output rank keeping
// it compact: size 1 on the new axes (added to the quantized axes) and where it was 1.
func broadcastInDimHandler(c *implicitarray.Call) implicitarray.Value {
	a := c.Operands[0].(*Array)
	p := c.Params.(*implicitarray.BroadcastInDimParams)
	weight := c.Dense(a.Weight().Node())
	sd := a.Scale().Shape().Dimensions
	dims := make([]int, len(p.Dimensions))
	for i := range dims {
		dims[i] = 1
	}
	for i, o := range p.BroadcastAxes {
		dims[o] = sd[i]
	}
	scale := graph.Reshape(a.Scale().Node(), dims...)
	axes := make([]int, len(a.axes))
	for i, axis := range a.axes {
		axes[i] = p.BroadcastAxes[axis]
	}
	for o := range p.Dimensions {
		if !slices.Contains(p.BroadcastAxes, o) {
			axes = append(axes, o)
		}
	}
	return a.withParts(implicitarray.NodeComponent(weight), implicitarray.NodeComponent(scale), p.Dimensions, axes,
		qarray.Placement(&a.Base).Broadcasted(p.BroadcastAxes, len(p.Dimensions)))
}

// reshapeHandler materializes, reshapes and re-quantizes with the default axis (-1,) in the
// array's dtype, keeping the strategy and the sharding of the unchanged leading and trailing axes
// (sharding.Placement.Reshaped). A reshape to a scalar, which has no axis to quantize along,
// defers to the generic fallback.
func reshapeHandler(c *implicitarray.Call) implicitarray.Value {
	a := c.Operands[0].(*Array)
	if len(c.Params.(*implicitarray.ReshapeParams).Dimensions) == 0 {
		return c.Next()
	}
	c.Requantizing(a) // counts the re-quantization and applies a's policy to its materialization
	b := quantizeNodeAs(c.Dense(implicitarray.Materialize(a)), a.DType()).WithStrategy(a.Strategy())
	return &Array{Base: qarray.WithPlacement(b.Base, qarray.Placement(&a.Base).Reshaped(a.Shape().Dimensions, b.Shape().Dimensions)),
		axes: b.axes}
}
