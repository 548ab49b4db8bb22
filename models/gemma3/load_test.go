package gemma3_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/gemma3"
)

// tiny is a configuration small enough for exact checks, wide enough for 32-element blocks: GQA
// with 2 query heads on one key/value head, heads not Dim/Heads wide, a sliding window of 4 on
// layers 0 and 2 (layer 1 global).
var tiny = gemma3.Config{
	DecoderConfig: models.DecoderConfig{VocabSize: 48, Dim: 64, Layers: 3, Heads: 2, KVHeads: 1, HeadDim: 32, FFNDim: 256,
		ContextLength: 64, RMSNormEps: float64(float32(1e-6)), RoPEBase: 1e6, TiedEmbeddings: true},
	RoPEBaseLocal: 1e4, RoPEScale: 1, SlidingWindow: 4, SlidingPattern: 2, QueryScale: 1 / math.Sqrt(32)}

// tinyGGUF writes the tiny configuration as a gemma3 GGUF: float32 tensors, except the kernels
// and the table named in types (by their name in the block, e.g. "attn_v", or "token_embd"),
// stored in that block type; skip names a tensor to leave out, overrides replace metadata
// (ggufbuild.Override: a nil Value removes the key).
func tinyGGUF(types map[string]gguf.Type, skip string, overrides ...ggufbuild.KV) []byte {
	return tinyGGUFOf(tiny, types, skip, overrides...)
}

// tinyGGUFOf is tinyGGUF of the configuration c.
func tinyGGUFOf(c gemma3.Config, types map[string]gguf.Type, skip string, overrides ...ggufbuild.KV) []byte {
	kvs := decodertest.Metadata("gemma3", c.DecoderConfig,
		ggufbuild.KV{Key: "gemma3.attention.key_length", Value: uint32(c.HeadDim)},
		ggufbuild.KV{Key: "gemma3.attention.value_length", Value: uint32(c.HeadDim)},
		ggufbuild.KV{Key: "gemma3.attention.sliding_window", Value: uint32(c.SlidingWindow)},
		ggufbuild.KV{Key: "gemma3.attention.sliding_window_pattern", Value: uint32(c.SlidingPattern)})
	var ts []ggufbuild.Tensor
	seed := 0
	add := func(name, short string, v []float32, dims ...uint64) {
		seed++
		if name == skip {
			return
		}
		ts = append(ts, decodertest.Tensor(name, types[short], v, dims...))
	}
	norm := func(name, short string, n int) {
		v := decodertest.Values(seed+50, n)
		for i := range v {
			v[i] = 1 + v[i]/2 // stored as Gemma's 1 + weight
		}
		add(name, short, v, uint64(n))
	}
	add("token_embd.weight", "token_embd", decodertest.Values(1, c.VocabSize*c.Dim), uint64(c.Dim), uint64(c.VocabSize))
	norm("output_norm.weight", "output_norm", c.Dim)
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	for l := 0; l < c.Layers; l++ {
		blk := fmt.Sprintf("blk.%d.", l)
		kernel := func(name string, in, out int) {
			add(blk+name+".weight", name, decodertest.Values(seed+100, in*out), uint64(in), uint64(out))
		}
		norm(blk+"attn_norm.weight", "attn_norm", c.Dim)
		kernel("attn_q", c.Dim, q)
		kernel("attn_k", c.Dim, kv)
		kernel("attn_v", c.Dim, kv)
		norm(blk+"attn_q_norm.weight", "attn_q_norm", c.HeadDim)
		norm(blk+"attn_k_norm.weight", "attn_k_norm", c.HeadDim)
		kernel("attn_output", q, c.Dim)
		norm(blk+"post_attention_norm.weight", "post_attention_norm", c.Dim)
		norm(blk+"ffn_norm.weight", "ffn_norm", c.Dim)
		kernel("ffn_gate", c.Dim, c.FFNDim)
		kernel("ffn_up", c.Dim, c.FFNDim)
		kernel("ffn_down", c.FFNDim, c.Dim)
		norm(blk+"post_ffw_norm.weight", "post_ffw_norm", c.Dim)
	}
	return ggufbuild.Build(ggufbuild.Override(kvs, overrides...), ts)
}

