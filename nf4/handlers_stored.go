package nf4

import (
	"slices"

	"github.com/pkg/errors"
	ia "github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/qarray"
)

// The shape handlers of FlatBlocks and DoubleQuant arrays. Their scales (or second-level
// scales) run across rows, so the exact moves are fewer than for the default format:
//
//   - Reshape of a FlatBlocks array is exact for any dimensions (the flattened order is kept);
//     of a DoubleQuant array with blocks along the last axis, exact when the last axis is kept.
//   - Transpose is exact only as the identity, and otherwise lazy (implicitarray.Transposed),
//     sharded or not; BroadcastInDim is never exact.
//
// Otherwise the array is materialized, the op applied and the result re-quantized in the graph
// (blocks along the last axis, double-quantized again if it was), keeping the block size and the
// strategy. Concatenate materializes (implicitarray's rule for a dense result).

// reshapeStored is reshape for the FlatBlocks and DoubleQuant formats.
func reshapeStored(c *ia.Call, a *Array, dims []int) ia.Value {
	placement := qarray.Placement(&a.Base).Reshaped(a.Shape().Dimensions, dims)
	if a.flat {
		return a.with(qarray.WithComponents(a.Base, slices.Clone(dims), a.Components()...)).withPlacement(placement)
	}
	if r := a.Shape().Rank(); qarray.ReshapeKeepsRows(a.Shape().Dimensions, dims) {
		cs := a.Components()
		cs[packedIndex] = ia.NodeComponent(qarray.ReshapeRows(cs[packedIndex].Node(), r, dims))
		cs[absmaxIndex] = ia.NodeComponent(qarray.ReshapeRows(cs[absmaxIndex].Node(), r, dims))
		return a.with(qarray.WithComponents(a.Base, slices.Clone(dims), cs...)).withPlacement(placement)
	}
	return requantizeStored(c, a).withPlacement(placement)
}

// transposeStored is transpose for the FlatBlocks and DoubleQuant formats.
func transposeStored(c *ia.Call, a *Array, perm []int) ia.Value {
	placement := qarray.Placement(&a.Base).Transposed(perm)
	if slices.IsSorted(perm) {
		return a.withPlacement(placement)
	}
	return ia.NewTransposed(a, perm)
}

// requantizeStored applies the call's op to a, materialized, and quantizes the result with a's
// block size and strategy, double-quantized if a is: the second rounding of a shape op that
// cannot keep a's storage (Call.Requantizing says so). As for requantize, the block size may
// exceed MaxBlockSize of the new last axis (the row is padded).
func requantizeStored(c *ia.Call, a *Array) *Array {
	c.Requantizing(a)
	dense := c.Dense(ia.Materialize(a))
	if err := checkQuantizable(dense.Shape()); err != nil {
		panic(errors.WithMessagef(err, "nf4: re-quantizing %s", a.Metadata()))
	}
	out := quantizeNode(dense, a.blockSize).WithStrategy(a.Strategy())
	if a.doubleQuant {
		out = DoubleQuantizeNode(out)
	}
	return out
}
