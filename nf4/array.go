package nf4

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/mesh"
)

// ErrDeleted is returned (host side) or panicked (graph side) when an Array is used after Delete.
var ErrDeleted = errors.New("nf4: array was deleted")

// Array is an NF4-quantized array: 4-bit codes of the 16-value NormalFloat codebook with one
// absmax per block of the last axis. The same type lives on the host (tensor components, from
// Quantize) and inside a graph (node components, in implicitarray.Exec or via QuantizeNode).
//
// Components, in order: packed uint8 (..., numBlocks, blockSize/2), absmax (..., numBlocks) in
// the quantized input's dtype. Static metadata: the logical shape (the input's, padding
// excluded) and materialization dtype, the block size, the sharding and the matmul strategy.
type Array struct {
	packed, absmax implicitarray.Component
	shape          shapes.Shape
	blockSize      int
	mesh.Placement // IsSharded, Sharding
	strategy       lowering.Strategy
	deleted        bool
}

var (
	_ implicitarray.Array             = (*Array)(nil)
	_ implicitarray.MaterializeWarner = (*Array)(nil)
	_ mesh.Sharded                    = (*Array)(nil)
	_ mesh.ComponentSharder           = (*Array)(nil)
)

func newHostArray(packed, absmax *tensors.Tensor, shape shapes.Shape, blockSize int) *Array {
	return &Array{packed: implicitarray.TensorComponent(packed), absmax: implicitarray.TensorComponent(absmax),
		shape: shape, blockSize: blockSize}
}

// clone returns a shallow copy (components shared), for the With* methods.
func (a *Array) clone() *Array {
	b := *a
	return &b
}

// Shape is the logical shape: the quantized input's dimensions, and the materialization dtype.
func (a *Array) Shape() shapes.Shape { return a.shape }

// DType is the materialization dtype (the input's, unless changed by ConvertDType).
func (a *Array) DType() dtypes.DType { return a.shape.DType }

// BlockSize is the number of elements per absmax block along the last axis.
func (a *Array) BlockSize() int { return a.blockSize }

// NumBlocks is the number of blocks per row of the last axis (padding included).
func (a *Array) NumBlocks() int { return numBlocks(a.shape.Dim(-1), a.blockSize) }

// Packed is the packed-codes component: uint8 (..., numBlocks, blockSize/2).
func (a *Array) Packed() implicitarray.Component { return a.packed }

// Absmax is the per-block absmax component: (..., numBlocks) in the quantized input's dtype.
func (a *Array) Absmax() implicitarray.Component { return a.absmax }

// Bytes is the memory of the stored components (packed codes plus absmax).
func (a *Array) Bytes() int64 {
	return int64(a.packed.Shape().Memory() + a.absmax.Shape().Memory())
}

// Components returns [packed, absmax]. It panics with ErrDeleted after Delete (Exec reports that
// as an error).
func (a *Array) Components() []implicitarray.Component {
	a.mustNotBeDeleted("Components")
	return []implicitarray.Component{a.packed, a.absmax}
}

// Metadata is the canonical form of the static fields.
func (a *Array) Metadata() string {
	return fmt.Sprintf("nf4{shape=%s blockSize=%d sharding=%s strategy=%s}", a.shape, a.blockSize, a.Placement, a.strategy)
}

// WithComponents returns an Array with the same metadata holding components [packed, absmax]
// (host tensors or graph nodes, with the shapes of Components()). It panics on a mismatch.
func (a *Array) WithComponents(components []implicitarray.Component) implicitarray.Array {
	if len(components) != 2 {
		panic(errors.Errorf("nf4.Array.WithComponents: got %d components; accepted: [packed, absmax]", len(components)))
	}
	wantP := packedShape(a.shape, a.blockSize)
	if p, s := components[0].Shape(), components[1].Shape(); !p.Equal(wantP) || !s.Equal(a.absmax.Shape()) {
		panic(errors.Errorf("nf4.Array.WithComponents: components %s and %s; accepted: packed %s and absmax %s",
			p, s, wantP, a.absmax.Shape()))
	}
	b := a.clone()
	b.packed, b.absmax, b.deleted = components[0], components[1], false
	return b
}

// Blockwise returns the graph-side view of the components that lowering's functions take. It
// panics if the components are host tensors.
func (a *Array) Blockwise() lowering.Blockwise4 {
	a.mustNotBeDeleted("Blockwise")
	return lowering.Blockwise4{Packed: a.packed.Node(), Scales: a.absmax.Node(), Codebook: codebook, Dim: a.shape.Dim(-1)}
}

