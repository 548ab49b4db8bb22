package qwen2_test

import (
	"math"
	"testing"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/arch"
	"github.com/quanta-ml/quanta/models/llama"
	"github.com/quanta-ml/quanta/models/qwen2"
)

// The reference set llamacpp_qwen2 (reference/gen_qwen2.py, reference/README.md): llama.cpp's
// logits of a tiny random Qwen2 model, with and without its q/k/v biases.
const set = "llamacpp_qwen2"

// tolerance bounds the difference of two float32 implementations of this model, relative to the
// largest magnitude of the compared row: the reductions (up to 128 terms) are summed in another
// order, and the rotary angles (up to 23 radians) computed otherwise (llama.cpp multiplies by
// base^(-2/HeadDim) in float32 once per pair, quanta rounds each inverse frequency once from
// float64), as in models/llama's TestLlamaCppRoPEFreqs. Without the biases the logits are off by
// about the largest logit.
const tolerance = 1.0 / (1 << 16)

// loadIndex reads the set's index, skipping the test when it is absent.
func loadIndex(t testing.TB) decodertest.TinyIndex { return decodertest.LoadTinyIndex(t, set) }

// referenceGGUF builds the reference's model (TinyTensors), without the tensors skip says to
// leave out, its projection kernels stored in block type kernels (F32, the zero Type: as llama.cpp
// ran them), then extra tensors; overrides replace metadata.
func referenceGGUF(t testing.TB, index decodertest.TinyIndex, skip func(name string) bool, kernels gguf.Type, extra []ggufbuild.Tensor,
	overrides ...ggufbuild.KV) []byte {
	t.Helper()
	kvs := ggufbuild.Override(decodertest.Metadata(qwen2.Architecture, index.DecoderConfig()), overrides...)
	return ggufbuild.Build(kvs, append(index.TinyTensors(t, kernels, skip), extra...))
}

// TestLlamaCppQwen2: a tiny random Qwen2 file gives llama.cpp's logits at every position within
// tolerance, through Forward and Step, loaded by qwen2.LoadGGUF and by arch.LoadGGUF with a
// quantizer that fuses (gate/up fuse, q/k/v do not). With its biases dropped (QKVBias false) the
// model gives llama.cpp's logits of the file without them (the control), far from those with
// them.
func TestLlamaCppQwen2(t *testing.T) {
	index := loadIndex(t)
	ids := decodertest.ReferenceIDs(t, set, "ids.npy")
	want, control := decodertest.ReferenceLogits(t, set, "logits.npy"), decodertest.ReferenceLogits(t, set, "logits_without_biases.npy")
	data := referenceGGUF(t, index, nil, gguf.TypeF32, nil)
	backend := testutil.Backend(t)

	ctx, m := decodertest.Load(t, qwen2.LoadGGUF, data, models.LoadOptions{})
	if !m.QKVBias || m.RotateAdjacent || m.TiedEmbeddings || m.RoPEBase != index.Config.Base {
		t.Fatalf("model %+v; want QKVBias, halves rotated, an untied head, RoPEBase %g", m, index.Config.Base)
	}
	rel, abs := decodertest.RelativeDiff(decodertest.Forward(t, backend, ctx, m, ids), want)
	if rel > tolerance {
		t.Errorf("logits differ from llama.cpp's by %.3g of the largest logit; accepted: %.3g", rel, tolerance)
	}
	t.Logf("with the biases: %.3g (2^%.1f) of the largest logit, %.3g at most", rel, math.Log2(rel), abs)
	decodertest.StepMatchesForward(t, backend, ctx, m, ids, [][2]int{{0, 7}, {7, 8}, {8, len(ids)}}, 32, 32)

	m.QKVBias = false
	got := decodertest.Forward(t, backend, ctx, m, ids)
	if rel, abs := decodertest.RelativeDiff(got, control); rel > tolerance {
		t.Errorf("without the biases: logits differ from llama.cpp's of the file without them by %.3g of the largest logit; accepted: %.3g",
			rel, tolerance)
	} else {
		t.Logf("without the biases, against the file without them: %.3g (2^%.1f) of the largest logit, %.3g at most", rel, math.Log2(rel), abs)
	}
	rel, abs = decodertest.RelativeDiff(got, want)
	if rel < 1000*tolerance {
		t.Errorf("without the biases the logits differ from llama.cpp's by only %.3g of the largest logit", rel)
	}
	t.Logf("without the biases: %.3g of the largest logit, %.3g at most", rel, abs)

	t.Run("arch", func(t *testing.T) {
		rules, err := models.Preset(models.FilePreset)
		if err != nil {
			t.Fatal(err)
		}
		q := models.MustNewQuantizer(rules)
		ctx, lm := decodertest.Load(t, arch.LoadGGUF, data, arch.QuantizerOptions(q, nil))
		m, ok := lm.(*llama.Model)
		if !ok || !m.QKVBias || m.FusedQKV || !m.FusedGateUp {
			t.Fatalf("arch.LoadGGUF gave %T %+v; want a *llama.Model with QKVBias, gate/up fused, q/k/v not", lm, lm)
		}
		if rel, _ := decodertest.RelativeDiff(decodertest.Forward(t, backend, ctx, m, ids), want); rel > tolerance {
			t.Errorf("logits differ from llama.cpp's by %.3g of the largest logit; accepted: %.3g", rel, tolerance)
		}
	})
}
