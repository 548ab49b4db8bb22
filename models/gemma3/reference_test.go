package gemma3_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/refdata"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/tokenizer"
)

// TestLlamaCppLogits runs the Gemma-3 270M Q4_K_M file of make assets, every tensor as the file
// stores it, on the first window of the reference's ids (513 tokens: BOS and GPL-3) and compares
// the logits at seven positions with llama.cpp's run of the same values (the file converted to
// F32 by llama.cpp; reference/testdata/llamacpp): its 20 largest logits at each position, by id,
// within 0.25 % of the largest logit (llama.cpp keeps the attention's keys and values in half
// precision and reads GELU from a half-precision table), and the same argmax. Position 512 is
// the first whose sliding-window layers no longer see position 0.
func TestLlamaCppLogits(t *testing.T) {
	path := assets.Require(t, assets.Gemma3)
	backend := testutil.Backend(t)
	if backend.String() == simplego.BackendName {
		testutil.Slow(t)
	}
	var index struct {
		Files map[string]struct {
			F32 struct {
				Top struct {
					Positions []int `json:"positions"`
				} `json:"window0_top20"`
			} `json:"f32_dequantized"`
		} `json:"files"`
	}
	if err := refdata.JSON(&index, "llamacpp", "index.json"); err != nil {
		t.Fatal(err)
	}
	positions := index.Files["gemma3/Q4_K_M"].F32.Top.Positions
	ids, err := refdata.Ints("llamacpp", "gemma3_eval_ids.npy")
	if err != nil {
		t.Fatal(err)
	}
	wantIDs := decodertest.Reference(t, "llamacpp", "gemma3_f32_w0_top20_ids.npy")
	wantLogits := decodertest.Reference(t, "llamacpp", "gemma3_f32_w0_top20_logits.npy")
	ctx, m, _ := loadFile(t, decodertest.OpenFile(t, path), models.FilePreset, true, backend)
	tokens := make([]int32, 513)
	for i := range tokens {
		tokens[i] = int32(ids[i])
	}
	picked := make([]int32, len(positions))
	for i, p := range positions {
		picked[i] = int32(p)
	}
	out := context.MustExecOnce(backend, ctx.Reuse(), func(ctx *context.Context, tokens, picked *graph.Node) *graph.Node {
		logits := graph.Squeeze(m.Forward(ctx, tokens), 0) // [seq, vocab]
		return graph.Gather(logits, graph.ExpandAxes(picked, -1))
	}, [][]int32{tokens}, picked)
	rows := out.Value().([][]float32)
	for i, p := range positions {
		want, wantTop := wantLogits.Row(i), wantIDs.Row(i)
		bound := 2.5e-3 * math.Abs(want[0])
		worst := 0.0
		for k, id := range wantTop {
			worst = math.Max(worst, math.Abs(float64(rows[i][int(id)])-want[k]))
		}
		t.Logf("position %d: max |logit - llama.cpp| over its top 20: %.4f (largest logit %.2f)", p, worst, want[0])
		if worst > bound {
			t.Errorf("position %d: logits differ from llama.cpp's by up to %.4f; the bound is %.4f", p, worst, bound)
		}
		if got := models.Argmax(rows[i]); got != int(wantTop[0]) {
			t.Errorf("position %d: argmax %d, llama.cpp's %d", p, got, int(wantTop[0]))
		}
	}
}

// TestLlamaCppGreedy: greedy decoding of the Gemma-3 file (every tensor as stored, the cache
// growing with the window) gives llama.cpp's tokens for the reference's prompts, a chat turn and
// a plain sentence, tokenized by quanta as llama.cpp tokenizes them.
func TestLlamaCppGreedy(t *testing.T) {
	testutil.Slow(t) // about a minute on XLA CPU: each step decodes the Q8_0 head
	path := assets.Require(t, assets.Gemma3)
	backend := testutil.Backend(t)
	var index struct {
		Files map[string]struct {
			Greedy []struct {
				Prompt    string `json:"prompt"`
				PromptIDs []int  `json:"prompt_ids"`
				IDs       []int  `json:"ids"`
			} `json:"greedy"`
		} `json:"files"`
	}
	if err := refdata.JSON(&index, "llamacpp", "index.json"); err != nil {
		t.Fatal(err)
	}
	f := decodertest.OpenFile(t, path)
	tok, err := tokenizer.NewBPEFromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, m, _ := loadFile(t, f, models.FilePreset, true, backend)
	gen, err := models.NewGenerator(backend, ctx, m, models.GeneratorOptions{MaxLen: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Finalize()
	cases := index.Files["gemma3/Q4_K_M"].Greedy
	if len(cases) == 0 {
		t.Fatal("the reference has no greedy tokens for gemma3/Q4_K_M")
	}
	for _, c := range cases {
		ids := tok.Encode(c.Prompt, tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true})
		if fmt.Sprint(ids) != fmt.Sprint(c.PromptIDs) {
			t.Errorf("prompt %q: ids %v, llama.cpp's %v", c.Prompt, ids, c.PromptIDs)
			continue
		}
		got, err := gen.Generate(ids, models.GenerateOptions{MaxNewTokens: len(c.IDs)})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%q -> %q", c.Prompt, tok.Decode(got))
		if fmt.Sprint(got) != fmt.Sprint(c.IDs) {
			t.Errorf("prompt %q: greedy tokens %v, llama.cpp's %v", c.Prompt, got, c.IDs)
		}
	}
}
