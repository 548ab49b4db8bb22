package models_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/hostdata"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/qlayers"
)

// TestFuse: where Quantizer.Fuse accepts a group, the fused kernel's product gives, bit for bit,
// the separate products side by side (so a fused model's perplexity is the unfused one's); where
// the format's scales or threshold span the output channels, it refuses.
func TestFuse(t *testing.T) {
	backend := testutil.Backend(t)
	nf4 := quanta.Config{Type: quanta.NF4}
	for _, tc := range []struct {
		name  string
		rules []models.Rule
		outs  []int
		fuses bool
	}{
		{"float", nil, []int{48, 16, 16}, true},
		{"float-skip", []models.Rule{{Scope: ".*", Skip: true}}, []int{48, 16, 16}, true},
		{"float-skip-and-none", []models.Rule{{Scope: "/l/a", Skip: true}}, []int{48, 16, 16}, true},
		{"float-out-in", []models.Rule{{Scope: ".*", Skip: true, Layout: qlayers.OutIn}}, []int{48, 16, 16}, true},
		{"float-layouts", []models.Rule{{Scope: "/l/a", Skip: true, Layout: qlayers.OutIn}}, []int{48, 16, 16}, false},
		{"nf4-out-in", []models.Rule{{Scope: ".*", Config: nf4, Layout: qlayers.OutIn}}, []int{48, 16, 16}, true},
		{"nf4-in-out-whole-blocks", []models.Rule{{Scope: ".*", Config: nf4, Layout: qlayers.InOut}}, []int{128, 64, 64}, true},
		{"nf4-in-out-partial-block", []models.Rule{{Scope: ".*", Config: nf4, Layout: qlayers.InOut}}, []int{96, 32, 32}, false},
		{"nf4-double-quant", []models.Rule{{Scope: ".*", Config: quanta.Config{Type: quanta.NF4, DoubleQuant: true}, Layout: qlayers.OutIn}}, []int{48, 16, 16}, false},
		{"int8-out-in", []models.Rule{{Scope: ".*", Config: quanta.Config{Type: quanta.Int8}, Layout: qlayers.OutIn}}, []int{48, 16, 16}, true},
		{"int8-in-out", []models.Rule{{Scope: ".*", Config: quanta.Config{Type: quanta.Int8}, Layout: qlayers.InOut}}, []int{48, 16, 16}, false},
		{"binary-scaled-in-out", []models.Rule{{Scope: ".*", Config: quanta.Config{Type: quanta.Binary, Scaled: true}, Layout: qlayers.InOut}}, []int{48, 16, 16}, true},
		{"binary-out-in", []models.Rule{{Scope: ".*", Config: quanta.Config{Type: quanta.Binary}, Layout: qlayers.OutIn}}, []int{48, 16, 16}, false},
		{"ternary", []models.Rule{{Scope: ".*", Config: quanta.Config{Type: quanta.Ternary, Scaled: true}, Layout: qlayers.InOut}}, []int{48, 16, 16}, false},
		{"mixed-rules", []models.Rule{{Scope: "/l/a", Config: nf4, Layout: qlayers.OutIn}, {Scope: ".*", Skip: true}}, []int{48, 16, 16}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const in = 128
			parts := []string{"/l/a", "/l/b", "/l/c"}
			var kernels []*tensors.Tensor
			for i, out := range tc.outs {
				kernels = append(kernels, testutil.RandomTensor(uint64(10+i), in, out))
			}
			fused := models.MustNewQuantizer(tc.rules)
			if got := fused.Fuse("/l/abc", parts, tc.outs); got != tc.fuses {
				t.Fatalf("Fuse = %v; want %v", got, tc.fuses)
			}
			if !tc.fuses {
				return
			}
			separate := models.MustNewQuantizer(tc.rules)
			ctx := context.New()
			for i, p := range parts {
				vars, err := separate.Kernel(p, cloneTensor(t, kernels[i]))
				if err != nil {
					t.Fatal(err)
				}
				if err := models.Store(ctx, vars); err != nil {
					t.Fatal(err)
				}
			}
			cat, err := hostdata.ConcatenateColumns(kernels)
			if err != nil {
				t.Fatal(err)
			}
			vars, err := fused.Kernel("/l/abc", cat)
			if err != nil {
				t.Fatal(err)
			}
			if err := models.Store(ctx, vars); err != nil {
				t.Fatal(err)
			}
			for _, rows := range []int{1, 3} {
				x := testutil.RandomTensor(uint64(rows), rows, in)
				outs := context.MustExecOnceN(backend, ctx.Reuse(), func(ctx *context.Context, x *graph.Node) []*graph.Node {
					var apart []*graph.Node
					for i, name := range []string{"a", "b", "c"} {
						apart = append(apart, separate.Projection(ctx.In("l"), name, x, tc.outs[i], false))
					}
					total := tc.outs[0] + tc.outs[1] + tc.outs[2]
					return []*graph.Node{graph.Concatenate(apart, -1), fused.Projection(ctx.In("l"), "abc", x, total, false)}
				}, x)
				if a, b := testutil.Float32s(t, outs[0]), testutil.Float32s(t, outs[1]); !slices.Equal(a, b) {
					d, _ := testutil.MaxAbsDiff(testutil.Float64s(t, outs[0]), testutil.Float64s(t, outs[1]))
					t.Errorf("%d rows: the fused product differs from the separate ones (max |diff| %g)", rows, d)
				}
			}
			if r := fused.Report().String(); !strings.Contains(r, "/l/abc/dense") {
				t.Errorf("the report does not list the fused kernel:\n%s", r)
			}
		})
	}
}

