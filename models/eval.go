package models

import (
	"math"

	"github.com/pkg/errors"
)

// Window is one evaluation window of a token sequence: the model reads ids[Start:End] from an
// empty context and is scored on its predictions of the targets ids[FirstTarget:End]
// (Start < FirstTarget; each target t is predicted from ids[Start:t]).
type Window struct {
	Start, End, FirstTarget int
}

// StridedWindows returns the windows of Hugging Face's strided perplexity recipe over n tokens:
// windows of up to maxLength tokens starting every stride tokens; each scores the targets that
// the previous window did not reach (the first window all of its predictions), and the last window
// ends at n. Every token but the first is scored exactly once. With n = 1024, maxLength = 513 and
// stride = 512 (the reference's rule) the windows are [0, 513) scoring 1..512 and [512, 1024)
// scoring 513..1023.
func StridedWindows(n, maxLength, stride int) ([]Window, error) {
	if n < 2 || maxLength < 2 || stride < 1 || stride > maxLength {
		return nil, errors.Errorf("models.StridedWindows(%d, %d, %d): accepted: n >= 2, maxLength >= 2, 1 <= stride <= maxLength",
			n, maxLength, stride)
	}
	var windows []Window
	prevEnd := 0
	for begin := 0; begin < n; begin += stride {
		end := min(begin+maxLength, n)
		first := max(begin+1, prevEnd)
		if first < end {
			windows = append(windows, Window{Start: begin, End: end, FirstTarget: first})
		}
		prevEnd = end
		if end == n {
			break
		}
	}
	return windows, nil
}

// Perplexity returns exp(mean(nll)) of per-token negative log-likelihoods (natural log), summed
// in float64; NaN for an empty slice.
func Perplexity(nll []float64) float64 {
	if len(nll) == 0 {
		return math.NaN()
	}
	sum := 0.0
	for _, v := range nll {
		sum += v
	}
	return math.Exp(sum / float64(len(nll)))
}

// Cosine returns the cosine similarity of two vectors of the same length, accumulated in float64
// (NaN if either is zero or their lengths differ).
func Cosine(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.NaN()
	}
	var dot, na, nb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		dot += x * y
		na += x * x
		nb += y * y
	}
	return dot / math.Sqrt(na*nb)
}
