package qlayers

import (
	"strconv"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/lowering"
)

const (
	// TableName is the embedding table variable, (vocabSize, dim), as layers.Embedding's.
	TableName = "embeddings"

	// TableComponentPrefix starts the names of the stored components of a quantized table:
	// "embeddings.q0", "embeddings.q1", ... in the order of the format's Components().
	TableComponentPrefix = TableName + ".q"
)

// TableFormatError reports whether cfg can store an embedding table, which is looked up by rows:
// nil for NF4 without double quantization (blocks along each row) and int8 (a scale per row).
func TableFormatError(cfg quanta.Config) error {
	if (cfg.Type != quanta.NF4 && cfg.Type != quanta.Int8) || cfg.DoubleQuant {
		return errors.Errorf("format %s; accepted for an embedding table: nf4 (without DoubleQuant) or int8", formatString(cfg))
	}
	return nil
}

// Embedding is an embedding lookup whose table may be quantized, a drop-in for layers.Embedding
// (the same variable "embeddings" (vocabSize, dim) in ctx): it returns the rows [ids..., dim] of
// the table at the integer ids. When QuantizeContext stored the table quantized (Options.Tables)
// and the float table is gone, the rows are gathered packed and only they are decoded; when it
// kept the float table beside the components (Options.KeepFloat), inference quantizes the float
// table in the graph in the stored format (as Dense does a kept kernel); otherwise, and in
// training, the float table is read (created with the context's initializer if absent).
// It panics, naming the scope, for ids that are not integers or stored components that do not
// fit the format and shape.
func Embedding(ctx *context.Context, ids *graph.Node, dtype dtypes.DType, vocabSize, dim int) *graph.Node {
	if !ids.DType().IsInt() {
		panic(errors.Errorf("qlayers.Embedding in scope %q: ids %s; accepted: integer ids", ctx.Scope(), ids.Shape()))
	}
	return Lookup(EmbeddingTable(ctx, ids.Graph(), dtype, vocabSize, dim), ids)
}

// EmbeddingTable returns the embedding table of ctx, (vocabSize, dim), as Embedding reads it: the
// implicit array rebuilt from the components QuantizeContext stored (when the float table is
// gone), the float variable quantized in the graph in the stored format (when both are there, in
// inference), or the float variable. A tied output head multiplies by it with TiedHead.
func EmbeddingTable(ctx *context.Context, g *graph.Graph, dtype dtypes.DType, vocabSize, dim int) implicitarray.Value {
	shape := shapes.Make(dtype, vocabSize, dim)
	stored := tableComponents(ctx)
	if len(stored) > 0 && ctx.GetVariable(TableName) == nil {
		return storedTable(ctx, g, stored, shape)
	}
	v := ctx.VariableWithShape(TableName, shape)
	if !v.Shape().Equal(shape) {
		panic(errors.Errorf("qlayers.EmbeddingTable in scope %q: %s is %s; accepted: %s", ctx.Scope(), TableName, v.Shape(), shape))
	}
	if len(stored) > 0 && !ctx.IsTraining(g) {
		// The float table was kept (Options.KeepFloat) and may have been trained since: it is the
		// source of truth, quantized in the graph in the stored format, as Dense does a kernel.
		return quanta.QuantizeNode(v.ValueGraph(g), tableFormat(ctx))
	}
	return v.ValueGraph(g)
}

// Lookup returns the rows of table (rows, dim) at the integer ids (any shape), as a float
// [ids..., dim] node. A quantized table's rows are gathered packed and decoded alone.
func Lookup(table implicitarray.Value, ids *graph.Node) *graph.Node {
	shape := table.Shape()
	if shape.Rank() != 2 || !ids.DType().IsInt() {
		panic(errors.Errorf("qlayers.Lookup: table %s, ids %s; accepted: a table (rows, dim) and integer ids", shape, ids.Shape()))
	}
	flat := graph.Reshape(graph.ConvertDType(ids, dtypes.Int32), ids.Shape().Size(), 1)
	rows := implicitarray.Materialize(implicitarray.Gather(table, flat))
	return graph.Reshape(rows, append(ids.Shape().Clone().Dimensions, shape.Dim(1))...)
}

// TiedHead returns the logits x·tableᵀ [..., rows] of hidden states x [..., dim] with an
// embedding table (rows, dim) (a tied output head), never transposing the table in memory: the
// product goes through package lowering (x·Wᵀ with W stored (out, in); a float32 table's by
// lowering.DenseMatMulTransposed).
func TiedHead(x *graph.Node, table implicitarray.Value) *graph.Node {
	shape := table.Shape()
	if shape.Rank() != 2 || x.Rank() < 1 || x.Shape().Dim(-1) != shape.Dim(1) {
		panic(errors.Errorf("qlayers.TiedHead: x %s, table %s; accepted: x [..., dim] and a table (rows, dim)", x.Shape(), shape))
	}
	if dense, ok := table.(*graph.Node); ok {
		if dense.DType() == dtypes.Float32 && x.DType() == dtypes.Float32 {
			return unflattenRows(lowering.DenseMatMulTransposed(flattenRows(x), dense), x.Shape())
		}
		return graph.DotGeneral(x, []int{x.Rank() - 1}, nil, dense, []int{1}, nil)
	}
	return unflattenRows(OutIn.contract(flattenRows(x), table), x.Shape())
}

// tableComponents returns the quantized-table component variables of ctx's scope, in order.
func tableComponents(ctx *context.Context) []*context.Variable {
	return componentVariables(ctx, tableComponentName)
}

func tableComponentName(i int) string { return TableComponentPrefix + strconv.Itoa(i) }

// storedTable rebuilds the quantized table of shape from the stored components and FormatParam.
func storedTable(ctx *context.Context, g *graph.Graph, stored []*context.Variable, shape shapes.Shape) implicitarray.Array {
	return arrayFromVariables(ctx, g, "qlayers.Embedding", "table", stored, shape, tableFormatText(ctx), lowering.Auto)
}

// tableFormatText returns the FormatParam of a table's scope, panicking when it is missing or not
// a string.
func tableFormatText(ctx *context.Context) string {
	text, found := ctx.GetParam(FormatParam)
	format, ok := text.(string)
	if !found || !ok {
		panic(errors.Errorf("qlayers.Embedding in scope %q: parameter %s=%v; accepted: the format QuantizeContext writes (\"int8\", \"nf4/64\")",
			ctx.Scope(), FormatParam, text))
	}
	return format
}

// tableFormat returns the stored format of a table's scope (FormatParam) as a Config, panicking
// when it is missing or cannot store a table.
func tableFormat(ctx *context.Context) quanta.Config {
	text := tableFormatText(ctx)
	cfg, err := parseFormat(text)
	if err == nil {
		err = TableFormatError(cfg)
	}
	if err != nil {
		panic(errors.WithMessagef(err, "qlayers.Embedding in scope %q: parameter %s=%q", ctx.Scope(), FormatParam, text))
	}
	return cfg
}
