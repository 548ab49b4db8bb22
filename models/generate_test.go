package models_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX's house style for graph code
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/runtime"
)

// sumDecoder is a decoder whose next token is the sum of the sequence's ids plus one, modulo its
// vocabulary: each step writes id+1 into the cache (as the keys, and its negation as the values,
// of one head of width 1, on each of two layers) and reads them back through the window, masked,
// so the generated tokens are right only if every position was kept and nothing beyond the
// sequence was seen (the prompt's padding, id 0, would add 1 each).
type sumDecoder struct{ vocab, contextLength int }

func (d sumDecoder) DecodeSpec() models.DecodeSpec {
	return models.DecodeSpec{VocabSize: d.vocab, ContextLength: d.contextLength, Layers: 2, KVHeads: 1, HeadDim: 1}
}

func (d sumDecoder) Step(ctx *context.Context, tokens, last *Node, cache *models.KVCache) *Node {
	g := tokens.Graph()
	seq := tokens.Shape().Dim(1)
	x := Reshape(AddScalar(ConvertDType(tokens, dtypes.Float32), 1), 1, 1, seq, 1)
	// The window positions the query at index last sees.
	pick := Equal(Iota(g, shapes.Make(dtypes.Int32, seq, 1), 0), ConvertDType(last, dtypes.Int32))
	visible := ConvertDType(cache.Mask(seq), dtypes.Float32)
	row := ReduceMax(Where(BroadcastToShape(pick, visible.Shape()), visible, ZerosLike(visible)), 0)
	var sum *Node
	for layer := range cache.Layers() {
		keys, values := cache.Update(layer, x, Neg(x))
		keys, values = SliceAxis(keys, 2, AxisRange(0, cache.Window())), SliceAxis(values, 2, AxisRange(0, cache.Window()))
		keys, values = ConvertDType(keys, dtypes.Float32), ConvertDType(values, dtypes.Float32)          // a float16 cache
		s := Sub(ReduceAllSum(Mul(Reshape(keys, -1), row)), ReduceAllSum(Mul(Reshape(values, -1), row))) // 2·sum
		if sum == nil {
			sum = s
		} else {
			sum = Add(sum, s)
		}
	}
	sum = DivScalar(sum, 4)
	next := Sub(sum, MulScalar(Floor(DivScalar(sum, float64(d.vocab))), float64(d.vocab)))
	ids := Iota(g, shapes.Make(dtypes.Float32, 1, d.vocab), 1)
	return Neg(Square(Sub(ids, next)))
}

// nanDecoder is sumDecoder with logits of NaN, as a model with corrupt weights gives.
type nanDecoder struct{ sumDecoder }

func (d nanDecoder) Step(ctx *context.Context, tokens, last *Node, cache *models.KVCache) *Node {
	zeros := ZerosLike(d.sumDecoder.Step(ctx, tokens, last, cache))
	return Div(zeros, zeros)
}

// sumContinuation is sumDecoder's greedy continuation of prompt, n tokens.
func sumContinuation(prompt []int, vocab, n int) []int {
	sum := 0
	for _, id := range prompt {
		sum += id + 1
	}
	var out []int
	for range n {
		next := sum % vocab
		out = append(out, next)
		sum += next + 1
	}
	return out
}

