package ggml

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	ia "github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/qarray"
	"github.com/quanta-ml/quanta/sharding"
)

// The handlers of the ops that keep a GGML array in its blocks: those that move whole rows of
// blocks (a gather of rows included: an embedding lookup reads the looked-up rows' blocks only).
// An op that would cut through blocks defers, as every other op, to implicitarray's generic
// fallback, which materializes (a second quantization would change the file's values), counted
// in Stats.Fallbacks with a warning once per op (FallbackWarn).
func init() {
	qarray.Register[*Array]("ggml", qarray.Handlers{
		Ops: map[ia.Op]ia.Handler{ia.OpReshape: reshape, ia.OpTranspose: transpose,
			ia.OpBroadcastInDim: broadcastInDim, ia.OpConvertDType: qarray.ConvertFloatDType[*Array]},
		Concatenate: concatenate, Gather: gather})
}

// gather keeps the blocks when the indices pick whole rows (they index leading axes, never the
// last): the rows of blocks are gathered as they are (exact), so an embedding lookup decodes the
// looked-up rows only. Otherwise (the last axis indexed, or an array sharded along an axis) the
// fallback materializes.
func gather(c *ia.Call) ia.Value {
	a := c.Operands[0].(*Array)
	indices, sorted, dims, rows := qarray.RowGather(c)
	if !rows {
		return c.Next()
	}
	return a.withBlocks(graph.Gather(a.Blocks().Node(), indices, sorted), dims, qarray.ReplicatedPlacement(&a.Base))
}

// reshape keeps the blocks when the last axis is unchanged; otherwise it defers to the fallback.
func reshape(c *ia.Call) ia.Value {
	dims := c.Params.(*ia.ReshapeParams).Dimensions
	a := c.Operands[0].(*Array)
	if !qarray.ReshapeKeepsRows(a.Shape().Dimensions, dims) {
		return c.Next()
	}
	blocks := qarray.ReshapeRows(a.Blocks().Node(), a.Shape().Rank(), dims)
	return a.withBlocks(blocks, dims, qarray.Placement(&a.Base).Reshaped(a.Shape().Dimensions, dims))
}

// transpose keeps the blocks when the last axis stays last. Otherwise the transpose is lazy
// (implicitarray.Transposed: a product contracts the blocks where they are), sharded or not: the
// inner array keeps its sharding, as NF4's.
func transpose(c *ia.Call) ia.Value {
	perm := c.Params.(*ia.TransposeParams).Permutation
	a := c.Operands[0].(*Array)
	if !qarray.TransposeKeepsRows(perm) {
		return ia.NewTransposed(a, perm)
	}
	blocks := qarray.TransposeRows(a.Blocks().Node(), perm)
	return a.withBlocks(blocks, qarray.TransposedDims(a.Shape().Dimensions, perm), qarray.Placement(&a.Base).Transposed(perm))
}

// broadcastInDim keeps the blocks when the last axis maps, unbroadcast, to the last output axis
// (new and broadcast leading axes copy whole rows); otherwise it defers to the fallback.
func broadcastInDim(c *ia.Call) ia.Value {
	p := c.Params.(*ia.BroadcastInDimParams)
	a := c.Operands[0].(*Array)
	if !qarray.BroadcastKeepsRows(p, a.Shape().Dim(-1)) {
		return c.Next()
	}
	blocks := qarray.BroadcastRows(a.Blocks().Node(), a.Shape().Rank(), p)
	return a.withBlocks(blocks, p.Dimensions, qarray.Placement(&a.Base).Broadcasted(p.BroadcastAxes, len(p.Dimensions)))
}

// concatenate keeps the blocks when every operand is a GGML array of the same type and dtype and
// the axis is not the last (rows of blocks are stacked); otherwise it defers to the fallback.
func concatenate(c *ia.Call) ia.Value {
	axis := c.Params.(*ia.ConcatenateParams).Axis
	first := c.Operands[0].(*Array)
	blocks := make([]*graph.Node, len(c.Operands))
	placements := make([]sharding.Placement, len(c.Operands))
	for i, v := range c.Operands {
		b, ok := v.(*Array)
		if !ok || axis == first.Shape().Rank()-1 || b.typ != first.typ || b.DType() != first.DType() {
			return c.Next()
		}
		blocks[i], placements[i] = b.Blocks().Node(), qarray.Placement(&b.Base)
	}
	return first.withBlocks(graph.Concatenate(blocks, axis), qarray.ConcatenatedDims(c.Operands, axis), placements[0].Concatenated(axis, placements[1:]...))
}
