package nf4

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/qarray"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/sharding"
)

// Array is an NF4-quantized array: 4-bit codes of the 16-value NormalFloat codebook with one
// absmax per block of the last axis. The same type lives on the host (tensor components, from
// Quantize) and inside a graph (node components, in implicitarray.Exec or from QuantizeNode).
//
// Components, in order: packed uint8 (..., numBlocks, blockSize/2) and absmax (..., numBlocks)
// in the quantized input's dtype. Static metadata: the logical shape (the input's, padding
// excluded) and materialization dtype, the block size, the product strategy and the sharding.
// An Array is immutable: the With methods return new arrays.
type Array struct {
	qarray.Base
	blockSize int
	// flat: blocks run over the flattened array (FlatBlocks); doubleQuant: the absmax are
	// double-quantized (DoubleQuant). See Format.
	flat, doubleQuant bool
}

var (
	_ lowering.Quantized           = (*Array)(nil)
	_ implicitarray.FallbackPolicy = (*Array)(nil)
	_ sharding.Sharded             = (*Array)(nil)
	_ sharding.ComponentSharder    = (*Array)(nil)
)

const typeName = "nf4.Array"

const (
	packedIndex = iota
	absmaxIndex
)

func newHostArray(packed, absmax *tensors.Tensor, shape shapes.Shape, blockSize int) *Array {
	return &Array{Base: qarray.New(typeName, shape, implicitarray.TensorComponent(packed), implicitarray.TensorComponent(absmax)),
		blockSize: blockSize}
}

func newNodeArray(packed, absmax *graph.Node, shape shapes.Shape, blockSize int) *Array {
	return &Array{Base: qarray.New(typeName, shape, implicitarray.NodeComponent(packed), implicitarray.NodeComponent(absmax)),
		blockSize: blockSize}
}

// BlockSize is the number of elements per absmax block along the last axis.
func (a *Array) BlockSize() int { return a.blockSize }

// NumBlocks is the number of blocks per row of the last axis (padding included); with FlatBlocks,
// the number of blocks of the flattened array.
func (a *Array) NumBlocks() int {
	if a.flat {
		return numBlocks(a.Shape().Size(), a.blockSize)
	}
	return numBlocks(a.Shape().Dim(-1), a.blockSize)
}

// Packed is the packed-codes component: uint8 (..., numBlocks, blockSize/2).
func (a *Array) Packed() implicitarray.Component { return qarray.Component(&a.Base, packedIndex) }

// Absmax is the per-block absmax component: (..., numBlocks) in the quantized input's dtype; with
// DoubleQuant, their uint8 codes (see Format).
func (a *Array) Absmax() implicitarray.Component { return qarray.Component(&a.Base, absmaxIndex) }

// Metadata is the canonical form of the static fields.
func (a *Array) Metadata() string {
	return qarray.Metadata(&a.Base, fmt.Sprintf("blockSize=%d", a.blockSize)+a.formatMetadata())
}

// WithComponents returns an Array with the same metadata holding components [packed, absmax]
// (host tensors or graph nodes, with the shapes of Components()). It panics on a mismatch.
func (a *Array) WithComponents(components []implicitarray.Component) implicitarray.Array {
	if a.flat || a.doubleQuant {
		return a.withStoredComponents(components)
	}
	qarray.CheckComponents(&a.Base, components, qarray.ComponentShapes(&a.Base)...)
	return a.with(qarray.WithComponents(a.Base, nil, components...))
}

// Layout returns the graph-side view of the components that package lowering reads. It panics
// if the components are host tensors.
func (a *Array) Layout() lowering.Layout {
	if a.flat || a.doubleQuant {
		return a.storedLayout()
	}
	return lowering.Blockwise4{Packed: qarray.Node(&a.Base, packedIndex), Scales: qarray.Node(&a.Base, absmaxIndex),
		Codebook: codebook, Dim: a.Shape().Dim(-1)}
}

// Materialize builds the dense array with the exact codebook: code value × block absmax,
// computed in float32 (float64 for float64 absmax or dtype), padding dropped, in the array's
// dtype. Library code calls implicitarray.Materialize, which counts it.
func (a *Array) Materialize() implicitarray.Value {
	return a.Layout().Dequantize(a.DType())
}

// ComponentSpecs returns the specs of [packed, absmax] when the logical array is sharded by logical
// over m: leading axes keep their spec in both; a sharded last axis shards the block axis of both;
// the byte axis of packed is replicated. A block must not straddle two shards: with the last axis
// in n shards, (last axis / n) must be a multiple of the block size (which also rules out a padded
// last block).
func (a *Array) ComponentSpecs(m *sharding.Mesh, logical sharding.PartitionSpec) ([]sharding.PartitionSpec, error) {
	shape := a.Shape()
	if err := sharding.Validate(m, logical, shape); err != nil {
		return nil, errors.WithMessage(err, "nf4.Array.ComponentSpecs")
	}
	if a.flat || a.doubleQuant {
		return a.storedComponentSpecs(m, logical)
	}
	if err := qarray.CheckWholeBlocks(&a.Base, m, logical, a.blockSize, "block size"); err != nil {
		return nil, err
	}
	rank := shape.Rank()
	return []sharding.PartitionSpec{append(logical.Padded(rank), nil), logical.Padded(rank)}, nil
}

// String describes the array, e.g. "nf4.Array(Float32)[128 256] block 64".
func (a *Array) String() string {
	return qarray.Describe(&a.Base, fmt.Sprintf("block %d", a.blockSize)+a.formatDescription())
}

// with returns an array of a's block size on base b.
func (a *Array) with(b qarray.Base) *Array {
	return &Array{Base: b, blockSize: a.blockSize, flat: a.flat, doubleQuant: a.doubleQuant}
}

// withNodes returns a copy of a (same block size, dtype, strategy, sharding) with new graph
// components and logical dimensions.
func (a *Array) withNodes(packed, absmax *graph.Node, dims []int) *Array {
	return a.with(qarray.WithComponents(a.Base, slices.Clone(dims), implicitarray.NodeComponent(packed),
		implicitarray.NodeComponent(absmax)))
}

// withPlacement returns a copy with placement p (the shape handlers move the sharding with the axes).
func (a *Array) withPlacement(p sharding.Placement) *Array {
	return a.with(qarray.WithPlacement(a.Base, p))
}
