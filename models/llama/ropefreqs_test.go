package llama_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models/llama"
	"github.com/x448/float16"
)

// The reference set llamacpp_rope_freqs (reference/gen_rope_freqs.py, reference/README.md):
// llama.cpp's logits of a tiny random Llama model whose GGUF has Llama 3.1's rope_freqs tensor.

// ropeFreqsTolerance bounds the difference of two float32 implementations of this model,
// relative to the largest magnitude of the compared row. The reductions (up to 128 terms) are
// summed in another order, and the rotary angles, up to 23 radians, are computed otherwise:
// llama.cpp multiplies by base^(-2/HeadDim) in float32 once per pair, carrying a few roundings
// of 2^-24 into each angle, quanta rounds each inverse frequency once from float64. The measured
// difference is 2^-18.5 of the largest logit; 2^-16 leaves a margin of 5; without the factors
// the logits are off by more than the largest logit.
const ropeFreqsTolerance = 1.0 / (1 << 16)

// loadRoPEFreqsReference reads the set, skipping the test when it is absent.
func loadRoPEFreqsReference(t *testing.T) (decodertest.TinyIndex, []float32, []int32) {
	t.Helper()
	index := decodertest.LoadTinyIndex(t, "llamacpp_rope_freqs")
	a := decodertest.Reference(t, "llamacpp_rope_freqs", "rope_freqs.npy")
	factors := make([]float32, len(a.Values))
	for i, v := range a.Values {
		factors[i] = float32(v)
	}
	ids := decodertest.ReferenceIDs(t, "llamacpp_rope_freqs", "ids.npy")
	return index, factors, ids
}

// ropeFreqsGGUF builds the reference's model (TinyTensors) with the rope_freqs tensor factors
// (nil: none; a GGUF's tensors may come in any order), then extra tensors.
func ropeFreqsGGUF(t *testing.T, index decodertest.TinyIndex, factors *ggufbuild.Tensor, extra ...ggufbuild.Tensor) []byte {
	t.Helper()
	kvs := decodertest.Metadata("llama", index.DecoderConfig(), ggufbuild.KV{Key: "llama.rope.dimension_count", Value: uint32(index.Config.HeadDim)})
	ts := index.TinyTensors(t, gguf.TypeF32, func(name string) bool { return name == "rope_freqs.weight" })
	if factors != nil {
		ts = append(ts, *factors)
	}
	return ggufbuild.Build(kvs, append(ts, extra...))
}

// TestLlamaCppRoPEFreqs: a Llama 3.1-style file (rope_freqs.weight, llama3 factors) gives
// llama.cpp's logits at every position within ropeFreqsTolerance, in both q/k row orders and
// through Step. Without the factors the model gives llama.cpp's logits of the file without
// rope_freqs (the control), far from those with them.
func TestLlamaCppRoPEFreqs(t *testing.T) {
	index, factors, ids := loadRoPEFreqsReference(t)
	want, control := decodertest.ReferenceLogits(t, "llamacpp_rope_freqs", "logits.npy"), decodertest.ReferenceLogits(t, "llamacpp_rope_freqs", "logits_without_rope_freqs.npy")
	ft := ggufbuild.F32Tensor("rope_freqs.weight", factors, uint64(len(factors)))
	for _, ref := range index.Tensors {
		if sum := sha256.Sum256(ft.Data); ref.Name == ft.Name && hex.EncodeToString(sum[:]) != ref.SHA256 {
			t.Fatalf("rope_freqs.weight: sha256 %x, the reference's %s", sum, ref.SHA256)
		}
	}
	data := ropeFreqsGGUF(t, index, &ft)
	backend := testutil.Backend(t)
	for _, adjacent := range []bool{false, true} {
		t.Run(fmt.Sprintf("RotateAdjacent=%v", adjacent), func(t *testing.T) {
			ctx, m := decodertest.Load(t, llama.LoadGGUF, data, llama.LoadOptions{RotateAdjacent: adjacent})
			if !slices.Equal(m.RoPEFreqFactors, factors) {
				t.Fatalf("RoPEFreqFactors %v, want the file's %v", m.RoPEFreqFactors, factors)
			}
			rel, abs := decodertest.RelativeDiff(decodertest.Forward(t, backend, ctx, m, ids), want)
			if rel > ropeFreqsTolerance {
				t.Errorf("logits differ from llama.cpp's by %.3g of the largest logit; accepted: %.3g", rel, ropeFreqsTolerance)
			}
			t.Logf("with the factors: %.3g (2^%.1f) of the largest logit, %.3g at most", rel, math.Log2(rel), abs)
			if adjacent {
				return
			}
			decodertest.StepMatchesForward(t, backend, ctx, m, ids, [][2]int{{0, 7}, {7, 8}, {8, len(ids)}}, 32, 32)
			m.RoPEFreqFactors = nil
			got := decodertest.Forward(t, backend, ctx, m, ids)
			if rel, _ := decodertest.RelativeDiff(got, control); rel > ropeFreqsTolerance {
				t.Errorf("without the factors: logits differ from llama.cpp's of the file without rope_freqs by %.3g of the largest logit; "+
					"accepted: %.3g", rel, ropeFreqsTolerance)
			} else {
				t.Logf("without the factors, against the file without rope_freqs: %.3g (2^%.1f) of the largest logit", rel, math.Log2(rel))
			}
			rel, abs = decodertest.RelativeDiff(got, want)
			if rel < 1000*ropeFreqsTolerance {
				t.Errorf("without the factors the logits differ from llama.cpp's by only %.3g of the largest logit", rel)
			}
			t.Logf("without the factors: %.3g of the largest logit, %.3g at most", rel, abs)
		})
	}
}

