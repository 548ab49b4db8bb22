package qwen2_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/llama"
	"github.com/quanta-ml/quanta/models/qwen2"
)

// TestLoadGGUFKept: a file whose projections are Q8_0, loaded with every tensor kept as stored
// and gate/up fused (stacked blocks; q/k/v, biased, not fused), gives the logits of the same file
// decoded to float32, the biases added by the Quantizer's Projection.
func TestLoadGGUFKept(t *testing.T) {
	index := loadIndex(t)
	ids := decodertest.ReferenceIDs(t, set, "ids.npy")
	data := referenceGGUF(t, index, nil, gguf.TypeQ8_0, nil)
	backend := testutil.Backend(t)
	ctx, m := decodertest.Load(t, qwen2.LoadGGUF, data, models.LoadOptions{})
	want := decodertest.Forward(t, backend, ctx, m, ids)

	q := decodertest.Quantizer(t, models.FilePreset)
	kctx, k := decodertest.Load(t, qwen2.LoadGGUF, data, models.LoadOptions{Kernel: q.Kernel, Table: q.QuantizeTable, Keep: q, Fuse: q.Fuse})
	if k.FusedQKV || !k.FusedGateUp {
		t.Fatalf("FusedQKV %v, FusedGateUp %v; want q/k/v apart, gate/up fused", k.FusedQKV, k.FusedGateUp)
	}
	k.Projection, k.Table = q.Projection, q.Table
	decodertest.SameLogits(t, "kept Q8_0 logits differ from the decoded ones", decodertest.Forward(t, backend, kctx, k, ids), want)
}

// TestLoadGGUFErrors: what a Qwen2 file must hold, and what this loader does not implement, is an
// error naming the key or tensor; the context is left without variables.
func TestLoadGGUFErrors(t *testing.T) {
	index := loadIndex(t)
	without := func(name string) func(string) bool { return func(n string) bool { return n == name } }
	f32 := func(name string, n int) ggufbuild.Tensor {
		return ggufbuild.F32Tensor(name, make([]float32, n), uint64(n))
	}
	dim, q := index.Config.Dim, index.Config.Heads*index.Config.HeadDim
	tests := []struct {
		name     string
		skip     func(string) bool
		extra    []ggufbuild.Tensor
		want     string
		notFound bool
	}{
		{"no q bias", without("blk.0.attn_q.bias"), nil, `tensor "blk.0.attn_q.bias"`, true},
		{"no v bias", without("blk.1.attn_v.bias"), nil, `tensor "blk.1.attn_v.bias"`, true},
		{"short k bias", without("blk.0.attn_k.bias"), []ggufbuild.Tensor{f32("blk.0.attn_k.bias", 16)},
			"tensor blk.0.attn_k.bias F32 [16] has row-major shape [16]; the configuration needs [32] (qwen2.attention.head_count_kv × head width)", false},
		{"output bias", nil, []ggufbuild.Tensor{f32("output.bias", index.Config.Vocab)},
			"tensor output.bias F32 [64] is not one the configuration reads", false},
		{"attn_output bias", nil, []ggufbuild.Tensor{f32("blk.0.attn_output.bias", dim)},
			"tensor blk.0.attn_output.bias F32 [64] is not one the configuration reads", false},
		{"fused qkv", nil, []ggufbuild.Tensor{ggufbuild.F32Tensor("blk.0.attn_qkv.weight", make([]float32, dim*(q+dim)), uint64(dim), uint64(q+dim))},
			"tensor blk.0.attn_qkv.weight F32 [64 128] is not one the configuration reads", false},
		{"rope_freqs", nil, []ggufbuild.Tensor{f32("rope_freqs.weight", index.Config.HeadDim/2)},
			"tensor rope_freqs.weight F32 [8] is not one the configuration reads", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := decodertest.Open(t, referenceGGUF(t, index, tc.skip, gguf.TypeF32, tc.extra))
			err := decodertest.WantLoadError(t, func(ctx *context.Context) error {
				_, err := qwen2.LoadGGUF(ctx, f, models.LoadOptions{})
				return err
			}, tc.want, tc.notFound)
			if !tc.notFound && !errors.Is(err, gguf.ErrUnsupported) && !errors.Is(err, gguf.ErrCorrupt) {
				t.Errorf("error %v wraps neither gguf.ErrUnsupported nor gguf.ErrCorrupt", err)
			}
		})
	}
}

// TestConfigFromGGUFBadKeys: each hyper-parameter is checked, the error naming its key; RoPE
// scaling (the YaRN of the long-context files) is refused.
func TestConfigFromGGUFBadKeys(t *testing.T) {
	index := loadIndex(t)
	cases := append(decodertest.DecoderBadKeys(qwen2.Architecture),
		decodertest.Bad("scaling type", "qwen2.rope.scaling.type", "yarn", `qwen2.rope.scaling.type = yarn: RoPE scaling is not supported; accepted: absent or "none"`),
		decodertest.Bad("scaling factor", "qwen2.rope.scaling.factor", float32(4), "qwen2.rope.scaling.factor = 4: RoPE scaling is not supported; accepted: absent, 0 or 1"),
		decodertest.Bad("scale_linear", "qwen2.rope.scale_linear", float32(2), "qwen2.rope.scale_linear = 2: RoPE scaling is not supported"),
		decodertest.Bad("rope dimension", "qwen2.rope.dimension_count", uint32(8),
			"qwen2.rope.dimension_count = 8, but the head width is 16 (qwen2.embedding_length / qwen2.attention.head_count = 64 / 4)"),
		decodertest.Bad("architecture", "general.architecture", "qwen2moe", `architecture "qwen2moe"; accepted: "qwen2"`),
	)
	decodertest.CheckBadKeys(t, cases, func(kv ggufbuild.KV) []byte {
		return referenceGGUF(t, index, nil, gguf.TypeF32, nil, kv)
	}, qwen2.LoadGGUF, func(f *gguf.File) (llama.Config, error) {
		c, err := qwen2.ConfigFromGGUF(f)
		if err != nil && !strings.HasPrefix(err.Error(), "qwen2.ConfigFromGGUF: ") {
			t.Errorf("error %q does not name qwen2.ConfigFromGGUF", err)
		}
		return c, err
	})
	// "none" scales nothing, whatever the factor, as llama.cpp reads it.
	f := decodertest.Open(t, referenceGGUF(t, index, nil, gguf.TypeF32, nil, ggufbuild.KV{Key: "qwen2.rope.scaling.type", Value: "none"},
		ggufbuild.KV{Key: "qwen2.rope.scaling.factor", Value: float32(4)}))
	if _, err := qwen2.ConfigFromGGUF(f); err != nil {
		t.Errorf("rope.scaling.type none: %v", err)
	}
}