// load loads a tiny GGUF through a Quantizer of the preset (fusing through it when fuse).
func load(t *testing.T, data []byte, preset string, fuse bool) (*context.Context, *gemma3.Model, *models.Quantizer) {
	t.Helper()
	return loadFile(t, decodertest.Open(t, data), preset, fuse, nil)
}

// loadFile loads f through a Quantizer of the preset (fusing through it when fuse), its values
// placed on backend (nil: left local).
func loadFile(t *testing.T, f *gguf.File, preset string, fuse bool, backend backends.Backend) (*context.Context, *gemma3.Model,
	*models.Quantizer) {
	t.Helper()
	q := decodertest.Quantizer(t, preset)
	opts := models.LoadOptions{Kernel: q.Kernel, Table: q.QuantizeTable, Keep: q, Backend: backend}
	if fuse {
		opts.Fuse = q.Fuse
	}
	ctx := context.New()
	m, err := gemma3.LoadGGUF(ctx, f, opts)
	if err != nil {
		t.Fatal(err)
	}
	m.Projection, m.Table = q.Projection, q.Table
	return ctx, m, q
}

// TestConfigFromGGUF: the tiny file's hyper-parameters, and llama.cpp's defaults where a key is
// absent.
func TestConfigFromGGUF(t *testing.T) {
	for _, tc := range []struct {
		name      string
		overrides []ggufbuild.KV
		want      func(c *gemma3.Config)
	}{
		{"tiny", nil, func(*gemma3.Config) {}},
		{"defaults", []ggufbuild.KV{{Key: "gemma3.attention.sliding_window_pattern"}, {Key: "gemma3.rope.freq_base"},
			{Key: "gemma3.attention.head_count_kv"}, {Key: "gemma3.context_length"}}, func(c *gemma3.Config) {
			c.SlidingPattern, c.RoPEBase, c.KVHeads, c.ContextLength = 6, 1e6, 2, 0
		}},
		{"no sliding window", []ggufbuild.KV{{Key: "gemma3.attention.sliding_window"}}, func(c *gemma3.Config) { c.SlidingWindow = 0 }},
		{"local base, linear scaling, softcap", []ggufbuild.KV{{Key: "gemma3.rope.freq_base_swa", Value: float32(5000)},
			{Key: "gemma3.rope.scaling.type", Value: "linear"}, {Key: "gemma3.rope.scaling.factor", Value: float32(8)},
			{Key: "gemma3.final_logit_softcapping", Value: float32(30)}}, func(c *gemma3.Config) {
			c.RoPEBaseLocal, c.RoPEScale, c.FinalSoftcap = 5000, 0.125, 30
		}},
		// llama.cpp scales linearly by a factor given without a type.
		{"factor without a type", []ggufbuild.KV{{Key: "gemma3.rope.scaling.factor", Value: float32(4)}}, func(c *gemma3.Config) {
			c.RoPEScale = 0.25
		}},
		// llama.cpp reads an absent factor, or 0, as no scaling.
		{"linear without a factor", []ggufbuild.KV{{Key: "gemma3.rope.scaling.type", Value: "linear"}}, func(*gemma3.Config) {}},
		{"factor 0", []ggufbuild.KV{{Key: "gemma3.rope.scaling.factor", Value: float32(0)}}, func(*gemma3.Config) {}},
		// llama.cpp reads the older key "rope.scale_linear" when "rope.scaling.factor" is absent.
		{"scale_linear", []ggufbuild.KV{{Key: "gemma3.rope.scale_linear", Value: float32(4)}}, func(c *gemma3.Config) {
			c.RoPEScale = 0.25
		}},
		{"scale_linear with linear", []ggufbuild.KV{{Key: "gemma3.rope.scaling.type", Value: "linear"},
			{Key: "gemma3.rope.scale_linear", Value: float32(2)}}, func(c *gemma3.Config) { c.RoPEScale = 0.5 }},
		{"scaling.factor before scale_linear", []ggufbuild.KV{{Key: "gemma3.rope.scaling.factor", Value: float32(8)},
			{Key: "gemma3.rope.scale_linear", Value: float32(2)}}, func(c *gemma3.Config) { c.RoPEScale = 0.125 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := gemma3.ConfigFromGGUF(decodertest.Open(t, tinyGGUF(nil, "", tc.overrides...)))
			if err != nil {
				t.Fatal(err)
			}
			want := tiny
			tc.want(&want)
			if got != want {
				t.Errorf("config\n%+v, want\n%+v", got, want)
			}
		})
	}
	if got := []bool{tiny.Sliding(0), tiny.Sliding(1), tiny.Sliding(2)}; fmt.Sprint(got) != "[true false true]" {
		t.Errorf("Sliding(0..2) = %v; want layer 1 global", got)
	}
	six := tiny
	six.SlidingPattern = 6
	for i, want := range []bool{true, true, true, true, true, false, true} {
		if six.Sliding(i) != want {
			t.Errorf("pattern 6: Sliding(%d) = %v, want %v", i, !want, want)
		}
	}
}

