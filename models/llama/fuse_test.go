package llama_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/llama"
)

// loadWith loads the tiny GGUF through a Quantizer of rules, fusing through it when fuse, and
// storing the table through it.
func loadWith(t *testing.T, data []byte, rules []models.Rule, fuse bool) (*context.Context, *llama.Model) {
	t.Helper()
	q := models.MustNewQuantizer(rules)
	opts := llama.LoadOptions{LoadOptions: models.LoadOptions{Kernel: q.Kernel, Table: q.QuantizeTable}}
	if fuse {
		opts.Fuse = q.Fuse
	}
	ctx := context.New()
	m, err := llama.LoadGGUF(ctx, openBytes(t, data), opts)
	if err != nil {
		t.Fatal(err)
	}
	m.Projection, m.Table = q.Projection, q.Table
	return ctx, m
}

// TestLoadFused: q/k/v and gate/up stored fused give the logits of the separate projections, bit
// for bit in the formats that fuse exactly (float32 within XLA's rounding), through the full
// pass (and for NF4 the generator); a format that cannot fuse exactly is loaded unfused.
func TestLoadFused(t *testing.T) {
	backend := testutil.Backend(t)
	data, _ := tinyGGUF("")
	tokens := []int32{3, 1, 4, 1, 5, 9, 2, 6}
	for _, tc := range []struct {
		name      string
		rule      models.Rule
		fuses     bool
		tolerance float64 // 0: bit for bit
	}{
		{"f32", models.Rule{Scope: ".*", Skip: true}, true, 1e-6},
		{"nf4", models.Rule{Scope: ".*", Config: quanta.Config{Type: quanta.NF4, BlockSize: 8}, Layout: models.OutIn}, true, 0},
		{"int8", models.Rule{Scope: ".*", Config: quanta.Config{Type: quanta.Int8}, Layout: models.OutIn}, true, 0},
		{"int8-in", models.Rule{Scope: ".*", Config: quanta.Config{Type: quanta.Int8}, Layout: models.InOut}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rules := []models.Rule{{Scope: "/token_embd", Skip: true}, tc.rule}
			ctx, m := loadWith(t, data, rules, false)
			fctx, fm := loadWith(t, data, rules, true)
			if fm.FusedQKV != tc.fuses || fm.FusedGateUp != tc.fuses || m.FusedQKV || m.FusedGateUp {
				t.Fatalf("fused qkv %v, gate/up %v (unfused load %v, %v); want %v", fm.FusedQKV, fm.FusedGateUp, m.FusedQKV, m.FusedGateUp, tc.fuses)
			}
			if fused := fctx.In("layer_1").In(llama.AttnQKV).In("dense"); tc.fuses && len(variablesIn(fctx, fused.Scope())) == 0 {
				t.Errorf("no variable in %s", fused.Scope())
			}
			if !tc.fuses {
				return
			}
			if len(variablesIn(fctx, "/layer_1/attn_q/dense")) != 0 {
				t.Errorf("the fused load kept variables in /layer_1/attn_q/dense")
			}
			want, got := forward(t, backend, ctx, m, tokens), forward(t, backend, fctx, fm, tokens)
			for p := range want {
				// Float kernels: XLA's dense product of another width may round differently.
				if d := maxAbsDiff(got[p], want[p]); d > tc.tolerance || (tc.tolerance == 0 && !slices.Equal(got[p], want[p])) {
					t.Errorf("position %d: the fused model's logits differ from the unfused one's by %g (tolerance %g)", p, d, tc.tolerance)
				}
			}
			if tc.name != "nf4" { // one format through the generator: the step graphs compile slowly
				return
			}
			prompt := []int{5, 9, 13}
			var outs [2][]int
			for i, mc := range []struct {
				ctx *context.Context
				m   *llama.Model
			}{{ctx, m}, {fctx, fm}} {
				gen, err := models.NewGenerator(backend, mc.ctx, mc.m, models.GeneratorOptions{MaxLen: 24})
				if err != nil {
					t.Fatal(err)
				}
				if outs[i], err = gen.Generate(prompt, models.GenerateOptions{MaxNewTokens: 8}); err != nil {
					t.Fatal(err)
				}
				gen.Finalize()
			}
			if !slices.Equal(outs[0], outs[1]) {
				t.Errorf("generated %v fused, %v unfused", outs[1], outs[0])
			}
		})
	}
	t.Run("kernel-error-names-the-parts", func(t *testing.T) {
		q := models.MustNewQuantizer(nil)
		_, err := llama.LoadGGUF(context.New(), openBytes(t, data), llama.LoadOptions{LoadOptions: models.LoadOptions{Fuse: q.Fuse, Kernel: func(scope string, k *tensors.Tensor) ([]models.Variable, error) {
			if scope == "/layer_1/attn_qkv" {
				return nil, errors.New("quantizer failed")
			}
			return models.DenseKernel(scope, k)
		}}})
		if want := "kernel of blk.1.attn_q.weight, blk.1.attn_k.weight, blk.1.attn_v.weight: quantizer failed"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v; want one containing %q", err, want)
		}
	})
}

