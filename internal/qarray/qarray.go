// Package qarray is the state and the methods every quantized array type of quanta shares: its
// logical shape, its stored components, its product strategy, its sharding, and whether its
// buffers were deleted. nf4.Array, int8.Array, onebit.Array, onebit.BitArray and ggml.Array embed
// Base, so they have the same method set; each adds its own metadata, Materialize and component
// rules.
//
// Arrays derived from one another without new components (WithStrategy, WithDType, WithSharding)
// share their buffers, so they share one deletion flag: Delete on any of them deletes all.
//
// Each format package registers its handlers with Register; the steps its shape handlers share
// (RowGather, TransposedDims, ConcatenatedDims, BroadcastComponent, ConvertFloatDType) live here.
package qarray

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/sharding"
)

// Base is embedded by every quantized array type. Its zero value is not usable: build one with
// New. A Base is immutable; the functions of this package return modified copies.
type Base struct {
	typeName   string // for messages, e.g. "nf4.Array"
	shape      shapes.Shape
	components []implicitarray.Component
	strategy   lowering.Strategy
	placement  sharding.Placement
	deleted    *atomic.Bool // shared by the arrays that share these components
	// componentShapes are the components' shapes, kept for WithComponents after Delete, which
	// finalizes the tensors and so invalidates their shapes.
	componentShapes []shapes.Shape
}

// New returns a Base for an array named typeName (e.g. "nf4.Array") of the given logical shape
// holding components.
func New(typeName string, shape shapes.Shape, components ...implicitarray.Component) Base {
	return Base{typeName: typeName, shape: shape, components: components, deleted: new(atomic.Bool),
		componentShapes: shapesOf(components)}
}

func shapesOf(components []implicitarray.Component) []shapes.Shape {
	out := make([]shapes.Shape, len(components))
	for i, c := range components {
		out[i] = c.Shape()
	}
	return out
}

// ComponentShapes returns the shapes of the components, also after Delete: the shapes
// WithComponents requires of new components.
func ComponentShapes(b *Base) []shapes.Shape { return slices.Clone(b.componentShapes) }

// Shape is the logical shape: the dimensions and dtype of the dense array it stands for.
func (b *Base) Shape() shapes.Shape { return b.shape }

// DType is the dtype it materializes in.
func (b *Base) DType() dtypes.DType { return b.shape.DType }

// Strategy is the strategy of its products (lowering.Auto unless set with WithStrategy).
func (b *Base) Strategy() lowering.Strategy { return b.strategy }

// Sharding returns its sharding and true, or false when it has none.
func (b *Base) Sharding() (sharding.Sharding, bool) { return b.placement.Sharding() }

// IsSharded reports whether it carries a sharding.
func (b *Base) IsSharded() bool { return b.placement.IsSharded() }

// IsDeleted reports whether Delete was called on it or on an array sharing its buffers.
func (b *Base) IsDeleted() bool { return b.deleted.Load() }

// Deleted reports whether a is an array that Delete released (one with an IsDeleted method, as
// every array of this package's types has, that says so): the check of functions that take any
// implicitarray.Array and must return implicitarray.ErrDeleted rather than panic on its
// finalized tensors.
func Deleted(a implicitarray.Array) bool {
	d, ok := a.(interface{ IsDeleted() bool })
	return ok && d.IsDeleted()
}

// Bytes is the memory of its stored components.
func (b *Base) Bytes() int64 {
	MustBeLive(b, "Bytes") // Delete finalized the tensors, whose shapes no longer say their size
	var n int64
	for _, c := range b.components {
		n += int64(c.Shape().Memory())
	}
	return n
}

// Components returns its stored components, in the format's order; after Delete it panics
// with implicitarray.ErrDeleted (implicitarray.Exec reports that as an error).
func (b *Base) Components() []implicitarray.Component {
	MustBeLive(b, "Components")
	return slices.Clone(b.components)
}

// FallbackPolicy is implicitarray.FallbackWarn: an op with no handler densifies it with a
// warning (once per op and type).
func (b *Base) FallbackPolicy() implicitarray.Fallback { return implicitarray.FallbackWarn }

// Delete releases the host tensors of its components (graph-side components are left to their
// graph) and marks it, and every array sharing its buffers (WithStrategy, WithDType,
// WithSharding), deleted: using any of them afterwards is implicitarray.ErrDeleted. Deleting
// twice is a no-op.
func (b *Base) Delete() {
	if b.deleted.Swap(true) {
		return
	}
	for _, c := range b.components {
		if c.IsTensor() {
			_ = c.Tensor().FinalizeAll()
		}
	}
}

// MustBeLive panics with implicitarray.ErrDeleted, naming the array and what, if b was deleted.
func MustBeLive(b *Base, what string) {
	if b.deleted.Load() {
		panic(errors.Wrapf(implicitarray.ErrDeleted, "%s.%s of %s (Delete released its buffers; quantize or load it again)",
			b.typeName, what, b.shape))
	}
}

// Component returns component i, panicking after Delete.
func Component(b *Base, i int) implicitarray.Component {
	MustBeLive(b, "components")
	return b.components[i]
}

// Node returns component i as a graph node, panicking after Delete or if it is a host tensor.
// An integer component (codes, packed bytes) is returned under a StopGradient: it gets no
// gradient, as implicitarray documents, rather than a float gradient truncated to integers or a
// panic from an integer op GoMLX cannot differentiate.
func Node(b *Base, i int) *graph.Node {
	n := Component(b, i).Node()
	if !n.DType().IsFloat() {
		return graph.StopGradient(n)
	}
	return n
}

