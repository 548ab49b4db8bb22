package llama

import (
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/refdata"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
)

// The reference harness's SmolLM2 vectors (reference/testdata/smollm2, reference/README.md):
// transformers' float32 run of the GGUF's dequantized weights on llama.cpp's GPL-3 ids.

// referenceIndex is the part of smollm2/index.json the tests read.
type referenceIndex struct {
	F32Window0 struct {
		Positions []int `json:"positions"`
	} `json:"f32_window0"`
	Eval struct {
		Windows [][2]int `json:"windows"`
	} `json:"eval"`
	Greedy struct {
		PromptIDs []int     `json:"prompt_ids"`
		IDs       []int     `json:"ids"`
		Margins   []float64 `json:"margin_to_second"`
	} `json:"greedy"`
	Results map[string]struct {
		Perplexity float64 `json:"perplexity"`
		MeanNLL    float64 `json:"mean_nll"`
	} `json:"results"`
}

// logitTolerance is the float32 tolerance of the port, relative to the largest magnitude of the
// compared row. float32 rounds to 2^-24 relative; 30 decoder layers whose reductions (up to 1536
// terms, softmaxes over up to 513 keys) are summed in another order than PyTorch's accumulate a
// few hundred roundings of the largest values, so 2^-15 of the largest magnitude (512 units in
// the last place of it) bounds the difference of two correct float32 implementations. The
// measured difference is about 20 units in the last place (docs/real-models.md).
const logitTolerance = 1.0 / (1 << 15)

// loadSmolLM2 loads the real model through rules (nil: float32) on the test's backend, skipping
// the test when the GGUF file is absent.
func loadSmolLM2(t *testing.T, rules []models.Rule) (*context.Context, *Model, *models.Quantizer) {
	t.Helper()
	path := assets.Require(t, assets.SmolLM2)
	backend := testutil.Backend(t)
	q := models.MustNewQuantizer(rules)
	ctx := context.New()
	m, err := LoadGGUF(ctx, decodertest.OpenFile(t, path), LoadOptions{LoadOptions: models.LoadOptions{Backend: backend, Kernel: q.Kernel}})
	if err != nil {
		t.Fatal(err)
	}
	m.Projection = q.Projection
	return ctx, m, q
}

func loadReference(t *testing.T) (referenceIndex, []int) {
	t.Helper()
	var index referenceIndex
	if err := refdata.JSON(&index, "smollm2", "index.json"); err != nil {
		t.Skip(err)
	}
	ids, err := refdata.Ints("smollm2", "eval_ids.npy")
	if err != nil {
		t.Fatal(err)
	}
	return index, ids
}