func variablesIn(ctx *context.Context, scope string) []string {
	var names []string
	for v := range ctx.IterVariables() {
		if v.Scope() == scope {
			names = append(names, v.Name())
		}
	}
	return names
}

// TestLoadQuantizedTable: a table stored int8 or NF4 through Quantizer.QuantizeTable gives the
// logits of the float model whose table holds the dequantized values (lookup and tied head),
// and the float table is not kept.
func TestLoadQuantizedTable(t *testing.T) {
	backend := testutil.Backend(t)
	data, _ := tinyGGUF("")
	tokens := []int32{3, 1, 4, 1, 5, 9, 2, 6}
	fctx, fm := loadFloat(t, data)
	float := forward(t, backend, fctx, fm, tokens)
	for _, format := range []string{"int8", "nf4"} {
		t.Run(format, func(t *testing.T) {
			rule, err := models.TableRule("/token_embd", format)
			if err != nil {
				t.Fatal(err)
			}
			if format == "nf4" {
				rule.Config.BlockSize = 8 // blocks within the 16-wide rows
			}
			qctx, qm := loadWith(t, data, []models.Rule{rule}, true)
			if qctx.InspectVariable("/token_embd", "embeddings") != nil || qctx.InspectVariable("/token_embd", "embeddings.q0") == nil {
				t.Fatalf("variables in /token_embd: %v; want the quantized components only", variablesIn(qctx, "/token_embd"))
			}
			// The reference: the float model with the table replaced by its dequantized values.
			ctx := context.New()
			m, err := llama.LoadGGUF(ctx, openBytes(t, data), llama.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			table := ctx.InspectVariable("/token_embd", "embeddings")
			a, err := quanta.Quantize(table.MustValue(), rule.Config)
			if err != nil {
				t.Fatal(err)
			}
			dequantized, err := implicitarray.MaterializeOnHost(backend, a)
			if err != nil {
				t.Fatal(err)
			}
			table.MustSetValue(dequantized)
			want, got := forward(t, backend, ctx, m, tokens), forward(t, backend, qctx, qm, tokens)
			sameLogits(t, "the quantized table's logits differ from the dequantized float table's", got, want)
			if d := maxAbsDiff(float[4], got[4]); d < 1e-4 {
				t.Errorf("the quantized table gives the float model's logits (%g): the test checks nothing", d)
			}
		})
	}
}

// loadFloat loads the tiny GGUF as float32.
func loadFloat(t *testing.T, data []byte) (*context.Context, *llama.Model) {
	t.Helper()
	ctx := context.New()
	m, err := llama.LoadGGUF(ctx, openBytes(t, data), llama.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, m
}