// NormalizeAxes maps the axes given to a quantizer or constructor into [0, rank), in the order
// given, and returns an error for an axis out of range or repeated.
func NormalizeAxes(axes []int, rank int) ([]int, error) {
	out := make([]int, len(axes))
	for i, a := range axes {
		n := a
		if n < 0 {
			n += rank
		}
		if n < 0 || n >= rank {
			return nil, errors.Errorf("axis %d out of range for rank %d; accepted: -%d..%d", a, rank, rank, rank-1)
		}
		if slices.Contains(out[:i], n) {
			return nil, errors.Errorf("axes %v repeat axis %d; accepted: distinct axes", axes, n)
		}
		out[i] = n
	}
	return out, nil
}

// WithStrategy returns b with strategy s (the buffers and the deletion flag are shared).
func WithStrategy(b Base, s lowering.Strategy) Base {
	if !s.Valid() {
		panic(errors.Errorf("%s.WithStrategy(%d): not a lowering.Strategy; accepted: %v", b.typeName, int(s),
			append([]lowering.Strategy{lowering.Auto}, lowering.Strategies()...)))
	}
	b.strategy = s
	return b
}

// WithDType returns b materializing in dtype (the buffers and the deletion flag are shared).
func WithDType(b Base, dtype dtypes.DType) Base {
	b.shape = shapes.Make(dtype, b.shape.Dimensions...)
	return b
}

// WithFloatDType is WithDType for the arrays that materialize in float dtypes only: it panics,
// naming the array (self), for another dtype.
func WithFloatDType(b Base, dtype dtypes.DType, self fmt.Stringer) Base {
	if !dtype.IsFloat() || dtype.IsComplex() {
		panic(errors.Errorf("%s.WithDType(%s) of %s; accepted: a float dtype", b.typeName, dtype, self))
	}
	return WithDType(b, dtype)
}

// WithSharding returns b carrying sharding s (the zero Sharding clears it).
func WithSharding(b Base, s sharding.Sharding) Base {
	b.placement = b.placement.With(s)
	return b
}

// Placement returns b's placement, for the shape handlers that move it with the axes.
func Placement(b *Base) sharding.Placement { return b.placement }

// WithPlacement returns b with placement p.
func WithPlacement(b Base, p sharding.Placement) Base {
	b.placement = p
	return b
}

// WithComponents returns b holding new components of the same count, with the given logical
// dimensions (nil keeps them) and a fresh deletion flag: the new components are new buffers.
func WithComponents(b Base, dims []int, components ...implicitarray.Component) Base {
	if len(components) != len(b.components) {
		panic(errors.Errorf("%s.WithComponents: got %d components, want %d", b.typeName, len(components), len(b.components)))
	}
	b.components = components
	b.componentShapes = shapesOf(components)
	if dims != nil {
		b.shape = shapes.Make(b.shape.DType, dims...)
	}
	b.deleted = new(atomic.Bool)
	return b
}

// CheckComponents panics, naming the array, unless the components have the expected shapes.
func CheckComponents(b *Base, components []implicitarray.Component, want ...shapes.Shape) {
	ok := len(components) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = components[i].Shape().Equal(want[i])
	}
	if !ok {
		got := make([]string, len(components))
		for i, c := range components {
			got[i] = c.Shape().String()
		}
		panic(errors.Errorf("%s.WithComponents: components %v; accepted: shapes %v", b.typeName, got, want))
	}
}

// Metadata returns the static fields every array shares, for the array's Metadata: the logical
// shape, the strategy and the sharding, followed by the format's own fields.
func Metadata(b *Base, format string) string {
	return fmt.Sprintf("%s{shape=%s %s strategy=%s sharding=%s}", b.typeName, b.shape, format, b.strategy, b.placement)
}

// Describe returns "TYPE(DTYPE)[DIMS] details", with " (deleted)" after Delete, for String.
func Describe(b *Base, details string) string {
	s := b.typeName + b.shape.String()
	if details != "" {
		s += " " + details
	}
	if b.deleted.Load() {
		s += " (deleted)"
	}
	return s
}

// WithMeshAndAxis is an array's WithMeshAndAxis: the sharding built from axis over m (the forms
// sharding.SpecFrom accepts), checked at once by the array's component rule, then installed with
// the array's WithSharding.
func WithMeshAndAxis[A any](b *Base, m *sharding.Mesh, axis any,
	componentSpecs func(*sharding.Mesh, sharding.PartitionSpec) ([]sharding.PartitionSpec, error),
	withSharding func(sharding.Sharding) A) (A, error) {
	s, err := sharding.ShardingFor(m, axis, componentSpecs)
	if err != nil {
		var none A
		return none, errors.WithMessagef(err, "%s.WithMeshAndAxis(%s)", b.typeName, b.shape)
	}
	return withSharding(s), nil
}

// CheckWholeBlocks is the sharding rule of a format with blocks along the last axis (nf4, ggml):
// a block must not straddle two shards, so with the last axis in n shards, (last axis / n) must
// be a multiple of blockSize. block names the block size in the error ("block size", "Q4_K block
// size").
func CheckWholeBlocks(b *Base, m *sharding.Mesh, logical sharding.PartitionSpec, blockSize int, block string) error {
	rank := b.shape.Rank()
	n, _ := sharding.NumShards(m, logical, rank)
	if f, shards := b.shape.Dim(-1), n[rank-1]; shards > 1 && (f/shards)%blockSize != 0 {
		return errors.Errorf("%s.ComponentSpecs: spec %s, shape %s, mesh %s: the last axis (size %d) in %d shards gives %d "+
			"elements per shard, not a multiple of the %s %d, so blocks would straddle shards; accepted: (last axis / shards) "+
			"a multiple of the %s", b.typeName, logical, b.shape, m, f, shards, f/shards, block, blockSize, block)
	}
	return nil
}
