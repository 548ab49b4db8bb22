package models_test

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
)

func TestStridedWindows(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		n, maxLength, stride int
		want                 []models.Window
	}{
		{"reference rule", 1024, 513, 512, []models.Window{{0, 513, 1}, {512, 1024, 513}}},
		{"one window", 10, 16, 8, []models.Window{{0, 10, 1}}},
		{"disjoint", 9, 3, 3, []models.Window{{0, 3, 1}, {3, 6, 4}, {6, 9, 7}}},
		{"overlapping", 10, 6, 2, []models.Window{{0, 6, 1}, {2, 8, 6}, {4, 10, 8}}},
		{"last window short", 7, 4, 3, []models.Window{{0, 4, 1}, {3, 7, 4}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := models.StridedWindows(tc.n, tc.maxLength, tc.stride)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("StridedWindows(%d, %d, %d) = %v, want %v", tc.n, tc.maxLength, tc.stride, got, tc.want)
			}
			// Every token but the first is scored once; disjoint windows cannot score their first.
			scored := make([]int, tc.n)
			for _, w := range got {
				for i := w.FirstTarget; i < w.End; i++ {
					scored[i]++
				}
			}
			for i := 1; i < tc.n; i++ {
				want := 1
				if tc.stride == tc.maxLength && i%tc.stride == 0 {
					want = 0
				}
				if scored[i] != want {
					t.Errorf("token %d scored %d times", i, scored[i])
				}
			}
		})
	}
	for _, bad := range [][3]int{{1, 4, 2}, {10, 1, 1}, {10, 4, 0}, {10, 4, 5}} {
		if _, err := models.StridedWindows(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("StridedWindows%v: no error", bad)
		}
	}
}

