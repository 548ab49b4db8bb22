package gemma3_test

import (
	"math"
	"testing"

	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/gemma3"
)

// TestStepMatchesForward: a prompt run in chunks against the cache, then one token at a time,
// gives the logits of the full-sequence pass at the same positions, the sliding-window layers
// included (the sequence is longer than their window), with the attention over a window of the
// cache (its leading 12 of 16 positions).
func TestStepMatchesForward(t *testing.T) {
	backend := testutil.Backend(t)
	ctx, m, _ := load(t, tinyGGUF(nil, ""), "f32", false)
	tokens := []int32{3, 17, 5, 29, 11, 2, 38, 7, 40, 8}
	decodertest.StepMatchesForward(t, backend, ctx, m, tokens, [][2]int{{0, 3}, {3, 6}, {6, 7}, {7, 8}, {8, 9}, {9, 10}}, 16, 12)
}

// TestGenerateMatchesForward: greedy decoding with the cache picks the argmax of the full pass.
func TestGenerateMatchesForward(t *testing.T) {
	backend := testutil.Backend(t)
	ctx, m, _ := load(t, tinyGGUF(nil, ""), "f32", false)
	gen, err := models.NewGenerator(backend, ctx, m, models.GeneratorOptions{MaxLen: 24, MinWindow: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Finalize()
	decodertest.GreedyMatchesForward(t, backend, ctx, m, gen, []int{5, 9, 13}, 14)
}

// TestSlidingWindow: with one block, a sliding-window layer's logits at a position p do not
// depend on the tokens before p−3 (a window of 4: the query and the 3 positions before it), and
// do depend on those within it; a global layer's depend on all of them.
func TestSlidingWindow(t *testing.T) {
	backend := testutil.Backend(t)
	tokens := []int32{3, 17, 5, 29, 11, 2, 38}
	changed := append([]int32{30}, tokens[1:]...) // position 0 changed
	for _, tc := range []struct {
		name    string
		pattern uint32 // 0: every layer sliding; 1: every layer global
		sees    []bool // whether position p sees the change at position 0
	}{
		{"sliding", 0, []bool{true, true, true, true, false, false, false}},
		{"global", 1, []bool{true, true, true, true, true, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tiny
			c.Layers, c.SlidingPattern = 1, int(tc.pattern)
			data := tinyGGUFOf(c, nil, "")
			ctx, m, _ := load(t, data, "f32", false)
			a, b := decodertest.Forward(t, backend, ctx, m, tokens), decodertest.Forward(t, backend, ctx, m, changed)
			for p := range tokens {
				if sees := decodertest.MaxAbsDiff(a[p], b[p]) > 0; sees != tc.sees[p] {
					t.Errorf("position %d sees the token at 0: %v, want %v", p, sees, tc.sees[p])
				}
			}
		})
	}
}

// TestSoftcap: the final soft cap gives cap·tanh(logit/cap) of the uncapped logits.
func TestSoftcap(t *testing.T) {
	backend := testutil.Backend(t)
	tokens := []int32{3, 17, 5}
	ctx, m, _ := load(t, tinyGGUF(nil, ""), "f32", false)
	plain := decodertest.Forward(t, backend, ctx, m, tokens)
	const limit = 2.0
	m.FinalSoftcap = limit
	capped := decodertest.Forward(t, backend, ctx, m, tokens)
	for p := range plain {
		for i, v := range plain[p] {
			want := limit * math.Tanh(float64(v)/limit)
			if math.Abs(float64(capped[p][i])-want) > 1e-5 {
				t.Fatalf("position %d, token %d: capped logit %g, want %g (logit %g)", p, i, capped[p][i], want, v)
			}
		}
	}
}

// TestConfigValidate: a Config built in code is checked, naming its fields.
func TestConfigValidate(t *testing.T) {
	decodertest.CheckInvalidConfigs(t, tiny, func(c gemma3.Config) error {
		_, err := gemma3.New(c)
		return err
	}, []decodertest.InvalidConfig[gemma3.Config]{
		{Name: "no heads", Modify: func(c *gemma3.Config) { c.Heads = 0 }, Want: "Heads = 0; accepted: 1 to 2147483647"},
		{Name: "odd head width", Modify: func(c *gemma3.Config) { c.HeadDim = 3 }, Want: "HeadDim = 3; accepted: an even width"},
		{Name: "kv heads", Modify: func(c *gemma3.Config) { c.KVHeads = 3 }, Want: "2 query heads, 3 key/value heads"},
		{Name: "negative window", Modify: func(c *gemma3.Config) { c.SlidingWindow = -1 }, Want: "SlidingWindow = -1; accepted: 0 to 2147483647"},
		{Name: "query scale", Modify: func(c *gemma3.Config) { c.QueryScale = 0 }, Want: "QueryScale = 0; accepted: a finite number above 0"},
		{Name: "local base", Modify: func(c *gemma3.Config) { c.RoPEBaseLocal = 1 }, Want: "RoPEBaseLocal = 1; accepted: a finite number above 1"},
		{Name: "softcap", Modify: func(c *gemma3.Config) { c.FinalSoftcap = -1 }, Want: "FinalSoftcap = -1"},
		{Name: "RoPE scale", Modify: func(c *gemma3.Config) { c.RoPEScale = 5e37 }, Want: "RoPEScale = 5e+37; accepted: at most 1.585e+29"},
	})
}
