package llama

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
)

// TestQuantizedHeadPerplexity evaluates the reference's two GPL-3 windows with the tied
// embedding table, which is also the output head, stored int8 (a scale per row), the projections
// float32 or int8, all fused: the perplexity must stay within 0.5 % of the reference's figure for
// the same projections with the float head (transformers' f32, the weight-only int8_wo).
// The float table holds the file's Q8_0 values, llama.cpp's own head; the int8 head re-quantizes
// them with one scale per row of 576 (docs/real-models.md has the figures, NF4 heads included).
func TestQuantizedHeadPerplexity(t *testing.T) {
	testutil.Slow(t)
	index, ids := loadReference(t)
	backend := testutil.Backend(t)
	windows, err := models.StridedWindows(len(ids), 513, 512)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ preset, variant string }{{"f32", "f32"}, {"int8", "int8_wo"}} {
		t.Run(tc.preset, func(t *testing.T) {
			rules, err := models.Preset(tc.preset)
			if err != nil {
				t.Fatal(err)
			}
			head, err := models.TableRule("/"+models.EmbeddingScope, "int8")
			if err != nil {
				t.Fatal(err)
			}
			q := models.MustNewQuantizer(append([]models.Rule{head}, rules...))
			ctx := context.New()
			m, err := LoadGGUF(ctx, decodertest.OpenFile(t, assets.Require(t, assets.SmolLM2)), LoadOptions{LoadOptions: models.LoadOptions{Backend: backend, Kernel: q.Kernel, Table: q.QuantizeTable, Fuse: q.Fuse}})
			if err != nil {
				t.Fatal(err)
			}
			m.Projection, m.Table = q.Projection, q.Table
			nll := decodertest.NLL(t, backend, ctx, m, ids, windows)
			ppl, ref := models.Perplexity(nll), index.Results[tc.variant].Perplexity
			t.Logf("%s projections, int8 head: perplexity %.4f; float head (reference %s) %.4f: %+.3f %%", tc.preset, ppl, tc.variant, ref, 100*(ppl/ref-1))
			if math.Abs(ppl/ref-1) > 0.005 {
				t.Errorf("%s with the int8 head: perplexity %.4f, beyond 0.5 %% of the float head's %.4f", tc.preset, ppl, ref)
			}
		})
	}
}