func TestPerplexityAndCosine(t *testing.T) {
	// exp(mean(ln 2, ln 8)) = exp(ln 4) = 4.
	if got := models.Perplexity([]float64{math.Log(2), math.Log(8)}); math.Abs(got-4) > 1e-12 {
		t.Errorf("Perplexity = %v, want 4", got)
	}
	if got := models.Perplexity(nil); !math.IsNaN(got) {
		t.Errorf("Perplexity(nil) = %v, want NaN", got)
	}
	for _, tc := range []struct {
		a, b []float32
		want float64
	}{
		{[]float32{1, 0}, []float32{0, 3}, 0},
		{[]float32{1, 1}, []float32{2, 2}, 1},
		{[]float32{3, 4}, []float32{-4, -3}, -24.0 / 25},
	} {
		if got := models.Cosine(tc.a, tc.b); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Cosine(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	if got := models.Cosine([]float32{1}, []float32{1, 2}); !math.IsNaN(got) {
		t.Errorf("Cosine of different lengths = %v, want NaN", got)
	}
}

// uniformLM is a LanguageModel whose logits are all zero: every token has probability 1/vocab,
// so each NLL is ln(vocab).
type uniformLM struct{ vocab, contextLength int }

func (m uniformLM) DecodeSpec() models.DecodeSpec {
	return models.DecodeSpec{VocabSize: m.vocab, ContextLength: m.contextLength, Layers: 1, KVHeads: 1, HeadDim: 1}
}

func (m uniformLM) Step(ctx *context.Context, tokens, last *graph.Node, cache *models.KVCache) *graph.Node {
	return graph.Zeros(tokens.Graph(), shapes.Make(dtypes.Float32, tokens.Shape().Dim(0), m.vocab))
}

func (m uniformLM) Forward(ctx *context.Context, tokens *graph.Node) *graph.Node {
	return graph.Zeros(tokens.Graph(), shapes.Make(dtypes.Float32, tokens.Shape().Dim(0), tokens.Shape().Dim(1), m.vocab))
}

// TestEvaluatorContextLength: a window longer than the model's context length is an error naming
// both (scoring it would run the model past the positions it was trained for), as a Generator's
// MaxLen is; windows that fit are scored.
func TestEvaluatorContextLength(t *testing.T) {
	backend := testutil.Backend(t)
	const vocab = 5
	ids := []int{0, 1, 2, 3, 4, 0, 1, 2, 3, 4}
	for _, tc := range []struct {
		contextLength int
		windows       []models.Window
		want          string // "": scored
	}{
		{8, []models.Window{{Start: 0, End: 8, FirstTarget: 1}, {Start: 2, End: 10, FirstTarget: 8}}, ""},
		{0, []models.Window{{Start: 0, End: 10, FirstTarget: 1}}, ""}, // unknown: no bound
		{8, []models.Window{{Start: 0, End: 9, FirstTarget: 1}}, "context length 8"},
	} {
		e, err := models.NewEvaluator(backend, context.New(), uniformLM{vocab, tc.contextLength})
		if err != nil {
			t.Fatal(err)
		}
		nll, err := e.NLL(ids, tc.windows)
		e.Finalize()
		if tc.want != "" {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("context length %d, windows %v: error %v; want one naming %q", tc.contextLength, tc.windows, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Fatalf("context length %d, windows %v: %v", tc.contextLength, tc.windows, err)
		}
		if len(nll) != len(ids)-1 {
			t.Errorf("%d NLLs; want %d", len(nll), len(ids)-1)
		}
		for i, v := range nll {
			if math.Abs(v-math.Log(vocab)) > 1e-12 {
				t.Errorf("nll[%d] = %g; want ln %d = %g", i, v, vocab, math.Log(vocab))
			}
		}
	}
}

// wideLM is a uniformLM whose Forward returns more logits than its DecodeSpec's vocabulary.
type wideLM struct{ uniformLM }

func (m wideLM) Forward(ctx *context.Context, tokens *graph.Node) *graph.Node {
	return graph.Zeros(tokens.Graph(), shapes.Make(dtypes.Float32, tokens.Shape().Dim(0), tokens.Shape().Dim(1), m.vocab+3))
}

// TestNLLLogitsShape: logits that do not match the model's DecodeSpec are an error naming models.NLL
// and both shapes, not a shape mismatch deep inside GoMLX's Where.
func TestNLLLogitsShape(t *testing.T) {
	e, err := models.NewEvaluator(testutil.Backend(t), context.New(), wideLM{uniformLM{vocab: 5}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Finalize()
	_, err = e.NLL([]int{0, 1, 2, 3}, []models.Window{{Start: 0, End: 4, FirstTarget: 1}})
	if err == nil || !strings.Contains(err.Error(), "models.NLL") || !strings.Contains(err.Error(), "[1, 4, 5]") {
		t.Errorf("NLL with logits of 8 for a vocabulary of 5: error %v; want one naming models.NLL and the accepted [1, 4, 5]", err)
	}
}

// TestNLLOutsideVocabulary: models.NLL, which cannot return an error from inside a graph, gives
// NaN for a target outside the vocabulary (it gave 0, a probability of 1, lowering the
// perplexity); targets inside it get ln(vocab) from the uniform model.
func TestNLLOutsideVocabulary(t *testing.T) {
	const vocab = 5
	for _, tc := range []struct {
		name    string
		tokens  any
		outside []bool // of each target, tokens[1:]
	}{
		{"int32", [][]int32{{0, 5, 2, -1, 4}}, []bool{true, false, true, false}},
		{"int64", [][]int64{{0, 5, 2, -1, 4 + 1<<32}}, []bool{true, false, true, true}}, // 2^32+4 is 4 once cut to 32 bits
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := context.MustExecOnce(testutil.Backend(t), context.New(), func(ctx *context.Context, tokens *graph.Node) *graph.Node {
				return models.NLL(ctx, uniformLM{vocab: vocab}, tokens)
			}, tc.tokens)
			got := out.Value().([][]float64)[0]
			for k, outside := range tc.outside {
				if outside && !math.IsNaN(got[k]) || !outside && math.Abs(got[k]-math.Log(vocab)) > 1e-12 {
					t.Errorf("nll[%d] = %v; want %s", k, got[k], map[bool]string{true: "NaN (outside the vocabulary)", false: "ln 5"}[outside])
				}
			}
		})
	}
}

// pokedLM is a uniformLM whose logit for id at position pos is value.
type pokedLM struct {
	uniformLM
	pos, id int
	value   float64
}

func (m pokedLM) Forward(ctx *context.Context, tokens *graph.Node) *graph.Node {
	g := tokens.Graph()
	shape := shapes.Make(dtypes.Float32, tokens.Shape().Dim(0), tokens.Shape().Dim(1), m.vocab)
	at := graph.LogicalAnd(graph.Equal(graph.Iota(g, shape, 1), graph.Scalar(g, dtypes.Float32, m.pos)),
		graph.Equal(graph.Iota(g, shape, 2), graph.Scalar(g, dtypes.Float32, m.id)))
	return graph.Where(at, graph.Scalar(g, dtypes.Float32, m.value), graph.Zeros(g, shape))
}

// TestEvaluatorNonFinite: a NaN or infinite logit makes the NLL of the token it predicts NaN;
// the Evaluator reports it, naming the window and the id, as a Generator reports NaN logits (a
// perplexity of NaN was printed silently); a NaN where no target is scored is not looked at. A
// target logit of -Inf among finite ones gives the NLL +Inf (probability 0), returned as is.
func TestEvaluatorNonFinite(t *testing.T) {
	const vocab = 5
	ids := []int{0, 1, 2, 3, 4, 0}
	window := models.Window{Start: 1, End: 6, FirstTarget: 3} // positions 1..5, scoring ids[3:]
	for _, tc := range []struct {
		name    string
		pos, id int // in the window
		value   float64
		want    string // "": scored, the NLL of ids[1+pos+1] wantNLL, the others ln(vocab)
		wantNLL float64
	}{
		{"NaN", 2, 0, math.NaN(), "the NLL of ids[4] is NaN: the logits predicting it hold a NaN or an infinity", 0},
		{"+Inf", 1, 4, math.Inf(1), "the NLL of ids[3] is NaN: the logits predicting it hold a NaN or an infinity", 0},
		{"NaN before the first target", 0, 0, math.NaN(), "", math.Log(vocab)},
		{"-Inf target", 2, 4, math.Inf(-1), "", math.Inf(1)},
		{"-Inf elsewhere", 2, 0, math.Inf(-1), "", math.Log(vocab - 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := models.NewEvaluator(testutil.Backend(t), context.New(), pokedLM{uniformLM{vocab: vocab}, tc.pos, tc.id, tc.value})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Finalize()
			nll, err := e.NLL(ids, []models.Window{window})
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "window {Start:1 End:6 FirstTarget:3}") {
					t.Errorf("NLL = %v, error %v; want one naming the window and %q", nll, err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(nll) != 3 {
				t.Fatalf("%d NLLs; want 3", len(nll))
			}
			for k, v := range nll { // of ids[3+k], predicted at window position k+1
				want := math.Log(vocab)
				if k+1 == tc.pos {
					want = tc.wantNLL
				}
				if v != want && math.Abs(v-want) > 1e-12 {
					t.Errorf("NLL of ids[%d] = %v; want %v", 3+k, v, want)
				}
			}
		})
	}
}

// TestNLLManyWindowLengths: an Evaluator scores windows of more distinct lengths than GoMLX's
// default bound of compiled programs (32), one program each (the 33rd length failed).
func TestNLLManyWindowLengths(t *testing.T) {
	const vocab, lengths = 5, 34
	e, err := models.NewEvaluator(testutil.Backend(t), context.New(), uniformLM{vocab: vocab})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Finalize()
	ids := make([]int, lengths+1)
	var windows []models.Window
	for n := 2; n <= lengths+1; n++ {
		windows = append(windows, models.Window{Start: 0, End: n, FirstTarget: n - 1})
	}
	nll, err := e.NLL(ids, windows)
	if err != nil {
		t.Fatalf("windows of %d lengths: %v", len(windows), err)
	}
	for i, v := range nll {
		if math.Abs(v-math.Log(vocab)) > 1e-12 {
			t.Fatalf("nll[%d] = %g; want ln %d", i, v, vocab)
		}
	}
}
