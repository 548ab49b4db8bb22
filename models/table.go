package models

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
)

// TableName is the variable of an embedding table [rows, dim] in its scope (ctx.In(name)), as
// GoMLX's layers.Embedding names it; a quantized table keeps its components as TableName + ".q0",
// ".q1", ... in the same scope.
const TableName = "embeddings"

// Table returns the embedding table called name, [rows, dim], as a value implicitarray's ops
// take: a float node, or a quantized array whose row lookups (Lookup) and products (TiedHead)
// never build the dense table. DenseTable is the default; Quantizer.Table serves the tables a
// Quantizer stored.
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

// Lookup returns the rows of table [rows, dim] at the integer ids (any shape), as a float
// [ids..., dim] node. A quantized table's rows are gathered packed and decoded alone.
func Lookup(table implicitarray.Value, ids *graph.Node) *graph.Node {
	shape := table.Shape()
	if shape.Rank() != 2 || !ids.DType().IsInt() {
		panic(errors.Errorf("models.Lookup: table %s, ids %s; accepted: a table [rows, dim] and integer ids", shape, ids.Shape()))
	}
	flat := graph.Reshape(graph.ConvertDType(ids, dtypes.Int32), ids.Shape().Size(), 1)
	rows := implicitarray.Materialize(implicitarray.Gather(table, flat))
	return graph.Reshape(rows, append(ids.Shape().Clone().Dimensions, shape.Dim(1))...)
}

// TiedHead returns the logits x·tableᵀ [..., rows] of hidden states x [..., dim] with an
// embedding table [rows, dim] (a tied output head), never transposing the table in memory: a
// quantized table's product goes through package lowering (x·Wᵀ with W stored [out, in]).
func TiedHead(x *graph.Node, table implicitarray.Value) *graph.Node {
	shape := table.Shape()
	if shape.Rank() != 2 || x.Rank() < 1 || x.Shape().Dim(-1) != shape.Dim(1) {
		panic(errors.Errorf("models.TiedHead: x %s, table %s; accepted: x [..., dim] and a table [rows, dim]", x.Shape(), shape))
	}
	if dense, ok := table.(*graph.Node); ok {
		return graph.DotGeneral(x, []int{x.Rank() - 1}, nil, dense, []int{1}, nil)
	}
	flat := x
	if x.Rank() != 2 {
		flat = graph.Reshape(x, -1, shape.Dim(1))
	}
	y := implicitarray.Materialize(implicitarray.DotGeneral(flat, []int{1}, nil, table, []int{1}, nil))
	if x.Rank() != 2 {
		y = graph.Reshape(y, append(x.Shape().Clone().Dimensions[:x.Rank()-1], shape.Dim(0))...)
	}
	return y
}
