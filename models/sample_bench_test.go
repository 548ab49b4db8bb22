package models_test

import (
	"math/rand/v2"
	"testing"

	"github.com/quanta-ml/quanta/models"
)

// BenchmarkSamplerPick: the host's pick of one token from SmolLM2-sized logits (49152).
func BenchmarkSamplerPick(b *testing.B) {
	// Logits shaped like a language model's: a spread of 2.5 around 0, a few tokens well above.
	rng := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, 49152)
	for i := range logits {
		logits[i] = float32(2.5 * rng.NormFloat64())
		if i%997 == 0 {
			logits[i] += 10
		}
	}
	work := make([]float32, len(logits))
	for _, tc := range []struct {
		name string
		s    models.Sampling
	}{
		{"greedy", models.Sampling{}},
		{"top-k=40/top-p=0.95/penalty=1.1", models.Sampling{Temperature: 0.7, TopK: 40, TopP: 0.95, RepetitionPenalty: 1.1}},
		{"top-p=0.95", models.Sampling{Temperature: 0.7, TopP: 0.95}},
		{"all", models.Sampling{Temperature: 0.7}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			sp, err := models.NewSampler(tc.s, len(logits), []int{1, 2, 3})
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				copy(work, logits)
				sp.Pick(work)
			}
		})
	}
}