// TestLoadGGUFRoPEFreqsErrors: a rope_freqs tensor that llama.cpp would not run (not F32, not
// HeadDim/2 long, a factor not finite and positive), or one whose angles overflow float32 (a
// factor below models.MinRoPEFactor: NaN logits), is an error naming it, as are the tensors
// of the RoPE variants still not implemented; the context is left without variables.
func TestLoadGGUFRoPEFreqsErrors(t *testing.T) {
	index, factors, _ := loadRoPEFreqsReference(t)
	n := uint64(len(factors))
	with := func(i int, v float32) *ggufbuild.Tensor {
		f := append([]float32{}, factors...)
		f[i] = v
		ft := ggufbuild.F32Tensor("rope_freqs.weight", f, n)
		return &ft
	}
	good := ggufbuild.F32Tensor("rope_freqs.weight", factors, n)
	f16 := ggufbuild.Tensor{Name: "rope_freqs.weight", Type: uint32(gguf.TypeF16), Dims: []uint64{n}, Data: make([]byte, 2*n)}
	for i, v := range factors {
		binary.LittleEndian.PutUint16(f16.Data[2*i:], float16.Fromfloat32(v).Bits())
	}
	short := ggufbuild.F32Tensor("rope_freqs.weight", factors[:n-1], n-1)
	tests := []struct {
		name    string
		factors *ggufbuild.Tensor
		extra   []ggufbuild.Tensor
		want    string
		is      error
	}{
		{"F16", &f16, nil, "tensor rope_freqs.weight F16 [8] (RoPE frequency factors); accepted: F32 [8]", gguf.ErrUnsupported},
		{"short", &short, nil, "tensor rope_freqs.weight F32 [7] has row-major shape [7]; the configuration needs [8] (head width / 2", gguf.ErrCorrupt},
		{"zero", with(3, 0), nil, "factor 3 = 0; accepted: finite and positive", gguf.ErrCorrupt},
		{"negative", with(0, -1), nil, "factor 0 = -1; accepted: finite and positive", gguf.ErrCorrupt},
		{"NaN", with(7, float32(math.NaN())), nil, "tensor rope_freqs.weight F32 [8]: element 7 is NaN", gguf.ErrCorrupt},
		{"Inf", with(2, float32(math.Inf(1))), nil, "tensor rope_freqs.weight F32 [8]: element 2 is +Inf", gguf.ErrCorrupt},
		// Positive and finite, but the angles 1/factor·position are +Inf in float32: NaN logits.
		{"tiny", with(0, 1e-39), nil, "factor 0 = 1e-39; accepted: at least 6.311e-30", gguf.ErrCorrupt},
		// LongRoPE's factors (Phi-3) and per-layer factors are still refused.
		{"rope_factors_long", &good, []ggufbuild.Tensor{ggufbuild.F32Tensor("rope_factors_long.weight", factors, n)},
			"tensor rope_factors_long.weight F32 [8] is not one the configuration reads", gguf.ErrUnsupported},
		{"per layer", &good, []ggufbuild.Tensor{ggufbuild.F32Tensor("blk.0.rope_freqs.weight", factors, n)},
			"tensor blk.0.rope_freqs.weight F32 [8] is not one the configuration reads", gguf.ErrUnsupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := ropeFreqsGGUF(t, index, tc.factors, tc.extra...)
			ctx := context.New()
			_, err := llama.LoadGGUF(ctx, decodertest.Open(t, data), llama.LoadOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.is) {
				t.Errorf("error %v; want one containing %q wrapping %v", err, tc.want, tc.is)
			}
			if ctx.NumVariables() != 0 {
				t.Errorf("the failed load left %d variables", ctx.NumVariables())
			}
		})
	}
}