// Materialize builds the dense array with the exact codebook: code value × block absmax,
// computed in float32 (float64 for float64 absmax), padding dropped, in the array's dtype. Library
// code calls implicitarray.Materialize, which counts it.
func (a *Array) Materialize() implicitarray.Value {
	return a.Blockwise().Dequantize(a.shape.DType)
}

// Dequantize is an alias of Materialize (eformer's dequantize), returning the dense node. Like
// implicitarray.Materialize, it is counted in implicitarray's Stats.
func (a *Array) Dequantize() *graph.Node { return implicitarray.Materialize(a) }

// WarnOnMaterialize is true: the generic fallback warns once per op when it densifies an NF4
// array (eformer's warn_on_materialize).
func (a *Array) WarnOnMaterialize() bool { return true }

// Delete releases the component buffers of a host-side array (graph-side components are only
// dropped). Using the array afterwards is an error (ErrDeleted) from Exec, a panic in a graph.
// Delete is idempotent.
func (a *Array) Delete() {
	if a.deleted {
		return
	}
	for _, c := range []implicitarray.Component{a.packed, a.absmax} {
		if c.IsTensor() {
			c.Tensor().MustFinalizeAll()
		}
	}
	a.deleted = true
	a.packed, a.absmax = implicitarray.Component{}, implicitarray.Component{}
}

// IsDeleted reports whether Delete was called.
func (a *Array) IsDeleted() bool { return a.deleted }

func (a *Array) mustNotBeDeleted(what string) {
	if a.deleted {
		panic(errors.Wrapf(ErrDeleted, "nf4.Array.%s of %s", what, a.shape))
	}
}

// WithSharding returns a copy carrying sharding s (the original is untouched). The zero
// mesh.Sharding{} clears it, as eformer's with_sharding(None). The sharding is static metadata,
// kept by the handlers (following the axes through a transpose); mesh.Exec places the components.
func (a *Array) WithSharding(s mesh.Sharding) *Array {
	b := a.clone()
	b.Placement = a.Placement.With(s)
	return b
}

// Reshard is an alias of WithSharding.
func (a *Array) Reshard(s mesh.Sharding) *Array { return a.WithSharding(s) }

// WithMeshAndAxis returns a copy sharded over m with the axis spec built by mesh.SpecFrom (nil:
// replicated; a PartitionSpec; a name; a []string or []any of names), checked early against the
// block layout (ComponentSpecs: known mesh axes, divisible axes, blocks not straddling shards).
func (a *Array) WithMeshAndAxis(m *mesh.Mesh, axis any) (*Array, error) {
	s, err := mesh.ShardingFor(m, axis, a.ComponentSpecs)
	if err != nil {
		return nil, errors.WithMessagef(err, "nf4.Array.WithMeshAndAxis(%s)", a.shape)
	}
	return a.WithSharding(s), nil
}

// ComponentSpecs returns the specs of [packed, absmax] when the logical array is sharded by logical
// over m (mesh.NF4Specs): leading axes keep their spec, a sharded last axis shards the block axis,
// the byte axis of packed is replicated; each shard must hold whole blocks.
func (a *Array) ComponentSpecs(m *mesh.Mesh, logical mesh.PartitionSpec) ([]mesh.PartitionSpec, error) {
	packed, absmax, err := mesh.NF4Specs(m, logical, a.shape, a.blockSize)
	if err != nil {
		return nil, err
	}
	return []mesh.PartitionSpec{packed, absmax}, nil
}

// Strategy is the matmul strategy of this array (lowering.Auto unless set with WithStrategy).
func (a *Array) Strategy() lowering.Strategy { return a.strategy }

// WithStrategy returns a copy whose dot_general handlers use strategy s (part of Metadata, so Exec
// compiles one graph per strategy). lowering.Materialize forces eformer's materialize-then-dot;
// a strategy that cannot serve a product's layout falls back to lowering.DequantizeDot.
func (a *Array) WithStrategy(s lowering.Strategy) *Array {
	b := a.clone()
	b.strategy = s
	return b
}

// withDType returns a copy that materializes as dtype (the lazy convert_element_type).
func (a *Array) withDType(dtype dtypes.DType) *Array {
	b := a.clone()
	b.shape = shapes.Make(dtype, a.shape.Dimensions...)
	return b
}

// String describes the array, e.g. "nf4.Array(float32)[128 256] block 64".
func (a *Array) String() string {
	return fmt.Sprintf("nf4.Array%s block %d", a.shape, a.blockSize)
}