// TestLoadGGUFHyperParameters: a hostile or broken hyper-parameter is an error naming its key and
// what is accepted, found before anything is sized by it, and the context is left unchanged.
func TestLoadGGUFHyperParameters(t *testing.T) {
	cases := append(decodertest.DecoderBadKeys("gemma3"),
		decodertest.Bad("architecture", "general.architecture", "llama", `architecture "llama"; accepted: "gemma3"`),
		decodertest.BadKey{Name: "block_count 2^24", KV: ggufbuild.KV{Key: "gemma3.block_count", Value: uint32(1 << 24)},
			Want:     `tensor "blk.3.attn_norm.weight" (gemma3.block_count = 16777216; the file has the tensors of at most 3 layers)`,
			NotFound: true},
		decodertest.Bad("head_count_kv 3", "gemma3.attention.head_count_kv", uint32(3),
			"gemma3.attention.head_count_kv = 3 does not divide gemma3.attention.head_count = 2"),
		decodertest.Bad("key_length odd", "gemma3.attention.key_length", uint32(31), "a head width of 31"),
		decodertest.Bad("value_length", "gemma3.attention.value_length", uint32(16),
			"gemma3.attention.value_length = 16, but the head width is 32"),
		decodertest.Bad("rope dimension", "gemma3.rope.dimension_count", uint32(16),
			"gemma3.rope.dimension_count = 16, but the head width is 32"),
		decodertest.Bad("freq_base_swa +Inf", "gemma3.rope.freq_base_swa", float32(math.Inf(1)),
			"gemma3.rope.freq_base_swa = +Inf; accepted: a finite number above 1"),
		decodertest.Bad("scaling yarn", "gemma3.rope.scaling.type", "yarn", `gemma3.rope.scaling.type = "yarn"; accepted: "linear", "none"`),
		decodertest.Bad("scaling factor -2", "gemma3.rope.scaling.factor", float32(-2), "gemma3.rope.scaling.factor = -2"),
		decodertest.Bad("scale_linear -2", "gemma3.rope.scale_linear", float32(-2), "gemma3.rope.scale_linear = -2"),
		decodertest.Bad("sliding window 2^32-1", "gemma3.attention.sliding_window", uint32(math.MaxUint32),
			"gemma3.attention.sliding_window = 4294967295; accepted: 0 to 2147483647"),
		decodertest.Bad("pattern as text", "gemma3.attention.sliding_window_pattern", "6", "gemma3.attention.sliding_window_pattern"),
		decodertest.Bad("softcap NaN", "gemma3.final_logit_softcapping", float32(math.NaN()),
			"gemma3.final_logit_softcapping = NaN; accepted: 0 (none) or a finite positive number"),
	)
	decodertest.CheckBadKeys(t, cases, func(kv ggufbuild.KV) []byte { return tinyGGUF(nil, "", kv) },
		gemma3.LoadGGUF, gemma3.ConfigFromGGUF)
}

