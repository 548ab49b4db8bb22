package llama_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/llama"
	"github.com/quanta-ml/quanta/qlayers"
)

// loadWith loads the tiny GGUF through a Quantizer of rules, fusing through it when fuse, and
// storing the table through it.
func loadWith(t *testing.T, data []byte, rules []models.Rule, fuse bool) (*context.Context, *llama.Model) {
	t.Helper()
	return loadThrough(t, data, models.MustNewQuantizer(rules), llama.LoadOptions{}, false, fuse)
}

// loadThrough loads a GGUF with opts through q: its Kernel and QuantizeTable hooks, its Keep
// rules when keep, its Fuse when fuse.
func loadThrough(t *testing.T, data []byte, q *models.Quantizer, opts llama.LoadOptions, keep, fuse bool) (*context.Context, *llama.Model) {
	t.Helper()
	opts.LoadOptions = models.LoadOptions{Kernel: q.Kernel, Table: q.QuantizeTable}
	if keep {
		opts.Keep = q
	}
	if fuse {
		opts.Fuse = q.Fuse
	}
	ctx, m := decodertest.Load(t, llama.LoadGGUF, data, opts)
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
		{"nf4", models.Rule{Scope: ".*", Config: quanta.Config{Type: quanta.NF4, BlockSize: 8}, Layout: qlayers.OutIn}, true, 0},
		{"int8", models.Rule{Scope: ".*", Config: quanta.Config{Type: quanta.Int8}, Layout: qlayers.OutIn}, true, 0},
		{"int8-in", models.Rule{Scope: ".*", Config: quanta.Config{Type: quanta.Int8}, Layout: qlayers.InOut}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rules := []models.Rule{{Scope: "/token_embd", Skip: true}, tc.rule}
			ctx, m := loadWith(t, data, rules, false)
			fctx, fm := loadWith(t, data, rules, true)
			if fm.FusedQKV != tc.fuses || fm.FusedGateUp != tc.fuses || m.FusedQKV || m.FusedGateUp {
				t.Fatalf("fused qkv %v, gate/up %v (unfused load %v, %v); want %v", fm.FusedQKV, fm.FusedGateUp, m.FusedQKV, m.FusedGateUp, tc.fuses)
			}
			if fused := fctx.In("layer_1").In(models.AttnQKV).In("dense"); tc.fuses && len(variablesIn(fctx, fused.Scope())) == 0 {
				t.Errorf("no variable in %s", fused.Scope())
			}
			if !tc.fuses {
				return
			}
			if len(variablesIn(fctx, "/layer_1/attn_q/dense")) != 0 {
				t.Errorf("the fused load kept variables in /layer_1/attn_q/dense")
			}
			want, got := decodertest.Forward(t, backend, ctx, m, tokens), decodertest.Forward(t, backend, fctx, fm, tokens)
			for p := range want {
				// Float kernels: XLA's dense product of another width may round differently.
				if d := decodertest.MaxAbsDiff(got[p], want[p]); d > tc.tolerance || (tc.tolerance == 0 && !slices.Equal(got[p], want[p])) {
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
		_, err := llama.LoadGGUF(context.New(), decodertest.Open(t, data), llama.LoadOptions{LoadOptions: models.LoadOptions{Fuse: q.Fuse, Kernel: func(scope string, k *tensors.Tensor) ([]models.Variable, error) {
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
	float := decodertest.Forward(t, backend, fctx, fm, tokens)
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
			ctx, m := decodertest.Load(t, llama.LoadGGUF, data, llama.LoadOptions{})
			table := ctx.InspectVariable("/token_embd", "embeddings")
			a, err := quanta.Quantize(table.MustValue(), rule.Config)
			if err != nil {
				t.Fatal(err)
			}
			dequantized := testutil.Materialize(t, a)
			table.MustSetValue(dequantized)
			want, got := decodertest.Forward(t, backend, ctx, m, tokens), decodertest.Forward(t, backend, qctx, qm, tokens)
			decodertest.SameLogits(t, "the quantized table's logits differ from the dequantized float table's", got, want)
			if d := decodertest.MaxAbsDiff(float[4], got[4]); d < 1e-4 {
				t.Errorf("the quantized table gives the float model's logits (%g): the test checks nothing", d)
			}
		})
	}
}

// loadFloat loads the tiny GGUF as float32.
func loadFloat(t *testing.T, data []byte) (*context.Context, *llama.Model) {
	t.Helper()
	ctx, m := decodertest.Load(t, llama.LoadGGUF, data, llama.LoadOptions{})
	return ctx, m
}

// wide is the tiny configuration with widths that hold 32-element blocks.
var wide = llama.Config{VocabSize: 40, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, FFNDim: 96,
	ContextLength: 64, RMSNormEps: 1e-5, RoPEBase: 10000, TiedEmbeddings: true}

// TestLoadKeepsBlocks: a file whose kernels and table are stored in block types, loaded with the
// file preset, keeps them as stored (q and k with their rows put back in Hugging Face's order,
// whole rows of blocks), and gives the logits of the same values decoded to float32; q/k/v and
// gate/up fuse when their parts share a block type (the products bit for bit those of the
// separate ones) and not otherwise; RotateAdjacent and UntieHead keep the blocks too.
func TestLoadKeepsBlocks(t *testing.T) {
	backend := testutil.Backend(t)
	// nine tokens: more rows than the GGML kernels' integer route takes (it quantizes the
	// activations to 8 bits), so the products are those of the float values
	tokens := []int32{3, 1, 4, 1, 5, 9, 2, 6, 5}
	file, _ := models.Preset(models.FilePreset)
	for _, tc := range []struct {
		name        string
		types       map[string]gguf.Type
		qkv, gateUp bool
	}{
		{"one type", map[string]gguf.Type{"attn_q": gguf.TypeQ8_0, "attn_k": gguf.TypeQ8_0, "attn_v": gguf.TypeQ8_0,
			"attn_output": gguf.TypeQ4_1, "ffn_gate": gguf.TypeQ5_0, "ffn_up": gguf.TypeQ5_0, "ffn_down": gguf.TypeQ8_0, "token_embd": gguf.TypeQ4_0},
			true, true},
		{"mixed", map[string]gguf.Type{"attn_q": gguf.TypeQ5_1, "attn_k": gguf.TypeQ5_1, "attn_v": gguf.TypeQ8_0, "ffn_up": gguf.TypeIQ4_NL},
			false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, _ := ggufOf(wide, tc.types, "")
			fctx, fm := loadFloat(t, data)
			want := decodertest.Forward(t, backend, fctx, fm, tokens)
			for _, v := range []struct {
				name string
				opts llama.LoadOptions
				fuse bool
			}{{"kept", llama.LoadOptions{}, false}, {"fused", llama.LoadOptions{}, true},
				{"adjacent", llama.LoadOptions{RotateAdjacent: true}, true}, {"untied", llama.LoadOptions{UntieHead: true}, true}} {
				q := models.MustNewQuantizer(file)
				ctx, m := loadThrough(t, data, q, v.opts, true, v.fuse)
				if m.FusedQKV != (v.fuse && tc.qkv) || m.FusedGateUp != (v.fuse && tc.gateUp) {
					t.Errorf("%s: fused q/k/v %v, gate/up %v", v.name, m.FusedQKV, m.FusedGateUp)
				}
				kept := 0
				for _, e := range q.Report().Entries {
					if strings.HasPrefix(e.Format, "ggml ") {
						kept++
					}
				}
				if kept == 0 {
					t.Errorf("%s: nothing kept as stored:\n%s", v.name, q.Report())
				}
				got := decodertest.Forward(t, backend, ctx, m, tokens)
				for p := range want {
					if d := decodertest.MaxAbsDiff(got[p], want[p]); d > 1e-4 {
						t.Errorf("%s: position %d: logits differ from the decoded float model's by %g", v.name, p, d)
					}
				}
			}
		})
	}
}

// TestUntieHeadKeepsByScope: with UntieHead, the head is kept as stored or converted as the
// rules say for "/lm_head", and the table as they say for "/token_embd": a head float while the
// table stays in its block type (the logits those of the decoded float model), and a head kept
// in its block type while the table is converted to int8.
func TestUntieHeadKeepsByScope(t *testing.T) {
	backend := testutil.Backend(t)
	tokens := []int32{3, 1, 4, 1, 5, 9, 2, 6, 5}
	data, _ := ggufOf(wide, map[string]gguf.Type{"token_embd": gguf.TypeQ8_0}, "")
	fctx, fm := loadFloat(t, data)
	want := decodertest.Forward(t, backend, fctx, fm, tokens)
	int8Table, err := models.TableRule("/token_embd", "int8")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name               string
		rules              []models.Rule
		table, head        string // the report's format of each ("" for float)
		compareWithDecoded bool
	}{
		{"table kept, head float", []models.Rule{{Scope: "/token_embd", Keep: true}, {Scope: ".*", Skip: true}}, "ggml Q8_0", "", true},
		{"table int8, head kept", []models.Rule{int8Table, {Scope: ".*", Keep: true}}, "", "ggml Q8_0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := models.MustNewQuantizer(tc.rules)
			ctx, m := loadThrough(t, data, q, llama.LoadOptions{UntieHead: true}, true, false)
			if m.TiedEmbeddings {
				t.Fatal("TiedEmbeddings still set")
			}
			formats := map[string]string{}
			for _, e := range q.Report().Entries {
				formats[e.Scope] = e.Format
			}
			if formats["/token_embd"] != tc.table || formats["/lm_head/dense"] != tc.head {
				t.Errorf("table stored as %q, head as %q; want %q, %q\n%s", formats["/token_embd"], formats["/lm_head/dense"],
					tc.table, tc.head, q.Report())
			}
			if !tc.compareWithDecoded {
				return
			}
			got := decodertest.Forward(t, backend, ctx, m, tokens)
			for p := range want {
				if d := decodertest.MaxAbsDiff(got[p], want[p]); d > 1e-4 {
					t.Errorf("position %d: logits differ from the decoded float model's by %g", p, d)
				}
			}
		})
	}
}

// TestQuantizerCheckMatched: after a load, CheckMatched names a rule that converted nothing (a
// misspelt scope, a table rule put after the preset's Skip of the table), with the scopes there
// are; a preset with its table rule first passes, its Skip of "/lm_head" (no such projection in
// a tied model) allowed.
func TestQuantizerCheckMatched(t *testing.T) {
	data, _ := tinyGGUF("")
	int8Rules, err := models.Preset("int8")
	if err != nil {
		t.Fatal(err)
	}
	fileRules, err := models.Preset(models.FilePreset)
	if err != nil {
		t.Fatal(err)
	}
	table, err := models.TableRule("/token_embd", "int8")
	if err != nil {
		t.Fatal(err)
	}
	keepTable, err := models.TableRule("/token_embd", models.FilePreset)
	if err != nil {
		t.Fatal(err)
	}
	typo := models.Rule{Scope: "/layer_[0-9]+/atn_q", Config: quanta.Config{Type: quanta.Int8}, Layout: qlayers.OutIn}
	for _, tc := range []struct {
		name       string
		rules      []models.Rule
		keep, fuse bool
		want       string // "": no error
	}{
		{"int8 preset, table rule first", append([]models.Rule{table}, int8Rules...), false, true, ""},
		{"file preset", append([]models.Rule{keepTable}, fileRules...), true, true, ""},
		{"misspelt scope", append([]models.Rule{typo}, int8Rules...), false, false,
			`rule 0 ("/layer_[0-9]+/atn_q", int8 (out_in)) was the first to match no scope the loaders asked of; the scopes stored are: "/layer_0/attn_k"`},
		{"table rule after the preset", append(int8Rules, table), false, false, `rule 3 ("/token_embd", int8 (out_in))`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := models.MustNewQuantizer(tc.rules)
			loadThrough(t, data, q, llama.LoadOptions{}, tc.keep, tc.fuse)
			err := q.CheckMatched()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("CheckMatched: %v; want %q", err, tc.want)
			}
		})
	}
}