// TestGenerator drives sumDecoder through both cache modes and both cache dtypes (its ids are
// exact in float16), windows that grow during the generation, a prompt longer than the smallest
// window and one that fills a padded bucket.
func TestGenerator(t *testing.T) {
	backend := testutil.Backend(t)
	const vocab = 97
	d := sumDecoder{vocab: vocab, contextLength: 200}
	for _, mc := range []struct {
		mode  models.CacheMode
		dtype dtypes.DType
	}{{models.GrowCache, dtypes.Float32}, {models.FullCache, dtypes.Float32}, {models.GrowCache, dtypes.Float16}} {
		mode := mc.mode
		for _, tc := range []struct {
			prompt, maxLen, minWindow, newTokens int
		}{
			{3, 40, 4, 37},  // prompt bucket 16 in window 16, then windows 32 and 40, to MaxLen
			{20, 60, 8, 40}, // prompt bucket 32 in window 32, then 60
			{5, 5 + 1, 0, 1},
		} {
			t.Run(fmt.Sprintf("%s/%s/prompt=%d/maxlen=%d", mode, mc.dtype, tc.prompt, tc.maxLen), func(t *testing.T) {
				if mc.dtype == dtypes.Float16 && runtime.IsGo(backend) {
					t.Skipf("backend %s has no %s", backend.Name(), mc.dtype)
				}
				gen, err := models.NewGenerator(backend, context.New(), d,
					models.GeneratorOptions{MaxLen: tc.maxLen, MinWindow: tc.minWindow, Cache: mode, CacheDType: mc.dtype})
				if err != nil {
					t.Fatal(err)
				}
				defer gen.Finalize()
				prompt := make([]int, tc.prompt)
				for i := range prompt {
					prompt[i] = (7*i + 3) % vocab
				}
				got, err := gen.Generate(prompt, models.GenerateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if want := sumContinuation(prompt, vocab, tc.newTokens); !slices.Equal(got, want) {
					t.Errorf("generated %v; want %v", got, want)
				}
				if st := gen.Stats(); st.PromptTokens != tc.prompt || st.DecodeSteps != tc.newTokens-1 {
					t.Errorf("stats %+v; want %d prompt tokens and %d decoding steps", st, tc.prompt, tc.newTokens-1)
				}
			})
		}
	}
}

// TestGeneratorOptions: MaxNewTokens, Stop, breaking out of Stream, and the same tokens for the
// same seed.
func TestGeneratorOptions(t *testing.T) {
	backend := testutil.Backend(t)
	d := sumDecoder{vocab: 11, contextLength: 64}
	gen, err := models.NewGenerator(backend, context.New(), d, models.GeneratorOptions{MaxLen: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Finalize()
	prompt := []int{1, 2}
	want := sumContinuation(prompt, 11, 10) // 5 0 1 3 7 4 9 8 6 2
	got, err := gen.Generate(prompt, models.GenerateOptions{MaxNewTokens: 10})
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Generate = %v, %v; want %v", got, err, want)
	}
	got, _ = gen.Generate(prompt, models.GenerateOptions{MaxNewTokens: 10, Stop: []int{3}})
	if !slices.Equal(got, want[:4]) {
		t.Errorf("with Stop 3: %v; want %v", got, want[:4])
	}
	var streamed []int
	for id, err := range gen.Stream(prompt, models.GenerateOptions{MaxNewTokens: 10}) {
		if err != nil {
			t.Fatal(err)
		}
		streamed = append(streamed, id)
		if len(streamed) == 3 {
			break
		}
	}
	if !slices.Equal(streamed, want[:3]) || gen.Stats().DecodeSteps != 2 {
		t.Errorf("streamed %v with %d steps; want %v after 2 steps", streamed, gen.Stats().DecodeSteps, want[:3])
	}
	sampled := func(seed uint64) []int {
		out, err := gen.Generate(prompt, models.GenerateOptions{MaxNewTokens: 20, Sampling: models.Sampling{Temperature: 8, Seed: seed}})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	checkSeeded(t, 1, sampled)
}

func TestGeneratorErrors(t *testing.T) {
	backend := testutil.Backend(t)
	d := sumDecoder{vocab: 11, contextLength: 64}
	cases := []struct {
		opts models.GeneratorOptions
		want string
	}{
		{models.GeneratorOptions{MaxLen: 0}, "MaxLen 0"},
		// A sequence of one token holds no generated token: every Generate would fail.
		{models.GeneratorOptions{MaxLen: 1}, "MaxLen 1; accepted: 2"},
		{models.GeneratorOptions{MaxLen: 65}, "MaxLen 65"},
		{models.GeneratorOptions{MaxLen: 8, MinWindow: -1}, "MinWindow -1"},
		{models.GeneratorOptions{MaxLen: 8, Cache: models.CacheMode(7)}, "Cache"},
		{models.GeneratorOptions{MaxLen: 8, CacheDType: dtypes.BFloat16}, "CacheDType BFloat16"},
	}
	if runtime.IsGo(backend) { // no float16
		cases = append(cases, struct {
			opts models.GeneratorOptions
			want string
		}{models.GeneratorOptions{MaxLen: 8, CacheDType: dtypes.Float16}, "has no Float16"})
	}
	for _, tc := range cases {
		if _, err := models.NewGenerator(backend, context.New(), d, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v; want one naming %q", tc.opts, err, tc.want)
		}
	}
	gen, err := models.NewGenerator(backend, context.New(), d, models.GeneratorOptions{MaxLen: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Finalize()
	for _, tc := range []struct {
		prompt []int
		opts   models.GenerateOptions
		want   string
	}{
		{nil, models.GenerateOptions{}, "prompt of 0 tokens"},
		{make([]int, 8), models.GenerateOptions{}, "prompt of 8 tokens"},
		{[]int{1, 11}, models.GenerateOptions{}, "token id 11"},
		{[]int{1}, models.GenerateOptions{MaxNewTokens: -1}, "MaxNewTokens"},
		// A stop id the model cannot produce would never end the generation.
		{[]int{1}, models.GenerateOptions{Stop: []int{2, 11}}, "stop id 11 outside the vocabulary of 11"},
		{[]int{1}, models.GenerateOptions{Stop: []int{-1}}, "stop id -1 outside the vocabulary of 11"},
		{[]int{1}, models.GenerateOptions{Sampling: models.Sampling{TopP: 2}}, "TopP"},
	} {
		if _, err := gen.Generate(tc.prompt, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("prompt %v, %+v: error %v; want one naming %q", tc.prompt, tc.opts, err, tc.want)
		}
	}
	// NaN logits name the NaN, and with a float16 cache its range (keys or values beyond it are
	// infinite, and their attention NaN).
	for _, cacheDType := range []dtypes.DType{dtypes.Float32, dtypes.Float16} {
		nanGen, err := models.NewGenerator(backend, context.New(), nanDecoder{d}, models.GeneratorOptions{MaxLen: 8, CacheDType: cacheDType})
		if err != nil && cacheDType == dtypes.Float16 && strings.Contains(err.Error(), "has no Float16") {
			continue // the pure-Go backend
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []models.Sampling{{}, {Temperature: 1, TopP: 0.9}} {
			_, err := nanGen.Generate([]int{1}, models.GenerateOptions{Sampling: s})
			if err == nil || !strings.Contains(err.Error(), "NaN") || strings.Contains(err.Error(), "65504") != (cacheDType == dtypes.Float16) {
				t.Errorf("NaN logits, %s cache, %+v: error %v; want one naming the NaN (and float16's range for a float16 cache)", cacheDType, s, err)
			}
		}
		nanGen.Finalize()
	}
	if _, err := models.ParseCacheMode("half"); err == nil {
		t.Error("ParseCacheMode(half): no error")
	}
}

// TestGeneratorMaxLenUnknownContext: a decoder of unknown context length (a GGUF file without
// context_length) and a huge MaxLen (quanta run -maxlen) must be an error naming MaxLen, not a
// loop whose window doubling overflows int and appends windows until the process is killed.
func TestGeneratorMaxLenUnknownContext(t *testing.T) {
	backend := testutil.Backend(t)
	d := sumDecoder{vocab: 11} // ContextLength 0: unknown
	for _, maxLen := range []int{math.MaxInt, 1 << 62, 1 << 40} {
		var err error
		testutil.Within(t, 3*time.Second, fmt.Sprintf("NewGenerator of MaxLen %d with an unknown context length", maxLen), func() {
			var gen *models.Generator
			if gen, err = models.NewGenerator(backend, context.New(), d, models.GeneratorOptions{MaxLen: maxLen}); err == nil {
				gen.Finalize()
			}
		})
		if err == nil || !strings.Contains(err.Error(), "MaxLen") {
			t.Errorf("MaxLen %d with an unknown context length: error %v; want one naming MaxLen", maxLen, err)
		}
	}
}

// wideDecoder is sumDecoder with the key/value heads of a decoder built in code with huge widths
// (llama.Config's counts may each reach 2^31 − 1).
type wideDecoder struct{ sumDecoder }

func (d wideDecoder) DecodeSpec() models.DecodeSpec {
	spec := d.sumDecoder.DecodeSpec()
	spec.KVHeads, spec.HeadDim = 1<<30, 1<<30
	return spec
}

// TestGeneratorCacheOverflow: caches whose element count overflows int64 must be an error naming
// MaxLen, not a shape XLA's compiler aborts the process on (SIGABRT: "overflow in static extent
// product") when the first generation builds them.
func TestGeneratorCacheOverflow(t *testing.T) {
	backend := testutil.Backend(t)
	for _, cache := range []models.CacheMode{models.GrowCache, models.FullCache} {
		gen, err := models.NewGenerator(backend, context.New(), wideDecoder{sumDecoder{vocab: 11}}, models.GeneratorOptions{MaxLen: 8, Cache: cache})
		if err == nil {
			_, err = gen.Generate([]int{1}, models.GenerateOptions{})
			gen.Finalize()
		}
		if err == nil || !strings.Contains(err.Error(), "MaxLen 8: caches of 2 × 2 layers × 1073741824 key/value heads") {
			t.Errorf("%s cache: error %v; want one naming MaxLen and the caches", cache, err)
		}
	}
}

// TestGeneratorPromptLengthsPastTheLastBucket: prompts whose power-of-two bucket is longer than
// MaxLen are padded to MaxLen, so that they share one compiled step: with one graph per prompt
// length, the step of the last window (MaxLen 100, windows 64 and 100) failed from the 33rd
// length on with GoMLX's "maximum cache size of 32 reached".
func TestGeneratorPromptLengthsPastTheLastBucket(t *testing.T) {
	backend := testutil.Backend(t)
	const vocab, maxLen = 97, 100
	gen, err := models.NewGenerator(backend, context.New(), sumDecoder{vocab: vocab, contextLength: 128}, models.GeneratorOptions{MaxLen: maxLen})
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Finalize()
	compilations := 0
	for n := 65; n < maxLen; n++ { // buckets of 128 > MaxLen
		prompt := make([]int, n)
		for i := range prompt {
			prompt[i] = (7*i + 3) % vocab
		}
		got, err := gen.Generate(prompt, models.GenerateOptions{MaxNewTokens: 2})
		if err != nil {
			t.Fatalf("a prompt of %d tokens: %v", n, err)
		}
		if want := sumContinuation(prompt, vocab, min(2, maxLen-n)); !slices.Equal(got, want) {
			t.Errorf("a prompt of %d tokens: generated %v; want %v", n, got, want)
		}
		compilations += gen.Stats().Compilations
	}
	// The empty cache and the prompt's step once, one decoding step.
	if compilations > 3 {
		t.Errorf("%d compilations for prompts of 65..99 tokens; want at most 3 (one prompt step shared by all)", compilations)
	}
}