// TestReferenceLogits compares the float32 model with transformers on the reference's window W0
// from an empty context: the token embeddings exactly (both dequantize the same Q8_0 blocks), the
// output of decoder layer 0 and the logits at the committed positions within logitTolerance, and
// the logits of the reference's top 20 tokens at positions 0..63 (with the same argmax wherever
// the reference's margin exceeds the tolerance). Position 511 needs a 512-token pass: it runs
// with the slow tests only.
func TestReferenceLogits(t *testing.T) {
	index, ids := loadReference(t)
	ctx, m, _ := loadSmolLM2(t, nil)
	var positions []int
	for _, p := range index.F32Window0.Positions {
		if p < 128 || os.Getenv(testutil.TestAllEnv) == "1" {
			positions = append(positions, p)
		}
	}
	seq := max(positions[len(positions)-1]+1, 64)
	tokens := make([]int32, seq)
	for i := range tokens {
		tokens[i] = int32(ids[i])
	}
	start := time.Now()
	out := context.MustExecOnceN(testutil.Backend(t), ctx.Reuse(), func(ctx *context.Context, tokens *graph.Node) []*graph.Node {
		g := tokens.Graph()
		x := m.Embed(ctx, tokens)
		mask := graph.LessOrEqual(graph.Iota(g, shapes.Make(dtypes.Int32, seq, seq), 1), graph.Iota(g, shapes.Make(dtypes.Int32, seq, seq), 0))
		h0 := m.Block(ctx.In(models.LayerScope(0)), x, graph.Iota(g, shapes.Make(dtypes.Int32, seq), 0), mask, nil, 0)
		return []*graph.Node{x, h0, m.Forward(ctx, tokens)}
	}, [][]int32{tokens})
	t.Logf("%d tokens in %s", seq, time.Since(start))
	got := make([][]float64, len(out))
	for i, o := range out {
		got[i] = testutil.Float64s(t, o)
	}
	for i, tc := range []struct {
		file      string
		tolerance float64
	}{
		{"f32_w0_embeddings_rows.npy", 0},
		{"f32_w0_hidden_layer0_rows.npy", logitTolerance},
		{"f32_w0_logits_rows.npy", logitTolerance},
	} {
		want := decodertest.Reference(t, "smollm2", tc.file)
		width := want.Dims[1]
		for r, p := range index.F32Window0.Positions {
			if p >= seq {
				continue
			}
			diff, scale := testutil.MaxAbsDiff(got[i][p*width:(p+1)*width], want.Row(r))
			t.Logf("%s, position %d: max |diff| %.3g, max |value| %.3g (%.1f ulp of it)", tc.file, p, diff, scale, diff/ulp(scale))
			if diff > tc.tolerance*scale {
				t.Errorf("%s, position %d: max |diff| %.3g > %.3g (tolerance %.3g of max |value| %.3g)", tc.file, p, diff, tc.tolerance*scale, tc.tolerance, scale)
			}
		}
	}
	topIDs := decodertest.Reference(t, "smollm2", "f32_w0_top20_ids.npy")
	topLogits := decodertest.Reference(t, "smollm2", "f32_w0_top20_logits.npy")
	vocab := m.VocabSize
	for p := range topIDs.Dims[0] {
		row := got[2][p*vocab : (p+1)*vocab]
		ids, want := topIDs.Row(p), topLogits.Row(p)
		tol := logitTolerance * math.Abs(want[0])
		for k := range ids {
			if d := math.Abs(row[int(ids[k])] - want[k]); d > tol {
				t.Errorf("position %d, token %d: logit %.6g, reference %.6g", p, int(ids[k]), row[int(ids[k])], want[k])
			}
		}
		if best := models.Argmax(row); want[0]-want[1] > 2*tol && best != int(ids[0]) {
			t.Errorf("position %d: argmax %d, reference %d (margin %.3g)", p, best, int(ids[0]), want[0]-want[1])
		}
	}
}

// ulp returns the spacing of float32 numbers at x.
func ulp(x float64) float64 {
	f := float32(x)
	return float64(math.Nextafter32(f, float32(math.Inf(1))) - f)
}

// TestReferenceGreedy decodes the reference's prompt with the cache: the 32 greedy tokens must be
// transformers' (full recompute at each step; its smallest margin between the first two logits is
// 0.108, far above the port's error).
func TestReferenceGreedy(t *testing.T) {
	testutil.Slow(t)
	index, _ := loadReference(t)
	ctx, m, _ := loadSmolLM2(t, nil)
	gen, err := models.NewGenerator(testutil.Backend(t), ctx, m, models.GeneratorOptions{MaxLen: 64})
	if err != nil {
		t.Fatal(err)
	}
	want := index.Greedy.IDs
	got, err := gen.Generate(index.Greedy.PromptIDs, models.GenerateOptions{MaxNewTokens: len(want)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Fatalf("greedy tokens %v, reference %v (first difference at %d)", got, want, i)
		}
	}
}

// perplexityCases maps the presets to the reference's variants (reference/README.md) and says how
// close the perplexity must be: the targets (f32 within 0.5 % of the independent run's
// 21.025, NF4 with blocks along in and int8 within 1 % of bitsandbytes' figures) and tighter
// bounds where the definitions are the same.
var perplexityCases = []struct {
	preset, variant string
	// relTolerance bounds |ppl/ref - 1|, or for the destroyed 1- and 2-bit models |meanNLL/ref - 1|.
	relTolerance float64
	onMeanNLL    bool
}{
	{"f32", "f32", 5e-4, false},
	{"nf4", "nf4", 0.01, false},
	{"nf4-out", "nf4_out", 0.01, false},
	{"int8", "int8_wo", 0.01, false},
	{"int8", "int8_bnb_trainmode", 0.01, false},
	{"ternary", "ternary", 0.02, true},
	{"ternary-scaled", "ternary_scaled", 0.02, true},
	{"binary", "binary", 0.02, true},
	{"binary-scaled", "binary_scaled", 0.02, true},
}

// independentF32 is the f32 perplexity of the independent run quoted by the issue (transformers'
// GGUF tokenizer, hence 0.13 % above the reference's 20.9985 on llama.cpp's ids).
const independentF32 = 21.025

