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
