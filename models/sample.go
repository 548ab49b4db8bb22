package models

import (
	"math"
	"math/rand/v2"

	"github.com/pkg/errors"
)

// Sampling says how a Generator picks each token from the model's logits. The zero value is
// greedy decoding: the most likely token (the first among equals), with no penalty.
//
// The steps are transformers' order: the repetition penalty, then (when Temperature > 0) the
// temperature, top-k, top-p, and a draw from the renormalized probabilities of the tokens kept.
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
	// transformers do; it applies to greedy decoding too. 0 and 1: no penalty; otherwise finite
	// and positive (above 1 discourages repetition).
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
	case !finite(s.RepetitionPenalty) || s.RepetitionPenalty < 0:
		return errors.Errorf("models.Sampling: RepetitionPenalty %g; accepted: a finite number >= 0 (0 and 1: none)", s.RepetitionPenalty)
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

// Argmax returns the index of the largest value (the first among equals): greedy decoding's pick.
func Argmax[F float32 | float64](values []F) int {
	best := 0
	for i, v := range values {
		if v > values[best] {
			best = i
		}
	}
	return best
}

// draw applies temperature, top-k and top-p and draws a token. The candidates are visited in
// decreasing probability (ties: lower id first), so the draw depends only on the logits and the
// random stream.
func (sp *Sampler) draw(logits []float32) int {
	n := len(logits)
	if cap(sp.prob) < n {
		sp.prob, sp.ids = make([]float64, n), make([]int, n)
	}
	prob, ids := sp.prob[:n], sp.ids[:n]
	best := logits[Argmax(logits)]
	invT := 1 / sp.s.Temperature
	for i, l := range logits {
		prob[i] = math.Exp(float64(l-best) * invT) // unnormalized softmax
		ids[i] = i
	}
	h := maxHeap{ids: ids, prob: prob}
	h.init()
	limit := n
	if sp.s.TopK > 0 {
		limit = min(n, sp.s.TopK)
	}
	topP := sp.s.TopP
	if topP == 0 {
		topP = 1
	}
	// Pop the most likely tokens into ids[n-1], ids[n-2], ...: the top-k ones, then as many as
	// top-p needs of their total.
	if topP == 1 && limit == n {
		return sp.weighted(ids, prob) // every token: no order needed
	}
	if topP < 1 && limit < n {
		var total float64
		for range limit {
			total += prob[h.pop()]
		}
		kept := ids[n-limit:]
		reverse(kept)
		cum, k := 0.0, 0
		for k < len(kept) {
			cum += prob[kept[k]]
			k++
			if cum >= topP*total {
				break
			}
		}
		return sp.weighted(kept[:k], prob)
	}
	if limit < n { // top-k only
		for range limit {
			h.pop()
		}
		kept := ids[n-limit:]
		reverse(kept)
		return sp.weighted(kept, prob)
	}
	// top-p only: the total of all probabilities, then pop until the nucleus is reached.
	var total float64
	for _, p := range prob {
		total += p
	}
	cum, k := 0.0, 0
	for k < n {
		cum += prob[h.pop()]
		k++
		if cum >= topP*total {
			break
		}
	}
	kept := ids[n-k:]
	reverse(kept)
	return sp.weighted(kept, prob)
}

// weighted draws one of ids with probability proportional to prob[id], visiting ids in order.
func (sp *Sampler) weighted(ids []int, prob []float64) int {
	var total float64
	for _, id := range ids {
		total += prob[id]
	}
	u := sp.rng.Float64() * total
	for _, id := range ids {
		u -= prob[id]
		if u < 0 {
			return id
		}
	}
	return ids[len(ids)-1] // rounding left u at or above 0
}

func reverse(s []int) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}

// maxHeap orders ids[:size] by decreasing prob (ties: lower id first); pop moves the top to
// ids[size-1] and shrinks the heap, so the popped ids accumulate at the end in pop order reversed.
type maxHeap struct {
	ids  []int
	prob []float64
	size int
}

func (h *maxHeap) before(a, b int) bool {
	pa, pb := h.prob[h.ids[a]], h.prob[h.ids[b]]
	return pa > pb || (pa == pb && h.ids[a] < h.ids[b])
}

func (h *maxHeap) init() {
	h.size = len(h.ids)
	for i := h.size/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *maxHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= h.size {
			return
		}
		c := l
		if r := l + 1; r < h.size && h.before(r, l) {
			c = r
		}
		if !h.before(c, i) {
			return
		}
		h.ids[i], h.ids[c] = h.ids[c], h.ids[i]
		i = c
	}
}

// pop removes the top id and returns it; it is left at ids[size] (the new size).
func (h *maxHeap) pop() int {
	h.size--
	h.ids[0], h.ids[h.size] = h.ids[h.size], h.ids[0]
	h.down(0)
	return h.ids[h.size]
}