// TestQuantizerServesTwoFiles: a Quantizer of the file preset that loaded a file storing a
// projection float, then one storing it in a block type, runs the second context on the kept
// blocks, as the last load of a scope decides (it panicked looking for the float kernel).
func TestQuantizerServesTwoFiles(t *testing.T) {
	backend := testutil.Backend(t)
	tokens := []int32{3, 1, 4, 1, 5, 9, 2, 6, 5}
	float, _ := ggufOf(wide, nil, "")
	blocks, _ := ggufOf(wide, map[string]gguf.Type{"attn_q": gguf.TypeQ8_0}, "")
	fctx, fm := loadFloat(t, blocks)
	want := decodertest.Forward(t, backend, fctx, fm, tokens)
	file, _ := models.Preset(models.FilePreset)
	q := models.MustNewQuantizer(file)
	loadThrough(t, float, q, llama.LoadOptions{}, true, false)
	ctx, m := loadThrough(t, blocks, q, llama.LoadOptions{}, true, false)
	got := decodertest.Forward(t, backend, ctx, m, tokens)
	for p := range want {
		if d := decodertest.MaxAbsDiff(got[p], want[p]); d > 1e-4 {
			t.Errorf("position %d: logits differ from the decoded float model's by %g", p, d)
		}
	}
}
