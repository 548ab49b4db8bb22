package ggml

import (
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/qarray"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/sharding"
)

// Array is an array stored in one of ggml's block types (Type): every row of its last axis is a
// run of blocks, byte for byte as a GGUF file stores a tensor. The same type lives on the host
// (a tensor component, from Quantize, FromBytes or Read) and inside a graph (a node component).
//
// Component: blocks uint8 (..., numBlocks, blockBytes). Static metadata: the logical shape and
// materialization dtype, the block type, the product strategy and the sharding. An Array is
// immutable: the With methods return new arrays.
type Array struct {
	qarray.Base
	typ gguf.Type
}

var (
	_ lowering.Quantized           = (*Array)(nil)
	_ implicitarray.FallbackPolicy = (*Array)(nil)
	_ sharding.Sharded             = (*Array)(nil)
	_ sharding.ComponentSharder    = (*Array)(nil)
)

const typeName = "ggml.Array"

func newArray(blocks implicitarray.Component, typ gguf.Type, shape shapes.Shape) *Array {
	return &Array{Base: qarray.New(typeName, shape, blocks), typ: typ}
}

// BlocksShape returns the shape of the blocks component of an array of type typ with logical
// dimensions dims: uint8 (dims[:-1]..., dims[-1]/blockSize, blockBytes). It panics, naming typ
// and dims, for a type that is not a block type, no dimensions, a negative dimension or a last
// dimension that is not a multiple of the block size.
func BlocksShape(typ gguf.Type, dims ...int) shapes.Shape {
	if !typ.IsBlock() || len(dims) == 0 {
		panic(errors.Errorf("ggml.BlocksShape(%s, %v); accepted: a block type (%v) and rank >= 1", typ, dims, gguf.BlockTypes()))
	}
	if slices.ContainsFunc(dims, func(d int) bool { return d < 0 }) {
		panic(errors.Errorf("ggml.BlocksShape(%s, %v); accepted: dimensions >= 0", typ, dims))
	}
	if last := dims[len(dims)-1]; last%typ.BlockSize() != 0 {
		panic(errors.Errorf("ggml.BlocksShape(%s, %v): the last dimension %d is not a multiple of the %s block size %d; accepted: whole blocks",
			typ, dims, last, typ, typ.BlockSize()))
	}
	lead := slices.Clone(dims[:len(dims)-1])
	return shapes.Make(dtypes.Uint8, append(lead, dims[len(dims)-1]/typ.BlockSize(), typ.BlockBytes())...)
}

// New assembles an Array of type typ from its blocks, a host tensor or a graph node of uint8
// (..., numBlocks, blockBytes) (BlocksShape), e.g. read from a checkpoint; dtype is the
// materialization dtype (a float dtype).
func New(blocks implicitarray.Component, typ gguf.Type, dtype dtypes.DType) (*Array, error) {
	if !typ.IsBlock() {
		return nil, errors.Errorf("ggml.New: type %s; accepted: %v", typ, gguf.BlockTypes())
	}
	if blocks.IsArray() || (!blocks.IsTensor() && !blocks.IsNode()) {
		return nil, errors.Errorf("ggml.New: blocks %s; accepted: a host tensor or a graph node", blocks)
	}
	bs := blocks.Shape()
	if bs.DType != dtypes.Uint8 || bs.Rank() < 2 || bs.Dim(-1) != typ.BlockBytes() {
		return nil, errors.Errorf("ggml.New: blocks %s for type %s; accepted: uint8 (..., numBlocks, %d)", bs, typ, typ.BlockBytes())
	}
	if !dtype.IsFloat() || dtype.IsComplex() {
		return nil, errors.Errorf("ggml.New: materialization dtype %s; accepted: a float dtype", dtype)
	}
	dims := append(slices.Clone(bs.Dimensions[:bs.Rank()-2]), bs.Dim(-2)*typ.BlockSize())
	return newArray(blocks, typ, shapes.Make(dtype, dims...)), nil
}

// Type is the block type.
func (a *Array) Type() gguf.Type { return a.typ }

// NumBlocks is the number of blocks per row of the last axis.
func (a *Array) NumBlocks() int { return a.Shape().Dim(-1) / a.typ.BlockSize() }

// Blocks is the component: uint8 (..., numBlocks, blockBytes).
func (a *Array) Blocks() implicitarray.Component { return qarray.Component(&a.Base, 0) }

// Metadata is the canonical form of the static fields.
func (a *Array) Metadata() string { return qarray.Metadata(&a.Base, "type="+a.typ.String()) }

// WithComponents returns an Array with the same metadata holding components [blocks] (a host
// tensor or a graph node of the shape of Components()). It panics on a mismatch.
func (a *Array) WithComponents(components []implicitarray.Component) implicitarray.Array {
	qarray.CheckComponents(&a.Base, components, qarray.ComponentShapes(&a.Base)...)
	return a.with(qarray.WithComponents(a.Base, nil, components...))
}

// Layout returns the graph-side view of the blocks that package lowering reads. It panics if
// they are a host tensor.
func (a *Array) Layout() lowering.Layout {
	return lowering.GGML{Blocks: qarray.Node(&a.Base, 0), Type: a.typ}
}

// Materialize decodes the blocks in the graph to ggml's values (dequantize_row_*, bit for bit),
// in float32, converted to the array's dtype. Library code calls implicitarray.Materialize, which
// counts it.
func (a *Array) Materialize() implicitarray.Value { return a.Layout().Dequantize(a.DType()) }

// ComponentSpecs returns the spec of [blocks] when the logical array is sharded by logical over m:
// leading axes keep their spec, a sharded last axis shards the block axis, and the byte axis is
// replicated. A block must not straddle two shards: with the last axis in n shards, (last axis /
// n) must be a multiple of the block size.
func (a *Array) ComponentSpecs(m *sharding.Mesh, logical sharding.PartitionSpec) ([]sharding.PartitionSpec, error) {
	shape := a.Shape()
	if err := sharding.Validate(m, logical, shape); err != nil {
		return nil, errors.WithMessage(err, "ggml.Array.ComponentSpecs")
	}
	if err := qarray.CheckWholeBlocks(&a.Base, m, logical, a.typ.BlockSize(), a.typ.String()+" block size"); err != nil {
		return nil, err
	}
	return []sharding.PartitionSpec{append(logical.Padded(shape.Rank()), nil)}, nil
}

// String describes the array, e.g. "ggml.Array(Float32)[640 2048] Q4_K".
func (a *Array) String() string { return qarray.Describe(&a.Base, a.typ.String()) }

// with returns an array of a's type on base b.
func (a *Array) with(b qarray.Base) *Array { return &Array{Base: b, typ: a.typ} }

// withBlocks returns a copy of a (type, dtype, strategy) with new graph blocks and logical
// dimensions, at placement p.
func (a *Array) withBlocks(blocks *graph.Node, dims []int, p sharding.Placement) *Array {
	b := qarray.WithComponents(a.Base, slices.Clone(dims), implicitarray.NodeComponent(blocks))
	return a.with(qarray.WithPlacement(b, p))
}
