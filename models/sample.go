package models

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/pkg/errors"
)

// Sampling says how a Generator picks each token from the model's logits. The zero value is
// greedy decoding: the most likely token (the first among equals), with no penalty.
//
// The steps are transformers' order: the repetition penalty, then (when Temperature > 0) the
// temperature, top-k, top-p, and a draw from the renormalized probabilities of the tokens kept.
// Without top-k, tokens whose probability is below e^-40 of the most likely token's are never
// drawn; top-k's candidates are its k most likely tokens, however unlikely the last of them.
type Sampling struct {
	// Temperature divides the logits before the softmax. 0 picks the most likely token (greedy)
	// and ignores TopK, TopP and Seed; otherwise it must be finite and positive.
	Temperature float64
	// TopK keeps the TopK most likely tokens (0: all).
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probabilities sum to at least TopP
	// (nucleus sampling), in [0, 1]; 0 and 1 keep all.
	TopP float64
	// RepetitionPenalty divides the positive logits and multiplies the negative ones of every
	// token already in the sequence (prompt and generated tokens, each once), as CTRL and
	// transformers do; it applies to greedy decoding too. 0 and 1: no penalty; otherwise a
	// positive normal float32 (the logits' type: above 1 discourages repetition).
	RepetitionPenalty float64
	// Seed seeds the draws: the same model, prompt, options and seed give the same tokens.
	Seed uint64
}

// Validate reports a setting out of range, naming the field.
func (s Sampling) Validate() error {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case !finite(s.Temperature) || s.Temperature < 0:
		return errors.Errorf("models.Sampling: Temperature %g; accepted: a finite number >= 0 (0: greedy)", s.Temperature)
	case s.TopK < 0:
		return errors.Errorf("models.Sampling: TopK %d; accepted: >= 0 (0: every token)", s.TopK)
	case !finite(s.TopP) || s.TopP < 0 || s.TopP > 1:
		return errors.Errorf("models.Sampling: TopP %g; accepted: 0..1 (0 and 1: every token)", s.TopP)
	case !finite(s.RepetitionPenalty) || s.RepetitionPenalty < 0 ||
		s.RepetitionPenalty != 0 && (s.RepetitionPenalty < 0x1p-126 || s.RepetitionPenalty > math.MaxFloat32):
		return errors.Errorf("models.Sampling: RepetitionPenalty %g; accepted: 0 (none), or a positive normal float32 (%g to %g; 1: none)",
			s.RepetitionPenalty, 0x1p-126, math.MaxFloat32)
	}
	return nil
}

// Greedy reports whether s always picks the most likely token (Temperature 0).
func (s Sampling) Greedy() bool { return s.Temperature == 0 }

// Sampler applies a Sampling to one sequence's logits, step after step (a Generator makes one
// per generation; a caller with its own decoding loop may too).
type Sampler struct {
	s     Sampling
	vocab int
	rng   *rand.Rand
	seen  []bool // tokens in the sequence, for the repetition penalty
	ids   []int  // scratch: candidate ids
	prob  []float64
}

// NewSampler returns a Sampler of s for a vocabulary of vocab tokens whose sequence starts with
// prompt, or an error for invalid settings or a prompt id outside the vocabulary.
func NewSampler(s Sampling, vocab int, prompt []int) (*Sampler, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if vocab < 1 {
		return nil, errors.Errorf("models.NewSampler: vocabulary of %d; accepted: >= 1", vocab)
	}
	sp := &Sampler{s: s, vocab: vocab, rng: rand.New(rand.NewPCG(s.Seed, 0x9e3779b97f4a7c15))}
	if s.penalized() {
		sp.seen = make([]bool, vocab)
	}
	for _, id := range prompt {
		if id < 0 || id >= vocab {
			return nil, errors.Errorf("models.NewSampler: token id %d outside the vocabulary of %d", id, vocab)
		}
		if sp.seen != nil {
			sp.seen[id] = true
		}
	}
	return sp, nil
}

func (s Sampling) penalized() bool { return s.RepetitionPenalty != 0 && s.RepetitionPenalty != 1 }

// Pick returns the next token from logits (one per vocabulary entry; modified in place by the
// repetition penalty) and records it in the sequence. It panics if the logits do not have the
// vocabulary's length.
func (sp *Sampler) Pick(logits []float32) int {
	if len(logits) != sp.vocab {
		panic(errors.Errorf("models.Sampler.Pick: %d logits for a vocabulary of %d", len(logits), sp.vocab))
	}
	if sp.seen != nil {
		p := float32(sp.s.RepetitionPenalty)
		for id, seen := range sp.seen {
			if seen {
				if logits[id] > 0 {
					logits[id] /= p
				} else {
					logits[id] *= p
				}
			}
		}
	}
	var id int
	if sp.s.Greedy() {
		id = Argmax(logits)
	} else {
		id = sp.draw(logits)
	}
	if sp.seen != nil {
		sp.seen[id] = true
	}
	return id
}

// Argmax returns the index of the largest value (the first among equals; a NaN ranks below every
// number): greedy decoding's pick.
func Argmax[F float32 | float64](values []F) int {
	best := 0
	for i, v := range values {
		if b := values[best]; v > b || b != b { // b != b: a NaN
			best = i
		}
	}
	return best
}

// minLogProb bounds the tokens a draw without top-k considers: those whose probability is below
// e^minLogProb (about 4e-18) of the most likely token's are never drawn. Their total is below
// vocabulary·4e-18 of the mass, under float64's rounding of it for any real vocabulary.
const minLogProb = -40