// TestLoadGGUFErrors: missing tensors and shapes that disagree with the metadata are errors
// naming the tensor, and leave the context unchanged.
func TestLoadGGUFErrors(t *testing.T) {
	for _, tc := range []struct {
		name, skip string
		kv         []ggufbuild.KV
		want       string
	}{
		{"missing", "blk.2.attn_k_norm.weight", nil, `tensor "blk.2.attn_k_norm.weight"`},
		{"shape", "", []ggufbuild.KV{{Key: "gemma3.feed_forward_length", Value: uint32(32)}},
			"blk.0.ffn_gate.weight F32 [64 256] has row-major shape [256 64]; the configuration needs [32 64]"},
		{"blocks undercounted", "", []ggufbuild.KV{{Key: "gemma3.block_count", Value: uint32(1)}},
			"tensor blk.1.attn_norm.weight F32 [64] is not one the configuration reads"},
		{"nil context", "", nil, "nil context"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.New()
			loadCtx := ctx
			if tc.name == "nil context" {
				loadCtx = nil
			}
			_, err := gemma3.LoadGGUF(loadCtx, decodertest.Open(t, tinyGGUF(nil, tc.skip, tc.kv...)), models.LoadOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want one containing %q", err, tc.want)
			}
			if ctx.NumVariables() != 0 {
				t.Errorf("the failed load left %d variables", ctx.NumVariables())
			}
		})
	}
}

// TestLoadKeepsBlocks: loaded with the file preset, the tensors stored in a block type stay in it
// (the report names the type, the context holds the blocks), the float ones are float, and the
// logits are those of the same values decoded to float32 (a dense product of another layout
// rounds within a few ulps); q/k/v and gate/up fuse where the parts share a block type and not
// where they differ, with the logits of the separate products bit for bit.
func TestLoadKeepsBlocks(t *testing.T) {
	backend := testutil.Backend(t)
	tokens := []int32{3, 1, 4, 1, 5, 9, 2, 6, 5, 3}
	for _, tc := range []struct {
		name          string
		types         map[string]gguf.Type
		qkv, gateUp   bool
		keptTensors   int
		tableIsStored bool
	}{
		{"all Q8_0", map[string]gguf.Type{"attn_q": gguf.TypeQ8_0, "attn_k": gguf.TypeQ8_0, "attn_v": gguf.TypeQ8_0, "attn_output": gguf.TypeQ4_1,
			"ffn_gate": gguf.TypeQ5_0, "ffn_up": gguf.TypeQ5_0, "ffn_down": gguf.TypeQ6_K, "token_embd": gguf.TypeQ8_0}, true, true, 3*7 + 1, true},
		{"mixed", map[string]gguf.Type{"attn_q": gguf.TypeQ5_0, "attn_k": gguf.TypeQ5_0, "attn_v": gguf.TypeQ8_0, "ffn_gate": gguf.TypeQ4_0},
			false, false, 3 * 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := tinyGGUF(tc.types, "")
			fctx, fm, _ := load(t, data, "f32", false)
			kctx, km, q := load(t, data, models.FilePreset, false)
			sctx, sm, _ := load(t, data, models.FilePreset, true)
			if km.FusedQKV || km.FusedGateUp || sm.FusedQKV != tc.qkv || sm.FusedGateUp != tc.gateUp {
				t.Errorf("fused q/k/v %v, gate/up %v; want %v, %v", sm.FusedQKV, sm.FusedGateUp, tc.qkv, tc.gateUp)
			}
			kept := 0
			for _, e := range q.Report().Entries {
				if strings.HasPrefix(e.Format, "ggml ") {
					kept++
				}
				if e.Scope == "/token_embd" && (e.Format == "ggml Q8_0") != tc.tableIsStored {
					t.Errorf("table stored as %q", e.Format)
				}
			}
			if kept != tc.keptTensors {
				t.Errorf("%d tensors kept as stored, want %d:\n%s", kept, tc.keptTensors, q.Report())
			}
			want := decodertest.Forward(t, backend, fctx, fm, tokens)
			got := decodertest.Forward(t, backend, kctx, km, tokens)
			fused := decodertest.Forward(t, backend, sctx, sm, tokens)
			for p := range want {
				if d := decodertest.MaxAbsDiff(got[p], want[p]); d > 1e-4 {
					t.Errorf("position %d: kept blocks differ from the decoded float model by %g", p, d)
				}
				if d := decodertest.MaxAbsDiff(fused[p], got[p]); d != 0 {
					t.Errorf("position %d: fused products differ from the separate ones by %g", p, d)
				}
			}
		})
	}
}

