package models

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/qlayers"
)

// TableName is the variable of an embedding table [rows, dim] in its scope (ctx.In(name)), as
// GoMLX's layers.Embedding and qlayers.Embedding name it; a quantized table keeps its components
// as TableName + ".q0", ".q1", ... in the same scope (qlayers.TableComponentPrefix).
const TableName = qlayers.TableName

// Table returns the embedding table called name, [rows, dim], as a value implicitarray's ops
// take: a float node, or a quantized array whose row lookups (qlayers.Lookup) and products
// (qlayers.TiedHead) never build the dense table. DenseTable is the default; Quantizer.Table
// serves the tables a Quantizer stored.
type Table func(ctx *context.Context, name string, g *graph.Graph, rows, dim int) implicitarray.Value

// DenseTable is the default Table: the float32 variable TableName of ctx.In(name), created with
// the context's initializer when absent (for tests). It panics, naming the variable, when its
// shape differs from [rows, dim].
func DenseTable(ctx *context.Context, name string, g *graph.Graph, rows, dim int) implicitarray.Value {
	scope := ctx.In(name)
	want := shapes.Make(dtypes.Float32, rows, dim)
	v := scope.GetVariable(TableName)
	if v == nil {
		v = scope.VariableWithShape(TableName, want)
	}
	if !v.Shape().Equal(want) {
		panic(errors.Errorf("models.DenseTable: %s/%s is %s; the model needs %s", scope.Scope(), TableName, v.Shape(), want))
	}
	return v.ValueGraph(g)
}

// TableFunc returns the variables to store for the embedding table [rows, dim] (float32) whose
// scope is scope (e.g. "/token_embd"), as KernelFunc does for kernels: the table is owned by the
// callee.
type TableFunc func(scope string, table *tensors.Tensor) ([]Variable, error)

// DenseTableVariables is the default TableFunc: the float table as the variable TableName.
func DenseTableVariables(scope string, table *tensors.Tensor) ([]Variable, error) {
	return []Variable{{Scope: scope, Name: TableName, Value: table}}, nil
}
