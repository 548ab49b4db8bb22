package models_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/models"
)

// logOf returns the natural logs of probabilities, as logits.
func logOf(p ...float64) []float32 {
	out := make([]float32, len(p))
	for i, v := range p {
		out[i] = float32(math.Log(v))
	}
	return out
}

// checkSeeded checks that draw, ids drawn with a seed, gives the same ids twice with seed and
// other ids with the next seed.
func checkSeeded(t *testing.T, seed uint64, draw func(seed uint64) []int) {
	t.Helper()
	if a, b := draw(seed), draw(seed); !slices.Equal(a, b) {
		t.Errorf("seed %d gave %v, then %v", seed, a, b)
	}
	if a, b := draw(seed), draw(seed+1); slices.Equal(a, b) {
		t.Errorf("seeds %d and %d gave the same ids %v", seed, seed+1, a)
	}
}

// draws picks n tokens from fresh copies of logits with one sampler and counts each id.
func draws(t *testing.T, s models.Sampling, logits []float32, n int) []int {
	t.Helper()
	sp, err := models.NewSampler(s, len(logits), nil)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, len(logits))
	work := make([]float32, len(logits))
	for range n {
		copy(work, logits)
		counts[sp.Pick(work)]++
	}
	return counts
}

func TestSamplingValidate(t *testing.T) {
	for _, tc := range []struct {
		s     models.Sampling
		field string // "" for valid
	}{
		{models.Sampling{}, ""},
		{models.Sampling{Temperature: 0.7, TopK: 40, TopP: 0.9, RepetitionPenalty: 1.1, Seed: 7}, ""},
		{models.Sampling{TopP: 1, RepetitionPenalty: 1}, ""},
		{models.Sampling{Temperature: -0.1}, "Temperature"},
		{models.Sampling{Temperature: math.NaN()}, "Temperature"},
		{models.Sampling{Temperature: math.Inf(1)}, "Temperature"},
		{models.Sampling{TopK: -1}, "TopK"},
		{models.Sampling{TopP: 1.5}, "TopP"},
		{models.Sampling{TopP: -0.1}, "TopP"},
		{models.Sampling{TopP: math.NaN()}, "TopP"},
		{models.Sampling{RepetitionPenalty: -1}, "RepetitionPenalty"},
		{models.Sampling{RepetitionPenalty: math.Inf(1)}, "RepetitionPenalty"},
		{models.Sampling{RepetitionPenalty: 1e-300}, "RepetitionPenalty"}, // 0 as a float32
		{models.Sampling{RepetitionPenalty: 1e39}, "RepetitionPenalty"},   // +Inf as a float32
		{models.Sampling{Temperature: 1e-320, RepetitionPenalty: 0x1p-126}, ""},
	} {
		err := tc.s.Validate()
		if tc.field == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.s, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: error %v; want one naming %s", tc.s, err, tc.field)
		}
	}
	if _, err := models.NewSampler(models.Sampling{}, 4, []int{1, 4}); err == nil {
		t.Error("NewSampler with a prompt id outside the vocabulary: no error")
	}
}