// TestConfigFloat32Range: the model computes in float32, so a float hyper-parameter that passes
// as a finite positive float64 but is 0 or ±Inf as float32 (a float64 GGUF value of 1e-300, the
// reciprocal of a tiny scaling factor) must be refused by its key, not give silent garbage (an
// epsilon or softcap of 0) or NaN logits.
func TestConfigFloat32Range(t *testing.T) {
	linear := ggufbuild.KV{Key: "gemma3.rope.scaling.type", Value: "linear"}
	for _, tc := range []struct {
		name string
		kvs  []ggufbuild.KV
		want string
	}{
		{"softcap 1e-300", []ggufbuild.KV{{Key: "gemma3.final_logit_softcapping", Value: 1e-300}}, "gemma3.final_logit_softcapping"},
		// Subnormal in float32, flushed to zero by XLA's CPU backend: every logit 0.
		{"softcap 1e-40", []ggufbuild.KV{{Key: "gemma3.final_logit_softcapping", Value: float32(1e-40)}}, "gemma3.final_logit_softcapping"},
		{"epsilon 1e-300", []ggufbuild.KV{{Key: "gemma3.attention.layer_norm_rms_epsilon", Value: 1e-300}}, "gemma3.attention.layer_norm_rms_epsilon"},
		{"freq_base 1e300", []ggufbuild.KV{{Key: "gemma3.rope.freq_base", Value: 1e300}}, "gemma3.rope.freq_base"},
		{"scaling factor 1e-44", []ggufbuild.KV{linear, {Key: "gemma3.rope.scaling.factor", Value: float32(1e-44)}}, "gemma3.rope.scaling.factor"},
		// 1/factor = 3.3e-39 is subnormal in float32, flushed to zero by XLA's CPU backend: no rotation.
		{"scaling factor 3e38", []ggufbuild.KV{linear, {Key: "gemma3.rope.scaling.factor", Value: float32(3e38)}}, "1 / gemma3.rope.scaling.factor"},
		// 1/factor = 5e37 is finite, but the positions from 7 on times it are not: NaN logits.
		{"scaling factor 2e-38", []ggufbuild.KV{linear, {Key: "gemma3.rope.scaling.factor", Value: float32(2e-38)}},
			"gemma3.rope.scaling.factor = 2.0000000102211272e-38; accepted: at least 6.311e-30"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := decodertest.Open(t, tinyGGUF(nil, "", tc.kvs...))
			c, err := gemma3.ConfigFromGGUF(f)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ConfigFromGGUF: %+v, error %v; want one naming %s", c, err, tc.want)
			}
		})
	}
}

// TestHeadWidthErrorSource: without gemma3.attention.key_length the head width is
// embedding_length / head_count, and an error about it names those keys, not the absent one.
func TestHeadWidthErrorSource(t *testing.T) {
	noKeyLength := ggufbuild.KV{Key: "gemma3.attention.key_length"}
	for _, tc := range []struct {
		name string
		kvs  []ggufbuild.KV
		want string
	}{
		{"odd", []ggufbuild.KV{noKeyLength, {Key: "gemma3.attention.value_length"}, {Key: "gemma3.attention.head_count", Value: uint32(64)}},
			"a head width of 1 (gemma3.embedding_length / gemma3.attention.head_count = 64 / 64)"},
		{"rope dimension", []ggufbuild.KV{noKeyLength, {Key: "gemma3.rope.dimension_count", Value: uint32(16)}},
			"gemma3.rope.dimension_count = 16, but the head width is 32 (gemma3.embedding_length / gemma3.attention.head_count = 64 / 2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gemma3.ConfigFromGGUF(decodertest.Open(t, tinyGGUF(nil, "", tc.kvs...)))
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "key_length") {
				t.Errorf("error %v; want one containing %q, not naming the absent key_length", err, tc.want)
			}
		})
	}
}
