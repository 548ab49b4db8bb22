package llama

import (
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX's house style for graph code
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/models"
)

// NLL returns the negative log-likelihood [batch, seq-1] (float64) of each token of tokens
// [batch, seq] after the first, given the tokens before it, from one Forward pass:
// nll[b, k] = -log softmax(float64(logits[b, k]))[tokens[b, k+1]]. The float32 logits are
// converted before the softmax, as the reference harness computes it. seq must be at least 2.
func (m *Model) NLL(ctx *context.Context, tokens *Node) *Node {
	checkTokens("NLL", tokens)
	batch, seq := tokens.Shape().Dim(0), tokens.Shape().Dim(1)
	if seq < 2 {
		panic(errors.Errorf("llama.NLL: tokens %s; accepted: [batch, sequence] with a sequence of at least 2", tokens.Shape()))
	}
	logits := SliceAxis(m.Forward(ctx, tokens), 1, AxisRange(0, seq-1))
	logProbs := LogSoftmax(ConvertDType(logits, dtypes.Float64), -1)
	targets := ConvertDType(SliceAxis(tokens, 1, AxisRange(1, seq)), dtypes.Int32)
	vocab := Iota(tokens.Graph(), shapes.Make(dtypes.Int32, batch, seq-1, m.VocabSize), 2)
	picked := Where(Equal(vocab, ExpandAxes(targets, -1)), logProbs, ZerosLike(logProbs))
	return Neg(ReduceSum(picked, -1))
}

// Evaluator scores token sequences with a model, for perplexity: NLL compiles one graph per
// window length.
type Evaluator struct {
	model *Model
	exec  *context.Exec
}

// NewEvaluator prepares scoring with model, whose parameters are in ctx (used as ctx.Reuse()).
func NewEvaluator(backend backends.Backend, ctx *context.Context, model *Model) (*Evaluator, error) {
	exec, err := context.NewExec(backend, ctx.Reuse(), func(ctx *context.Context, tokens *Node) *Node {
		return model.NLL(ctx, tokens)
	})
	if err != nil {
		return nil, errors.WithMessage(err, "llama.NewEvaluator")
	}
	return &Evaluator{model: model, exec: exec.WithName("llama.NLL")}, nil
}

// NLL returns the negative log-likelihoods of the targets of each window of ids, in order: each
// window is run from an empty context, and its targets ids[FirstTarget:End] are scored (see
// models.Window). With models.StridedWindows' windows every id but the first is scored once.
func (e *Evaluator) NLL(ids []int, windows []models.Window) ([]float64, error) {
	for _, id := range ids {
		if id < 0 || id >= e.model.VocabSize {
			return nil, errors.Errorf("llama.Evaluator.NLL: token id %d outside the vocabulary of %d", id, e.model.VocabSize)
		}
	}
	var out []float64
	for _, w := range windows {
		if w.Start < 0 || w.End > len(ids) || w.FirstTarget <= w.Start || w.FirstTarget >= w.End {
			return nil, errors.Errorf("llama.Evaluator.NLL: window %+v over %d ids; accepted: 0 <= Start < FirstTarget < End <= len(ids)", w, len(ids))
		}
		tokens := make([]int32, w.End-w.Start)
		for i := range tokens {
			tokens[i] = int32(ids[w.Start+i])
		}
		res, err := e.exec.Exec1([][]int32{tokens})
		if err != nil {
			return nil, errors.WithMessage(err, "llama.Evaluator.NLL")
		}
		nll, err := tensors.CopyFlatData[float64](res)
		_ = res.FinalizeAll()
		if err != nil {
			return nil, errors.WithMessage(err, "llama.Evaluator.NLL")
		}
		// nll[k] is the NLL of window position k+1, i.e. of ids[Start+k+1].
		out = append(out, nll[w.FirstTarget-w.Start-1:]...)
	}
	return out, nil
}

// Finalize releases the compiled graphs.
func (e *Evaluator) Finalize() { e.exec.Finalize() }
