package models

import (
	"math"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
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
// ends at n. With stride < maxLength every token but the first is scored exactly once; with
// stride = maxLength (disjoint windows, as in Hugging Face's recipe) the first token of each window
// is not scored either, since nothing precedes it in its window. With n = 1024, maxLength = 513 and
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

// LanguageModel is a Decoder that also runs a whole sequence at once, for scoring: Forward
// returns the logits [batch, seq, VocabSize] (float32) of token ids [batch, seq] at positions
// 0..seq-1, each position attending to itself and the positions before it.
type LanguageModel interface {
	Decoder
	Forward(ctx *context.Context, tokens *graph.Node) *graph.Node
}

// NLL returns the negative log-likelihood [batch, seq-1] (float64) of each token of tokens
// [batch, seq] after the first, given the tokens before it, from one Forward pass of m:
// nll[b, k] = -log softmax(float64(logits[b, k]))[tokens[b, k+1]]. The float32 logits are
// converted before the softmax, as the reference harness computes it. The NLL of a token outside
// 0..VocabSize-1 is NaN (Evaluator.NLL rejects such ids before running the graph). It panics,
// naming the shape, unless tokens are integers [batch, seq] with seq >= 2, and unless m's logits
// are float [batch, seq, VocabSize] (DecodeSpec's).
func NLL(ctx *context.Context, m LanguageModel, tokens *graph.Node) *graph.Node {
	if tokens.Rank() != 2 || !tokens.DType().IsInt() || tokens.Shape().Dim(1) < 2 {
		panic(errors.Errorf("models.NLL: tokens %s; accepted: integer token ids [batch, sequence] with a sequence of at least 2", tokens.Shape()))
	}
	batch, seq := tokens.Shape().Dim(0), tokens.Shape().Dim(1)
	vocab := m.DecodeSpec().VocabSize
	all := m.Forward(ctx, tokens)
	if s := all.Shape(); !s.DType.IsFloat() || s.Rank() != 3 || s.Dim(0) != batch || s.Dim(1) != seq || s.Dim(2) != vocab {
		panic(errors.Errorf("models.NLL: the model's Forward returned logits %s for tokens %s; accepted: float [%d, %d, %d] (the vocabulary size of its DecodeSpec)",
			s, tokens.Shape(), batch, seq, vocab))
	}
	logits := graph.SliceAxis(all, 1, graph.AxisRange(0, seq-1))
	logProbs := graph.LogSoftmax(graph.ConvertDType(logits, dtypes.Float64), -1)
	g := tokens.Graph()
	next := graph.ConvertDType(graph.SliceAxis(tokens, 1, graph.AxisRange(1, seq)), dtypes.Int64) // uint64 ids past int64 turn negative
	inVocab := graph.LogicalAnd(graph.GreaterOrEqual(next, graph.ScalarZero(g, dtypes.Int64)), graph.LessThan(next, graph.Scalar(g, dtypes.Int64, vocab)))
	targets := graph.ConvertDType(next, dtypes.Int32)
	ids := graph.Iota(g, shapes.Make(dtypes.Int32, batch, seq-1, vocab), 2)
	picked := graph.Where(graph.Equal(ids, graph.ExpandAxes(targets, -1)), logProbs, graph.ZerosLike(logProbs))
	nll := graph.Neg(graph.ReduceSum(picked, -1))
	return graph.Where(inVocab, nll, graph.Scalar(g, dtypes.Float64, math.NaN()))
}

// Evaluator scores token sequences with a LanguageModel, for perplexity: it compiles one NLL
// graph per window length.
type Evaluator struct {
	vocab, contextLength int
	exec                 *context.Exec
}

// NewEvaluator prepares scoring with m, whose parameters are in ctx (used as ctx.Reuse()).
func NewEvaluator(backend backends.Backend, ctx *context.Context, m LanguageModel) (*Evaluator, error) {
	exec, err := context.NewExec(backend, ctx.Reuse(), func(ctx *context.Context, tokens *graph.Node) *graph.Node {
		return NLL(ctx, m, tokens)
	})
	if err != nil {
		return nil, errors.WithMessage(err, "models.NewEvaluator")
	}
	spec := m.DecodeSpec()
	// One program per window length, as many as the windows have (GoMLX's default bound of 32
	// failed the 33rd length: windows of every length below a context, say).
	exec = exec.WithName("models.NLL").SetMaxCache(-1)
	return &Evaluator{vocab: spec.VocabSize, contextLength: spec.ContextLength, exec: exec}, nil
}

// NLL returns the negative log-likelihoods of the targets of each window of ids, in order: each
// window is run from an empty context, and its targets ids[FirstTarget:End] are scored (see
// Window). With StridedWindows' windows of a stride below their length every id but the first is
// scored once. A window longer than the model's context length (when known) is an error, as a
// Generator's MaxLen is, and so is a NaN NLL (logits that are NaN or infinite), naming the window
// and the id, as a Generator reports NaN logits: its perplexity would be NaN. An NLL of +Inf (a
// target whose logit is -Inf, probability 0, among finite logits) is returned as it is.
func (e *Evaluator) NLL(ids []int, windows []Window) ([]float64, error) {
	for _, id := range ids {
		if id < 0 || id >= e.vocab {
			return nil, errors.Errorf("models.Evaluator.NLL: token id %d outside the vocabulary of %d", id, e.vocab)
		}
	}
	var out []float64
	for _, w := range windows {
		if w.Start < 0 || w.End > len(ids) || w.FirstTarget <= w.Start || w.FirstTarget >= w.End {
			return nil, errors.Errorf("models.Evaluator.NLL: window %+v over %d ids; accepted: 0 <= Start < FirstTarget < End <= len(ids)", w, len(ids))
		}
		if e.contextLength > 0 && w.End-w.Start > e.contextLength {
			return nil, errors.Errorf("models.Evaluator.NLL: window %+v of %d tokens; accepted: at most the model's context length %d",
				w, w.End-w.Start, e.contextLength)
		}
		tokens := make([]int32, w.End-w.Start)
		for i := range tokens {
			tokens[i] = int32(ids[w.Start+i])
		}
		res, err := e.exec.Exec1([][]int32{tokens})
		if err != nil {
			return nil, errors.WithMessage(err, "models.Evaluator.NLL")
		}
		nll, err := tensors.CopyFlatData[float64](res)
		_ = res.FinalizeAll()
		if err != nil {
			return nil, errors.WithMessage(err, "models.Evaluator.NLL")
		}
		// nll[k] is the NLL of window position k+1, i.e. of ids[Start+k+1].
		for k := w.FirstTarget - w.Start - 1; k < len(nll); k++ {
			if math.IsNaN(nll[k]) {
				return nil, errors.Errorf("models.Evaluator.NLL: window %+v: the NLL of ids[%d] is NaN: the logits predicting it "+
					"hold a NaN or an infinity: the model's weights or activations are not finite", w, w.Start+k+1)
			}
		}
		out = append(out, nll[w.FirstTarget-w.Start-1:]...)
	}
	return out, nil
}

// Finalize releases the compiled graphs.
func (e *Evaluator) Finalize() { e.exec.Finalize() }
