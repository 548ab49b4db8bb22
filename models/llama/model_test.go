package llama_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/llama"
)

// tiny is a configuration small enough for exact checks: GQA with 2 query heads per key/value head.
var tiny = llama.Config{VocabSize: 40, Dim: 16, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 4, FFNDim: 24,
	ContextLength: 64, RMSNormEps: 1e-5, RoPEBase: 10000, TiedEmbeddings: true}

// randomModel returns a model and a context whose variables are freshly initialized (seeded).
func randomModel(t *testing.T, backend backends.Backend, cfg llama.Config, seed int64) (*context.Context, *llama.Model) {
	t.Helper()
	m, err := llama.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.New()
	ctx.SetParam(context.ParamInitialSeed, seed)
	ctx.SetParam("initializer_stddev", 0.5)
	context.MustExecOnce(backend, ctx, func(ctx *context.Context, tokens *graph.Node) *graph.Node {
		return m.Forward(ctx, tokens)
	}, [][]int32{{1, 2}})
	return ctx, m
}

// TestStepMatchesForward: a prompt run in chunks against the cache, then one token at a time,
// gives the logits that the full-sequence forward pass gives at the same positions, with the
// attention over a window of the cache (its leading 8 of 12 positions).
func TestStepMatchesForward(t *testing.T) {
	backend := testutil.Backend(t)
	ctx, m := randomModel(t, backend, tiny, 1)
	tokens := []int32{3, 17, 5, 29, 11, 2, 38, 7}
	// Chunks: 3 tokens, then 2 (start 3), then one at a time.
	decodertest.StepMatchesForward(t, backend, ctx, m, tokens, [][2]int{{0, 3}, {3, 5}, {5, 6}, {6, 7}, {7, 8}}, 12, 8)
}

