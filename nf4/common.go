package nf4

// The methods every quantized array type has (internal/qarray.Base implements them), declared
// here so that the documentation of Array shows them.

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/sharding"
)

// Shape is the logical shape: the dimensions and dtype of the dense array it stands for.
func (a *Array) Shape() shapes.Shape { return a.Base.Shape() }

// DType is the dtype it materializes in.
func (a *Array) DType() dtypes.DType { return a.Base.DType() }

// Strategy is the strategy of its products (lowering.Auto unless set with WithStrategy).
func (a *Array) Strategy() lowering.Strategy { return a.Base.Strategy() }

// Sharding returns its sharding and true, or false when it has none.
func (a *Array) Sharding() (sharding.Sharding, bool) { return a.Base.Sharding() }

// IsSharded reports whether it carries a sharding.
func (a *Array) IsSharded() bool { return a.Base.IsSharded() }

// IsDeleted reports whether Delete was called on it or on an array sharing its buffers.
func (a *Array) IsDeleted() bool { return a.Base.IsDeleted() }

// Bytes is the memory of its stored components.
func (a *Array) Bytes() int64 { return a.Base.Bytes() }

// Components returns its stored components, in the format's order; after Delete it panics
// with implicitarray.ErrDeleted (implicitarray.Exec reports that as an error).
func (a *Array) Components() []implicitarray.Component { return a.Base.Components() }

// FallbackPolicy is implicitarray.FallbackWarn: an op with no handler densifies it with a
// warning (once per op and type).
func (a *Array) FallbackPolicy() implicitarray.Fallback { return a.Base.FallbackPolicy() }

// Delete releases the host tensors of its components and marks it, and every array sharing
// its buffers (WithStrategy, WithDType, WithSharding), deleted: using any of them afterwards
// is implicitarray.ErrDeleted. Deleting twice is a no-op.
func (a *Array) Delete() { a.Base.Delete() }
