package minilm_test

import (
	"math"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/internal/refdata"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/minilm"
	"github.com/quanta-ml/quanta/tokenizer"
)

// The reference harness's MiniLM vectors (reference/testdata/minilm, reference/README.md):
// transformers' BertModel in float32, each sentence alone, mean pooling and L2 normalisation.

// tolerance is the float32 tolerance of the port relative to the largest magnitude compared:
// 2^-15 (512 units in the last place), for six post-LN layers summed in another order than
// PyTorch's; the measured difference is a few units in the last place (docs/real-models.md).
const tolerance = 1.0 / (1 << 15)

type reference struct {
	texts []string
	ids   [][]int
}

func loadReference(t *testing.T) reference {
	t.Helper()
	var sentences struct {
		Sentences []struct {
			Text string `json:"text"`
			IDs  []int  `json:"ids"`
		} `json:"sentences"`
	}
	if err := refdata.JSON(&sentences, "minilm", "sentences.json"); err != nil {
		t.Skip(err)
	}
	var r reference
	for _, s := range sentences.Sentences {
		r.texts = append(r.texts, s.Text)
		r.ids = append(r.ids, s.IDs)
	}
	return r
}

// embed loads all-MiniLM-L6-v2 through the rules of a preset (with LoadDir's default options
// for "") and embeds the texts in one batch (padded: the model is padding-invariant,
// TestPaddingInvariance).
func embed(t *testing.T, preset string, texts []string) (*context.Context, *minilm.Model, [][]float32) {
	t.Helper()
	dir := assets.Require(t, "minilm", assets.MiniLMWeights, assets.MiniLMConfig, assets.MiniLMTokenizer)
	backend := testutil.Backend(t)
	var opts minilm.LoadOptions
	var q *models.Quantizer
	if preset != "" {
		rules, err := models.Preset(preset)
		if err != nil {
			t.Fatal(err)
		}
		q = models.MustNewQuantizer(rules)
		opts = minilm.LoadOptions{Kernel: q.Kernel, Backend: backend}
	}
	ctx := context.New()
	m, err := minilm.LoadDir(ctx, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if q != nil {
		m.Projection = q.Projection
	}
	tok, err := tokenizer.NewWordPieceFromJSON(assets.Path(assets.MiniLMTokenizer))
	if err != nil {
		t.Fatal(err)
	}
	e, err := minilm.NewEmbedder(backend, ctx, m, tok)
	if err != nil {
		t.Fatal(err)
	}
	v, err := e.Embed(texts)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, m, v
}

// TestReferenceEmbeddings compares the float32 model with transformers: the last hidden state of
// the first sentence and the 32 sentence embeddings, within tolerance.
func TestReferenceEmbeddings(t *testing.T) {
	ref := loadReference(t)
	ctx, m, got := embed(t, "f32", ref.texts)
	want, err := refdata.Load("minilm", "emb_f32.npy")
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i := range got {
		diff, scale := testutil.MaxAbsDiff(testutil.Converted[float64](got[i]), want.Row(i))
		worst = max(worst, diff)
		if diff > tolerance*scale {
			t.Errorf("sentence %d (%.40q): max |diff| %.3g > %.3g", i, ref.texts[i], diff, tolerance*scale)
		}
	}
	t.Logf("embeddings: max |diff| %.3g over %d sentences", worst, len(got))

	hidden, err := refdata.Load("minilm", "f32_sentence0_last_hidden_state.npy")
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int32, len(ref.ids[0]))
	mask := make([]int32, len(ids))
	for i, id := range ref.ids[0] {
		ids[i], mask[i] = int32(id), 1
	}
	out := context.MustExecOnce(testutil.Backend(t), ctx.Reuse(), func(ctx *context.Context, ids, mask *graph.Node) *graph.Node {
		return m.Hidden(ctx, ids, mask)
	}, [][]int32{ids}, [][]int32{mask})
	diff, scale := testutil.MaxAbsDiff(testutil.Float64s(t, out), hidden.Values)
	t.Logf("sentence 0 last hidden state %v: max |diff| %.3g, max |value| %.3g", hidden.Dims, diff, scale)
	if diff > tolerance*scale {
		t.Errorf("sentence 0 last hidden state: max |diff| %.3g > %.3g", diff, tolerance*scale)
	}
}

// TestReferenceCosines embeds the reference's 32 sentences with each quantized preset and
// compares the mean cosine to the float32 embeddings with the reference's figure for the same
// rule: within 0.002 (the target), and each sentence's cosine within 0.01.
func TestReferenceCosines(t *testing.T) {
	testutil.Slow(t)
	ref := loadReference(t)
	var index struct {
		Results map[string]struct {
			Mean float64 `json:"mean_cosine_to_f32"`
		} `json:"results"`
	}
	if err := refdata.JSON(&index, "minilm", "index.json"); err != nil {
		t.Fatal(err)
	}
	_, _, f32 := embed(t, "f32", ref.texts)
	for _, tc := range []struct{ preset, variant string }{
		{"nf4", "nf4"},
		{"nf4-out", "nf4_out"},
		{"int8", "int8_wo"},
		{"int8", "int8_bnb_trainmode"},
	} {
		t.Run(tc.preset+"/"+tc.variant, func(t *testing.T) {
			start := time.Now()
			_, _, got := embed(t, tc.preset, ref.texts)
			perSentence, err := refdata.Load("minilm", "cos_"+tc.variant+".npy")
			if err != nil {
				t.Fatal(err)
			}
			mean, worst := 0.0, 0.0
			for i := range got {
				c := models.Cosine(got[i], f32[i])
				mean += c / float64(len(got))
				worst = max(worst, math.Abs(c-perSentence.Values[i]))
			}
			want := index.Results[tc.variant].Mean
			t.Logf("%s: mean cosine %.6f, reference %s %.6f (%+.6f); largest per-sentence difference %.4f (%s)",
				tc.preset, mean, tc.variant, want, mean-want, worst, time.Since(start).Round(time.Millisecond))
			if math.Abs(mean-want) > 0.002 {
				t.Errorf("%s: mean cosine %.6f, reference %.6f: beyond 0.002", tc.preset, mean, want)
			}
			if worst > 0.01 {
				t.Errorf("%s: a sentence's cosine differs from the reference's by %.4f > 0.01", tc.preset, worst)
			}
		})
	}
}