// TestGenerateMatchesForward: greedy decoding with the cache picks the argmax of the full pass,
// with windows (and caches) that grow during the generation (models' tests cover FullCache).
func TestGenerateMatchesForward(t *testing.T) {
	backend := testutil.Backend(t)
	ctx, m := randomModel(t, backend, tiny, 2)
	prompt := []int{5, 9, 13}
	gen, err := models.NewGenerator(backend, ctx, m, models.GeneratorOptions{MaxLen: 40, MinWindow: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Finalize()
	want := decodertest.GreedyMatchesForward(t, backend, ctx, m, gen, prompt, 30)
	// The prompt (bucket and window 16), then the windows 32 and 40: at least three compilations.
	if st := gen.Stats(); st.DecodeSteps != 29 || st.PromptTokens != 3 || st.Compilations < 3 {
		t.Errorf("stats %+v; want 29 decoding steps, 3 prompt tokens, at least 3 compilations", st)
	}
	stopped, _ := gen.Generate(prompt, models.GenerateOptions{MaxNewTokens: 6, Stop: []int{want[1]}})
	if fmt.Sprint(stopped) != fmt.Sprint(want[:2]) {
		t.Errorf("Generate with Stop %d = %v, want %v", want[1], stopped, want[:2])
	}
}

// TestCausal: changing later tokens leaves the logits of earlier positions unchanged.
func TestCausal(t *testing.T) {
	backend := testutil.Backend(t)
	ctx, m := randomModel(t, backend, tiny, 3)
	a := decodertest.Forward(t, backend, ctx, m, []int32{1, 2, 3, 4, 5, 6})
	b := decodertest.Forward(t, backend, ctx, m, []int32{1, 2, 3, 4, 30, 31})
	for p := 0; p < 4; p++ {
		if d := decodertest.MaxAbsDiff(a[p], b[p]); d > 1e-5 {
			t.Errorf("position %d changed by %g when later tokens changed", p, d)
		}
	}
	if d := decodertest.MaxAbsDiff(a[4], b[4]); d < 1e-3 {
		t.Errorf("position 4 did not change (%g) with its own token", d)
	}
}

// copyContext copies every variable of src into a new context, passing kernels through edit.
func copyContext(t *testing.T, src *context.Context, edit func(scope string, v [][]float32) [][]float32) *context.Context {
	t.Helper()
	dst := context.New()
	for v := range src.IterVariables() {
		value := v.MustValue()
		clone, err := value.LocalClone()
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil && v.Name() == "weights" {
			clone = tensors.FromValue(edit(v.Scope(), clone.Value().([][]float32)))
		}
		dst.InAbsPath(v.Scope()).VariableWithValue(v.Name(), clone)
	}
	return dst
}

// TestRotateAdjacent: q/k kernels in llama.cpp's converter order with the adjacent-pair rotation
// give the logits of the Hugging Face order with the half rotation.
func TestRotateAdjacent(t *testing.T) {
	backend := testutil.Backend(t)
	ctx, m := randomModel(t, backend, tiny, 4)
	d := tiny.HeadDim
	permuted := copyContext(t, ctx, func(scope string, w [][]float32) [][]float32 {
		var heads int
		switch {
		case hasSuffix(scope, "/attn_q/dense"):
			heads = tiny.Heads
		case hasSuffix(scope, "/attn_k/dense"):
			heads = tiny.KVHeads
		default:
			return w
		}
		// The converter's permutation: GGUF output h·d + 2i + j holds Hugging Face's h·d + j·d/2 + i.
		out := make([][]float32, len(w))
		for r := range w {
			out[r] = make([]float32, len(w[r]))
			for h := 0; h < heads; h++ {
				for i := 0; i < d/2; i++ {
					for j := 0; j < 2; j++ {
						out[r][h*d+2*i+j] = w[r][h*d+j*d/2+i]
					}
				}
			}
		}
		return out
	})
	adj := *m
	adj.RotateAdjacent = true
	tokens := []int32{4, 8, 15, 16, 23, 42 % 40}
	want := decodertest.Forward(t, backend, ctx, m, tokens)
	decodertest.SameLogits(t, "adjacent rotation of permuted kernels differs", decodertest.Forward(t, backend, permuted, &adj, tokens), want)
	// And the permutation matters: the half rotation of the permuted kernels is another model.
	if diff := decodertest.MaxAbsDiff(decodertest.Forward(t, backend, permuted, m, tokens)[5], want[5]); diff < 1e-3 {
		t.Errorf("the permuted kernels with the half rotation give the same logits (%g): the test checks nothing", diff)
	}
}

func hasSuffix(s, suffix string) bool {
	return len(s) >= len(suffix) && s[len(s)-len(suffix):] == suffix
}

// TestGroupedQueryOrder: 4 query heads on 2 key/value heads equal 4 heads whose key/value
// kernels repeat each key/value head for its 2 query heads (Hugging Face's repeat_kv).
func TestGroupedQueryOrder(t *testing.T) {
	backend := testutil.Backend(t)
	ctx, m := randomModel(t, backend, tiny, 5)
	mha := tiny
	mha.KVHeads = tiny.Heads
	d, groups := tiny.HeadDim, tiny.Heads/tiny.KVHeads
	repeated := copyContext(t, ctx, func(scope string, w [][]float32) [][]float32 {
		if !hasSuffix(scope, "/attn_k/dense") && !hasSuffix(scope, "/attn_v/dense") {
			return w
		}
		out := make([][]float32, len(w))
		for r := range w {
			for h := 0; h < mha.KVHeads; h++ {
				kv := h / groups
				out[r] = append(out[r], w[r][kv*d:(kv+1)*d]...)
			}
		}
		return out
	})
	mm, _ := llama.New(mha)
	tokens := []int32{1, 5, 9, 2}
	want := decodertest.Forward(t, backend, ctx, m, tokens)
	decodertest.SameLogits(t, "GQA differs from repeated-KV MHA", decodertest.Forward(t, backend, repeated, mm, tokens), want)
}

// TestRMSNorm checks the block's first normalization by hand through a model with one layer
// whose attention and FFN are zero: the logits are then RMSNorm(RMSNorm(e)·g)... with unit gains
// and tied embeddings, logits_v = <n(e_t), e_v>, n(x) = x / sqrt(mean(x²) + eps).
func TestRMSNorm(t *testing.T) {
	backend := testutil.Backend(t)
	cfg := tiny
	cfg.Layers = 1
	ctx, m := randomModel(t, backend, cfg, 6)
	zeroed := copyContext(t, ctx, func(scope string, w [][]float32) [][]float32 {
		out := make([][]float32, len(w))
		for r := range w {
			out[r] = make([]float32, len(w[r]))
		}
		return out
	})
	emb := zeroed.InspectVariable("/token_embd", "embeddings").MustValue().Value().([][]float32)
	got := decodertest.Forward(t, backend, zeroed, m, []int32{7})[0]
	e := emb[7]
	ms := 0.0
	for _, x := range e {
		ms += float64(x) * float64(x)
	}
	scale := 1 / math.Sqrt(ms/float64(len(e))+cfg.RMSNormEps)
	for v := 0; v < cfg.VocabSize; v++ {
		want := 0.0
		for i := range e {
			want += float64(e[i]) * scale * float64(emb[v][i])
		}
		if math.Abs(float64(got[v])-want) > 1e-4*math.Max(1, math.Abs(want)) {
			t.Fatalf("logit %d = %g, want %g", v, got[v], want)
		}
	}
}