// draw applies temperature, top-k and top-p and draws a token. The kept candidates are visited
// in decreasing probability (ties: lower id first), or in id order when no top-k or top-p
// applies, so the draw depends only on the logits and the random stream. It never sorts the
// whole vocabulary: top-k selects its k candidates in one pass; top-p alone sorts only the
// tokens above a probability threshold whose mass already reaches p (so the nucleus is among
// them).
func (sp *Sampler) draw(logits []float32) int {
	n := len(logits)
	invT := 1 / sp.s.Temperature
	nucleus := sp.s.TopP > 0 && sp.s.TopP < 1
	if cap(sp.prob) < n {
		sp.prob, sp.ids = make([]float64, n), make([]int, 0, n)
	}
	prob := sp.prob[:n]
	var kept []int
	if k := sp.s.TopK; k > 0 && k < n {
		kept = topK(logits, k, sp.ids[:0])
		for len(kept) > 0 && isNaN(logits[kept[len(kept)-1]]) { // NaNs rank last
			kept = kept[:len(kept)-1]
		}
		if len(kept) == 0 {
			return Argmax(logits)
		}
		best := logits[kept[0]]
		for _, id := range kept {
			prob[id] = softmaxTerm(logits[id], best, invT)
		}
	} else {
		// The candidates: the tokens within minLogProb of the best (the others' probabilities
		// are below e^minLogProb of the best's), in id order, with their unnormalized softmax.
		best := logits[Argmax(logits)]
		floor := best + float32(minLogProb*sp.s.Temperature)
		total := 0.0
		kept = sp.ids[:0]
		for i, l := range logits {
			if l >= floor {
				prob[i] = softmaxTerm(l, best, invT)
				total += prob[i]
				kept = append(kept, i)
			}
		}
		if len(kept) == 0 { // every logit NaN
			return Argmax(logits)
		}
		if !nucleus {
			return sp.weighted(kept, prob, n)
		}
		// The tokens at or above tau form a prefix of the decreasing order; lower tau until
		// their mass reaches TopP of the total, then sort only them. Every candidate's
		// probability is at least e^minLogProb of the best's (1): below that, tau holds them all.
		tau, all := 1.0, kept
		for tau >= math.Exp(minLogProb) {
			tau /= 16
			mass := 0.0
			for _, id := range all {
				if prob[id] >= tau {
					mass += prob[id]
				}
			}
			if mass >= sp.s.TopP*total {
				break
			}
		}
		kept = all[:0]
		for _, id := range all {
			if prob[id] >= tau {
				kept = append(kept, id)
			}
		}
		slices.SortFunc(kept, func(a, b int) int {
			if c := cmp.Compare(prob[b], prob[a]); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		return sp.weighted(nucleusOf(kept, prob, sp.s.TopP*total), prob, n)
	}
	if nucleus {
		total := 0.0
		for _, id := range kept {
			total += prob[id]
		}
		kept = nucleusOf(kept, prob, sp.s.TopP*total)
	}
	return sp.weighted(kept, prob, n)
}

func isNaN(v float32) bool { return v != v }

// softmaxTerm is the unnormalized probability exp((l - best)/T) of logit l, best the largest: 1
// for the best itself, also where the temperature's inverse overflows or the best is +Inf.
func softmaxTerm(l, best float32, invT float64) float64 {
	if l == best {
		return 1
	}
	return math.Exp(float64(l-best) * invT)
}

// nucleusOf returns the shortest prefix of ids (in decreasing probability) whose mass reaches
// target.
func nucleusOf(ids []int, prob []float64, target float64) []int {
	cum := 0.0
	for k, id := range ids {
		cum += prob[id]
		if cum >= target {
			return ids[:k+1]
		}
	}
	return ids
}

// weighted draws one of ids (all n ids, in order, when ids is nil) with probability proportional
// to prob[id], visiting them in order.
func (sp *Sampler) weighted(ids []int, prob []float64, n int) int {
	at := func(i int) int {
		if ids == nil {
			return i
		}
		return ids[i]
	}
	if ids != nil {
		n = len(ids)
	}
	var total float64
	for i := range n {
		total += prob[at(i)]
	}
	u := sp.rng.Float64() * total
	for i := range n {
		if u -= prob[at(i)]; u < 0 {
			return at(i)
		}
	}
	return at(n - 1) // rounding left u at or above 0
}

// topK returns the k ids of the largest logits in decreasing order (ties: lower id first; NaNs
// below every number), appended to out, selected in one pass with a bounded min-heap.
func topK(logits []float32, k int, out []int) []int {
	worse := func(a, b int) bool { // a ranks below b
		la, lb := logits[a], logits[b]
		if isNaN(la) || isNaN(lb) {
			return isNaN(la) && (!isNaN(lb) || a > b)
		}
		return la < lb || (la == lb && a > b)
	}
	h := out[:0]
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(h) {
				return
			}
			c := l
			if r := l + 1; r < len(h) && worse(h[r], h[l]) {
				c = r
			}
			if !worse(h[c], h[i]) {
				return
			}
			h[i], h[c] = h[c], h[i]
			i = c
		}
	}
	for id := range logits {
		if len(h) < k {
			h = append(h, id)
			for i := len(h) - 1; i > 0; { // sift up
				parent := (i - 1) / 2
				if !worse(h[i], h[parent]) {
					break
				}
				h[i], h[parent] = h[parent], h[i]
				i = parent
			}
			continue
		}
		if worse(h[0], id) { // the heap's worst ranks below id: replace it
			h[0] = id
			down(0)
		}
	}
	slices.SortFunc(h, func(a, b int) int {
		if worse(b, a) {
			return -1
		}
		return 1
	})
	return h
}