// TestReferencePerplexity evaluates the reference's two GPL-3 windows (1023 predictions) with
// each preset, loaded from the GGUF one tensor at a time, and compares the perplexity with the
// reference's variant; for f32 also each token's NLL (within 2·logitTolerance of the largest
// logit, about 1.5e-3). The pure-Go backend takes minutes per window: there only f32 runs, on the
// first window, and its 512 NLLs are compared with the reference's.
func TestReferencePerplexity(t *testing.T) {
	testutil.Slow(t)
	index, ids := loadReference(t)
	backend := testutil.Backend(t)
	var windows []models.Window
	for _, w := range index.Eval.Windows {
		windows = append(windows, models.Window{Start: w[0], End: w[1], FirstTarget: max(w[0]+1, windows0End(windows))})
	}
	if strided, err := models.StridedWindows(len(ids), 513, 512); err != nil || fmt.Sprint(strided) != fmt.Sprint(windows) {
		t.Fatalf("the reference's windows %v are not StridedWindows(%d, 513, 512) = %v (%v)", windows, len(ids), strided, err)
	}
	pureGo := backend.String() == simplego.BackendName
	if pureGo {
		windows = windows[:1]
	}
	nlls := map[string][]float64{}
	for _, tc := range perplexityCases {
		if pureGo && tc.preset != "f32" {
			continue
		}
		t.Run(tc.preset+"/"+tc.variant, func(t *testing.T) {
			nll, ok := nlls[tc.preset]
			if !ok {
				rules, err := models.Preset(tc.preset)
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				ctx, m, q := loadSmolLM2(t, rules)
				loaded := time.Since(start)
				nll = decodertest.NLL(t, backend, ctx, m, ids, windows)
				nlls[tc.preset] = nll
				t.Logf("%s: projections %d -> %d bytes, load %s, evaluation %s", tc.preset, q.Report().BytesBefore(), q.Report().BytesAfter(),
					loaded.Round(time.Millisecond), (time.Since(start) - loaded).Round(time.Millisecond))
			}
			if pureGo {
				wantNLL := decodertest.Reference(t, "smollm2", "nll_f32.npy")
				diff, _ := testutil.MaxAbsDiff(nll, wantNLL.Values[:len(nll)])
				t.Logf("f32, window %v: max |NLL - reference| %.3g over %d tokens", windows[0], diff, len(nll))
				if diff > 2*logitTolerance*32 {
					t.Errorf("f32: max |NLL - reference| %.3g > %.3g", diff, 2*logitTolerance*32)
				}
				return
			}
			ref := index.Results[tc.variant]
			ppl, mean := models.Perplexity(nll), math.Log(models.Perplexity(nll))
			t.Logf("%s: perplexity %.4f (mean NLL %.5f); reference %s %.4f (%.5f): %+.3f %%", tc.preset, ppl, mean, tc.variant,
				ref.Perplexity, ref.MeanNLL, 100*(ppl/ref.Perplexity-1))
			got, want := ppl, ref.Perplexity
			if tc.onMeanNLL {
				got, want = mean, ref.MeanNLL
			}
			if math.Abs(got/want-1) > tc.relTolerance {
				t.Errorf("%s: %.5g against the reference's %.5g (%s): beyond %.2g relative", tc.preset, got, want, tc.variant, tc.relTolerance)
			}
			if tc.preset != "f32" {
				return
			}
			if d := math.Abs(ppl/independentF32 - 1); d > 0.005 {
				t.Errorf("f32 perplexity %.4f is %.2f %% from the independent run's %.3f; target 0.5 %%", ppl, 100*d, independentF32)
			}
			wantNLL := decodertest.Reference(t, "smollm2", "nll_f32.npy")
			diff, _ := testutil.MaxAbsDiff(nll, wantNLL.Values)
			t.Logf("f32: max |NLL - reference| %.3g over %d tokens", diff, len(nll))
			if diff > 2*logitTolerance*32 {
				t.Errorf("f32: max |NLL - reference| %.3g > %.3g", diff, 2*logitTolerance*32)
			}
		})
	}
}

// windows0End returns the end of the last window (0 for none): where the next window's targets
// start.
func windows0End(windows []models.Window) int {
	if len(windows) == 0 {
		return 0
	}
	return windows[len(windows)-1].End
}
