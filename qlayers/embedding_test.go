package qlayers_test

import (
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/qlayers"
)

// TestQuantizeContextTables: with Options.Tables, QuantizeContext stores an embedding table in
// NF4 or int8; Embedding then gathers the rows of the dequantized table exactly and TiedHead
// multiplies by it, without building the dense table. Without the option the table stays float;
// a format that cannot serve a lookup is refused.
func TestQuantizeContextTables(t *testing.T) {
	backend := testutil.Backend(t)
	const vocab, dim = 40, 64
	tableContext := func() *context.Context {
		ctx := floatContext()
		ctx.In("tok").VariableWithValue(qlayers.TableName, matrix(3, vocab, dim))
		return ctx
	}
	for _, cfg := range []quanta.Config{{Type: quanta.Int8}, {Type: quanta.NF4, BlockSize: 32}} {
		t.Run(cfg.Type.String(), func(t *testing.T) {
			ctx := tableContext()
			report, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{{Scope: ".*", Config: cfg}}, qlayers.Options{Tables: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(report.Entries) != 2 || !report.Entries[1].Quantized || report.Entries[1].Scope != "/tok" {
				t.Fatalf("report:\n%s", report)
			}
			if ctx.InspectVariable("/tok", qlayers.TableName) != nil || ctx.InspectVariable("/tok", qlayers.TableComponentPrefix+"0") == nil {
				t.Fatal("the float table is still there, or the components are missing")
			}
			a, err := quanta.Quantize(tensors.FromValue(matrix(3, vocab, dim)), cfg)
			if err != nil {
				t.Fatal(err)
			}
			dense := testutil.Materialize(t, a)
			want := testutil.Float32s(t, dense)
			ids := [][]int32{{39, 0, 7}}
			x := tensors.FromValue(matrix(4, 2, dim))
			implicitarray.ResetStats()
			outs := context.MustExecOnceN(backend, ctx.Reuse(), func(ctx *context.Context, ids, x *graph.Node) []*graph.Node {
				tok := ctx.In("tok")
				return []*graph.Node{qlayers.Embedding(tok, ids, dtypes.Float32, vocab, dim),
					qlayers.TiedHead(x, qlayers.EmbeddingTable(tok, x.Graph(), dtypes.Float32, vocab, dim))}
			}, ids, x)
			if fb := implicitarray.CurrentStats().Fallbacks; len(fb) != 0 {
				t.Errorf("the lookup or the head materialized the table: %v", fb)
			}
			testutil.TableProducts(t, want, dim, ids[0], testutil.Float32s(t, outs[0]), testutil.Float64s(t, x), testutil.Float64s(t, outs[1]))
		})
	}
	t.Run("tables-left-float", func(t *testing.T) {
		ctx := tableContext()
		if _, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{{Scope: ".*", Config: quanta.Config{Type: quanta.Int8}}}, qlayers.Options{}); err != nil {
			t.Fatal(err)
		}
		if ctx.InspectVariable("/tok", qlayers.TableName) == nil {
			t.Error("the table was converted without Options.Tables")
		}
	})
	t.Run("format-refused", func(t *testing.T) {
		ctx := tableContext()
		_, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{{Scope: "/tok", Config: quanta.Config{Type: quanta.Ternary}}}, qlayers.Options{Tables: true})
		if err == nil || !strings.Contains(err.Error(), "accepted for an embedding table") || ctx.InspectVariable("/tok", qlayers.TableName) == nil {
			t.Errorf("error %v; want a refusal, the context unchanged", err)
		}
	})
}

// TestKeepFloatTable: a table converted with Options.KeepFloat is looked up and multiplied in the
// stored format in inference, as a kernel kept float is (the float table quantized in the graph),
// giving what the components alone give; training reads the float table.
func TestKeepFloatTable(t *testing.T) {
	backend := testutil.Backend(t)
	const vocab, dim = 40, 64
	ids := [][]int32{{39, 0, 7}}
	x := tensors.FromValue(matrix(4, 2, dim))
	run := func(ctx *context.Context, training bool) []*tensors.Tensor {
		return context.MustExecOnceN(backend, ctx.Reuse(), func(ctx *context.Context, ids, x *graph.Node) []*graph.Node {
			ctx.SetTraining(x.Graph(), training)
			tok := ctx.In("tok")
			return []*graph.Node{qlayers.Embedding(tok, ids, dtypes.Float32, vocab, dim),
				qlayers.TiedHead(x, qlayers.EmbeddingTable(tok, x.Graph(), dtypes.Float32, vocab, dim))}
		}, ids, x)
	}
	for _, cfg := range []quanta.Config{{Type: quanta.Int8}, {Type: quanta.NF4, BlockSize: 32}} {
		t.Run(cfg.Type.String(), func(t *testing.T) {
			contexts := make([]*context.Context, 2)
			for i, keep := range []bool{false, true} {
				contexts[i] = context.New()
				contexts[i].In("tok").VariableWithValue(qlayers.TableName, matrix(3, vocab, dim))
				if _, err := qlayers.QuantizeContext(contexts[i], []qlayers.Rule{{Scope: ".*", Config: cfg}}, qlayers.Options{Tables: true, KeepFloat: keep}); err != nil {
					t.Fatal(err)
				}
			}
			want, got := run(contexts[0], false), run(contexts[1], false)
			for i, what := range []string{"lookup", "tied head"} {
				if d := maxDiff(testutil.Float32s(t, got[i]), testutil.Float32s(t, want[i])); d > 1e-5 {
					t.Errorf("%s with the float table kept differs from the stored format's by %g", what, d)
				}
			}
			rows := testutil.Float32s(t, run(contexts[1], true)[0])
			table := matrix(3, vocab, dim)
			for k, id := range ids[0] {
				if d := maxDiff(rows[k*dim:(k+1)*dim], table[id]); d != 0 {
					t.Errorf("training: row %d differs from the float table's by %g", id, d)
				}
			}
		})
	}
}
