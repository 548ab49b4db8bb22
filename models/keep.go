package models

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/ggml"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/qarray"
	"github.com/quanta-ml/quanta/qlayers"
)

// Keeper decides which tensors a loader keeps in the quantized format their file stores them in,
// instead of decoding them to float32 for the KernelFunc or the TableFunc, and stores them. A
// loader asks Keeps for each projection kernel and embedding table that the file stores in a
// quantized block type; when it says yes, the loader reads the tensor as it is stored (for a
// GGUF file a ggml.Array, [outDim, inDim] for a kernel: GGUF's row order, whose product is x·Wᵀ)
// and hands it to KeepKernel or KeepTable, which return the variables to store. Quantizer is a
// Keeper: it keeps what its Keep rules match.
type Keeper interface {
	// Keeps reports whether the projection or embedding table at scope (e.g. "/layer_0/attn_q",
	// "/token_embd") is kept when its file stores it quantized.
	Keeps(scope string) bool
	// KeepKernel returns the variables to store for the kernel w [outDim, inDim] of the
	// projection at scope, as its file stores it; w is owned by the callee.
	KeepKernel(scope string, w implicitarray.Array) ([]Variable, error)
	// KeepTable returns the variables to store for the embedding table [rows, dim] at scope, as
	// its file stores it; table is owned by the callee.
	KeepTable(scope string, table implicitarray.Array) ([]Variable, error)
}

var _ Keeper = (*Quantizer)(nil)

// Keeps reports whether the first rule matching scope is a Keep rule (for a fused scope, its
// parts' rule).
func (q *Quantizer) Keeps(scope string) bool {
	rule := q.match(scope)
	return rule != nil && rule.Keep
}

// KeepKernel stores the kernel w [outDim, inDim] of the projection at scope as its file stores it:
// its components become the variables ("weights.q0", ... in the projection's "dense" scope, as
// Kernel names them), and Projection computes x·wᵀ with the format's product (package lowering).
// It returns an error, storing nothing, unless a Keep rule matches scope and w is a rank-2 array
// of tensor components materializing in float32, not deleted (implicitarray.ErrDeleted).
func (q *Quantizer) KeepKernel(scope string, w implicitarray.Array) ([]Variable, error) {
	shape, err := q.checkKept("KeepKernel", scope, w)
	if err != nil {
		return nil, err
	}
	entry := qlayers.ReportEntry{Scope: scope + "/" + DenseScope, Shape: shapes.Make(dtypes.Float32, shape.Dim(1), shape.Dim(0)),
		FloatBytes: int64(shape.Memory())}
	vars, err := keptVariables(entry.Scope, w, componentName, &entry)
	if err != nil {
		return nil, errors.WithMessagef(err, "models.Quantizer.KeepKernel(%q)", scope)
	}
	q.record(q.kernels, scope, &quantizedKernel{layout: qlayers.OutIn, template: w, stored: entry.Format}, entry)
	return vars, nil
}

// KeepTable stores the embedding table [rows, dim] at scope as its file stores it: its components
// become the variables TableName + ".q0", ..., and Table rebuilds the array, whose row lookups and
// tied-head products keep the format (a ggml.Array gathers rows of blocks). It returns an error,
// storing nothing, unless a Keep rule matches scope and table is a rank-2 array of tensor
// components materializing in float32, not deleted (implicitarray.ErrDeleted).
func (q *Quantizer) KeepTable(scope string, table implicitarray.Array) ([]Variable, error) {
	shape, err := q.checkKept("KeepTable", scope, table)
	if err != nil {
		return nil, err
	}
	entry := qlayers.ReportEntry{Scope: scope, Shape: shape, FloatBytes: int64(shape.Memory())}
	vars, err := keptVariables(scope, table, tableComponentName, &entry)
	if err != nil {
		return nil, errors.WithMessagef(err, "models.Quantizer.KeepTable(%q)", scope)
	}
	q.record(q.tables, scope, &quantizedKernel{layout: qlayers.OutIn, template: table, stored: entry.Format}, entry)
	return vars, nil
}

// checkKept checks the rule and the array of a kept kernel or table and returns its shape.
func (q *Quantizer) checkKept(op, scope string, a implicitarray.Array) (shapes.Shape, error) {
	if a == nil {
		return shapes.Shape{}, errors.Errorf("models.Quantizer.%s(%q): nil array", op, scope)
	}
	if qarray.Deleted(a) {
		return shapes.Shape{}, errors.Wrapf(implicitarray.ErrDeleted, "models.Quantizer.%s(%q): array %s", op, scope, a.Shape())
	}
	if !q.Keeps(scope) {
		return shapes.Shape{}, errors.Errorf("models.Quantizer.%s(%q): no Keep rule matches the scope; accepted: a scope that Keeps reports",
			op, scope)
	}
	shape := a.Shape()
	if shape.Rank() != 2 || shape.DType != dtypes.Float32 {
		return shapes.Shape{}, errors.Errorf("models.Quantizer.%s(%q): array %s; accepted: rank 2, materializing in float32", op, scope, shape)
	}
	return shape, nil
}

// keptVariables returns a's components as variables of scope named by name, and fills the
// entry's stored format and bytes.
func keptVariables(scope string, a implicitarray.Array, name func(int) string, entry *qlayers.ReportEntry) ([]Variable, error) {
	vars, err := componentVariables(scope, a, name, entry)
	if err != nil {
		return nil, err
	}
	entry.Quantized, entry.Format = true, StoredFormat(a)
	return vars, nil
}

// componentVariables returns the components of the host-side array a as the variables name(0),
// name(1), ... at scope, adding their bytes to entry.QuantizedBytes.
func componentVariables(scope string, a implicitarray.Array, name func(int) string, entry *qlayers.ReportEntry) ([]Variable, error) {
	var vars []Variable
	for i, c := range a.Components() {
		if !c.IsTensor() {
			return nil, errors.Errorf("component %d is %s; accepted: host tensors", i, c)
		}
		vars = append(vars, Variable{Scope: scope, Name: name(i), Value: c.Tensor()})
		entry.QuantizedBytes += int64(c.Shape().Memory())
	}
	return vars, nil
}

// StoredFormat names the format of an array kept as its file stores it: "ggml Q4_K" for a
// ggml.Array, its Go type otherwise.
func StoredFormat(a implicitarray.Array) string {
	if g, ok := a.(*ggml.Array); ok {
		return "ggml " + g.Type().String()
	}
	return fmt.Sprintf("%T", a)
}