func cloneTensor(t *testing.T, x *tensors.Tensor) *tensors.Tensor {
	t.Helper()
	c, err := x.LocalClone()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestQuantizedTable: a table stored by QuantizeTable is looked up row by row without building
// the dense table, with the rows of the dequantized table exactly, and its tied head's product
// is x·tableᵀ of the dequantized table; formats that cannot serve a lookup are refused.
func TestQuantizedTable(t *testing.T) {
	backend := testutil.Backend(t)
	const rows, dim = 40, 128
	for _, format := range []string{"int8", "nf4"} {
		t.Run(format, func(t *testing.T) {
			rule, err := models.TableRule("/emb", format)
			if err != nil {
				t.Fatal(err)
			}
			q := models.MustNewQuantizer([]models.Rule{rule})
			table := testutil.RandomTensor(3, rows, dim)
			dense, err := quanta.Quantize(cloneTensor(t, table), rule.Config)
			if err != nil {
				t.Fatal(err)
			}
			want := testutil.Materialize(t, dense)
			vars, err := q.QuantizeTable("/emb", table)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.New()
			if err := models.Store(ctx, vars); err != nil {
				t.Fatal(err)
			}
			if ctx.InspectVariable("/emb", models.TableName) != nil {
				t.Fatal("the float table was stored beside the quantized one")
			}
			ids := [][]int32{{7, 0, 39}}
			x := testutil.RandomTensor(5, 2, dim)
			implicitarray.ResetStats()
			outs := context.MustExecOnceN(backend, ctx.Reuse(), func(ctx *context.Context, ids, x *graph.Node) []*graph.Node {
				tbl := q.Table(ctx, "emb", ids.Graph(), rows, dim)
				return []*graph.Node{qlayers.Lookup(tbl, ids), qlayers.TiedHead(x, tbl)}
			}, ids, x)
			if fb := implicitarray.CurrentStats().Fallbacks; len(fb) != 0 {
				t.Errorf("the lookup or the head materialized the table: %v", fb)
			}
			testutil.TableProducts(t, testutil.Float32s(t, want), dim, ids[0], testutil.Float32s(t, outs[0]),
				testutil.Float64s(t, x), testutil.Float64s(t, outs[1]))
			if e := q.Report().Entries; len(e) != 1 || !e[0].Quantized || e[0].QuantizedBytes >= e[0].FloatBytes {
				t.Errorf("report entries %+v; want the quantized table", e)
			}
		})
	}
	for _, rule := range []models.Rule{
		{Scope: ".*", Config: quanta.Config{Type: quanta.Ternary}, Layout: qlayers.OutIn},
		{Scope: ".*", Config: quanta.Config{Type: quanta.Int8}, Layout: qlayers.InOut},
		{Scope: ".*", Config: quanta.Config{Type: quanta.NF4, DoubleQuant: true}, Layout: qlayers.OutIn},
	} {
		q := models.MustNewQuantizer([]models.Rule{rule})
		if _, err := q.QuantizeTable("/emb", testutil.RandomTensor(1, 8, 64)); err == nil || !strings.Contains(err.Error(), "accepted for a table") {
			t.Errorf("rule %s: error %v; want a refusal naming what a table accepts", rule.Describe(), err)
		}
	}
	if _, err := models.TableRule("/emb", "q4_0"); err == nil {
		t.Error("TableRule(q4_0): no error")
	}
}