// TestSamplerHandComputed checks each step on distributions worked out by hand.
func TestSamplerHandComputed(t *testing.T) {
	t.Run("greedy-first-of-equals", func(t *testing.T) {
		if c := draws(t, models.Sampling{}, []float32{1, 3, 3, 2}, 5); c[1] != 5 {
			t.Errorf("greedy picks %v; want id 1 always", c)
		}
	})
	t.Run("repetition-penalty", func(t *testing.T) {
		// Logits [2, -1, 1.5] with ids 0 and 1 seen and a penalty of 2: [1, -2, 1.5], so the
		// greedy pick moves from 0 to 2; once 2 is picked, it is penalized too (0.75 < 1).
		sp, err := models.NewSampler(models.Sampling{RepetitionPenalty: 2}, 3, []int{0, 1, 1})
		if err != nil {
			t.Fatal(err)
		}
		logits := []float32{2, -1, 1.5}
		if id := sp.Pick(logits); id != 2 || !slices.Equal(logits, []float32{1, -2, 1.5}) {
			t.Errorf("pick %d, logits %v; want 2 from [1 -2 1.5]", id, logits)
		}
		if id := sp.Pick([]float32{2, -1, 1.5}); id != 0 {
			t.Errorf("second pick %d; want 0 (2 penalized to 0.75, 0 to 1)", id)
		}
	})
	p := logOf(0.5, 0.3, 0.15, 0.05)
	for _, tc := range []struct {
		name string
		s    models.Sampling
		want []float64 // the probabilities of the kept tokens, renormalized
	}{
		{"top-k-1", models.Sampling{Temperature: 1, TopK: 1, Seed: 3}, []float64{1, 0, 0, 0}},
		// 0.5 < 0.7 <= 0.5+0.3: the nucleus is {0, 1}.
		{"top-p-0.7", models.Sampling{Temperature: 1, TopP: 0.7, Seed: 1}, []float64{0.625, 0.375, 0, 0}},
		// top-k 3 keeps 0.95 of the mass; top-p 0.6 of it (0.57) needs ids 0 and 1.
		{"top-k-3-top-p-0.6", models.Sampling{Temperature: 1, TopK: 3, TopP: 0.6, Seed: 2}, []float64{0.625, 0.375, 0, 0}},
		{"top-k-2", models.Sampling{Temperature: 1, TopK: 2, Seed: 4}, []float64{0.625, 0.375, 0, 0}},
		{"all", models.Sampling{Temperature: 1, Seed: 5}, []float64{0.5, 0.3, 0.15, 0.05}},
		// Temperature 2 takes square roots: 0.8 and 0.2 become 0.894 and 0.447, i.e. 2/3 and 1/3.
		{"temperature-2", models.Sampling{Temperature: 2, Seed: 6}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 4000
			logits, want := p, tc.want
			if tc.want == nil {
				logits, want = logOf(0.8, 0.2), []float64{2.0 / 3, 1.0 / 3}
			}
			counts := draws(t, tc.s, logits, n)
			for id, w := range want {
				got := float64(counts[id]) / n
				// 4 standard deviations of a binomial frequency at n draws (the draws are
				// seeded: the test is deterministic).
				if tol := 4 * math.Sqrt(w*(1-w)/n); math.Abs(got-w) > tol || (w == 0 && counts[id] != 0) {
					t.Errorf("id %d drawn %.4f of the time; want %.4f (counts %v)", id, got, w, counts)
				}
			}
		})
	}
	t.Run("seeded", func(t *testing.T) {
		seq := func(seed uint64) []int {
			sp, _ := models.NewSampler(models.Sampling{Temperature: 1, Seed: seed}, 4, nil)
			var out []int
			for range 32 {
				out = append(out, sp.Pick(append([]float32(nil), p...)))
			}
			return out
		}
		checkSeeded(t, 9, seq)
	})
}

// TestSamplerExtremes: settings at the edge of float arithmetic and non-finite logits end in a
// pick (no hang, no panic): a temperature whose inverse overflows draws among the best tokens
// only; a penalty that sends a logit to +Inf makes it the pick; NaN logits are never picked while
// a number is there.
func TestSamplerExtremes(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, tc := range []struct {
		name   string
		s      models.Sampling
		seen   []int // the prompt, for the penalty
		logits []float32
		want   []int // the ids the pick may be
	}{
		{"tiny temperature, top-p", models.Sampling{Temperature: 1e-320, TopP: 0.9}, nil, []float32{1, 3, 2}, []int{1}},
		{"tiny temperature, top-k", models.Sampling{Temperature: 1e-320, TopK: 2}, nil, []float32{1, 3, 2}, []int{1}},
		{"tiny temperature, ties", models.Sampling{Temperature: 1e-320}, nil, []float32{3, 1, 3}, []int{0, 2}},
		{"penalty to +Inf", models.Sampling{Temperature: 1, TopP: 0.9, RepetitionPenalty: 0x1p-126}, []int{2}, []float32{1, 3, 2}, []int{2}},
		{"+Inf logits", models.Sampling{Temperature: 0.7, TopP: 0.5}, nil, []float32{inf, 3, inf}, []int{0, 2}},
		{"NaN first, greedy", models.Sampling{}, nil, []float32{nan, 1, 3, 2}, []int{2}},
		{"NaN first, sampled", models.Sampling{Temperature: 1e-3, TopP: 0.9}, nil, []float32{nan, 1, 3, 2}, []int{2}},
		{"NaN first, top-k", models.Sampling{Temperature: 1e-3, TopK: 2}, nil, []float32{nan, 1, 3, 2}, []int{2}},
		{"all NaN", models.Sampling{Temperature: 1, TopP: 0.9}, nil, []float32{nan, nan}, []int{0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(8) {
				tc.s.Seed = seed
				sp, err := models.NewSampler(tc.s, len(tc.logits), tc.seen)
				if err != nil {
					t.Fatal(err)
				}
				if id := sp.Pick(slices.Clone(tc.logits)); !slices.Contains(tc.want, id) {
					t.Fatalf("seed %d: picked %d; want one of %v", seed, id, tc.want)
				}
			}
		})
	}
}
