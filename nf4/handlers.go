package nf4

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
	ia "github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/qarray"
	"github.com/quanta-ml/quanta/sharding"
)

// The handlers of the ops that keep an NF4 array quantized; every other op reaches implicitarray's
// generic fallback, which materializes (warning once per op: FallbackWarn).
func init() {
	qarray.Register[*Array]("nf4", qarray.Handlers{
		Ops: map[ia.Op]ia.Handler{ia.OpReshape: reshape, ia.OpTranspose: transpose,
			ia.OpBroadcastInDim: broadcastInDim, ia.OpConvertDType: qarray.ConvertFloatDType[*Array]},
		Concatenate: concatenate, Gather: gather})
}

// gather keeps the array quantized when the indices pick whole rows (they index leading axes,
// never the last): the packed and absmax rows are gathered as they are (exact), so an embedding
// lookup reads the looked-up rows only. Otherwise (the last axis indexed, or stored blocks that
// run across rows, or an array sharded along an axis) the fallback materializes.
func gather(c *ia.Call) ia.Value {
	a := c.Operands[0].(*Array)
	indices, sorted, dims, rows := qarray.RowGather(c)
	if a.flat || a.doubleQuant || !rows {
		return c.Next()
	}
	return a.withNodes(graph.Gather(a.Packed().Node(), indices, sorted), graph.Gather(a.Absmax().Node(), indices, sorted), dims).
		withPlacement(qarray.ReplicatedPlacement(&a.Base))
}

// reshape keeps the array quantized when the last axis is unchanged (the packed and absmax rows
// are reshaped as they are: exact); otherwise it materializes, reshapes and re-quantizes. A
// reshape to a scalar, which has no axis for the blocks, defers to the generic fallback.
func reshape(c *ia.Call) ia.Value {
	dims := c.Params.(*ia.ReshapeParams).Dimensions
	a := c.Operands[0].(*Array)
	if len(dims) == 0 {
		return c.Next()
	}
	if a.flat || a.doubleQuant {
		return reshapeStored(c, a, dims)
	}
	placement := qarray.Placement(&a.Base).Reshaped(a.Shape().Dimensions, dims)
	if r := a.Shape().Rank(); qarray.ReshapeKeepsRows(a.Shape().Dimensions, dims) {
		packed, absmax := qarray.ReshapeRows(a.Packed().Node(), r, dims), qarray.ReshapeRows(a.Absmax().Node(), r, dims)
		return a.withNodes(packed, absmax, dims).withPlacement(placement)
	}
	return requantize(c, a).withPlacement(placement)
}

// requantize applies the call's op to a, materialized, and quantizes the result with a's block
// size and strategy: the second rounding of a reshape, transpose or broadcast that moves the
// block axis (Call.Requantizing says so).
func requantize(c *ia.Call, a *Array) *Array {
	c.Requantizing(a)
	dense := c.Dense(ia.Materialize(a))
	if err := checkQuantizable(dense.Shape()); err != nil {
		panic(errors.WithMessagef(err, "nf4: re-quantizing %s", a.Metadata()))
	}
	return quantizeNode(dense, a.blockSize).WithStrategy(a.Strategy())
}

// transpose keeps the array quantized when the last axis stays last (whole rows of blocks move:
// exact). Otherwise the blocks cannot follow: the transpose is lazy (implicitarray.Transposed, so
// a product contracts the blocks where they are), sharded or not: the inner array keeps its
// sharding, and a product gives the unsharded array's values.
func transpose(c *ia.Call) ia.Value {
	perm := c.Params.(*ia.TransposeParams).Permutation
	a := c.Operands[0].(*Array)
	if a.flat || a.doubleQuant {
		return transposeStored(c, a, perm)
	}
	placement := qarray.Placement(&a.Base).Transposed(perm) // the sharding follows the axes
	if qarray.TransposeKeepsRows(perm) {
		packed, absmax := qarray.TransposeRows(a.Packed().Node(), perm), qarray.TransposeRows(a.Absmax().Node(), perm)
		return a.withNodes(packed, absmax, qarray.TransposedDims(a.Shape().Dimensions, perm)).withPlacement(placement)
	}
	return ia.NewTransposed(a, perm)
}

// broadcastInDim keeps the array quantized when the last axis maps, unbroadcast, to the last
// output axis (new and broadcast leading axes copy whole rows: exact); otherwise it materializes,
// broadcasts and re-quantizes.
func broadcastInDim(c *ia.Call) ia.Value {
	p := c.Params.(*ia.BroadcastInDimParams)
	a := c.Operands[0].(*Array)
	placement := qarray.Placement(&a.Base).Broadcasted(p.BroadcastAxes, len(p.Dimensions)) // the sharding follows the axes
	if a.flat || a.doubleQuant {
		return requantizeStored(c, a).withPlacement(placement)
	}
	if r := a.Shape().Rank(); qarray.BroadcastKeepsRows(p, a.Shape().Dim(-1)) {
		packed, absmax := qarray.BroadcastRows(a.Packed().Node(), r, p), qarray.BroadcastRows(a.Absmax().Node(), r, p)
		return a.withNodes(packed, absmax, p.Dimensions).withPlacement(placement)
	}
	return requantize(c, a).withPlacement(placement)
}

// concatenate keeps NF4 arrays quantized when all operands are NF4 with the same block size,
// absmax dtype and materialization dtype, and the axis is not the last (rows of blocks are
// stacked: exact); otherwise it defers to the generic fallback, which materializes.
func concatenate(c *ia.Call) ia.Value {
	axis := c.Params.(*ia.ConcatenateParams).Axis
	first := c.Operands[0].(*Array)
	packed := make([]*graph.Node, len(c.Operands))
	absmax := make([]*graph.Node, len(c.Operands))
	placements := make([]sharding.Placement, len(c.Operands))
	for i, v := range c.Operands {
		b, isNF4 := v.(*Array)
		if !isNF4 || b.flat || b.doubleQuant || axis == first.Shape().Rank()-1 || b.blockSize != first.blockSize ||
			b.Absmax().Shape().DType != first.Absmax().Shape().DType || b.DType() != first.DType() {
			return c.Next()
		}
		packed[i], absmax[i], placements[i] = b.Packed().Node(), b.Absmax().Node(), qarray.Placement(&b.Base)
	}
	out := first.withNodes(graph.Concatenate(packed, axis), graph.Concatenate(absmax, axis), qarray.ConcatenatedDims(c.Operands, axis))
	return out.withPlacement(placements[0].Concatenated(axis, placements[1:]...))
}
