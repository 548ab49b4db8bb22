package llama

import (
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX's house style for graph code
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
)

// Generator runs greedy decoding with a key/value cache of MaxLen positions: one compiled step
// graph for the prompt (its length rounded up to a power of two, so that few prompt lengths
// compile) and one for single tokens, the cache buffers donated from step to step.
type Generator struct {
	model   *Model
	backend backends.Backend
	maxLen  int
	exec    *context.Exec
}

// NewGenerator prepares greedy decoding of model with the parameters in ctx (used as
// ctx.Reuse()), for sequences of up to maxLen tokens (prompt and generated).
func NewGenerator(backend backends.Backend, ctx *context.Context, model *Model, maxLen int) (*Generator, error) {
	if maxLen < 1 || (model.ContextLength > 0 && maxLen > model.ContextLength) {
		return nil, errors.Errorf("llama.NewGenerator: maxLen %d; accepted: 1..%d (the context length)", maxLen, model.ContextLength)
	}
	g := &Generator{model: model, backend: backend, maxLen: maxLen}
	exec, err := context.NewExec(backend, ctx.Reuse(), func(ctx *context.Context, inputs []*Node) []*Node {
		logits, caches := model.Step(ctx, inputs[0], inputs[1], inputs[2], inputs[3:])
		return append([]*Node{logits}, caches...)
	})
	if err != nil {
		return nil, errors.WithMessage(err, "llama.NewGenerator")
	}
	g.exec = exec.WithName("llama.Step")
	return g, nil
}

// GenerateOptions are the options of Generate.
type GenerateOptions struct {
	// MaxNewTokens bounds the generated tokens (0: until MaxLen).
	MaxNewTokens int
	// Stop lists token ids that end the generation (e.g. the EOS token); the stop token is
	// included in the result.
	Stop []int
	// OnToken, if set, is called with each generated token as soon as it is chosen; returning
	// false ends the generation.
	OnToken func(id int) bool
}

// Generate returns the greedy continuation of prompt (the argmax token at each step, computed
// with the cache), as ids without the prompt.
func (g *Generator) Generate(prompt []int, opts GenerateOptions) (out []int, err error) {
	n := len(prompt)
	if n == 0 || n >= g.maxLen {
		return nil, errors.Errorf("llama.Generate: prompt of %d tokens; accepted: 1..%d (MaxLen-1)", n, g.maxLen-1)
	}
	for _, id := range prompt {
		if id < 0 || id >= g.model.VocabSize {
			return nil, errors.Errorf("llama.Generate: token id %d outside the vocabulary of %d", id, g.model.VocabSize)
		}
	}
	m := g.model
	caches := make([]*tensors.Tensor, 2*m.Layers)
	for i := range caches {
		caches[i] = tensors.FromShape(shapes.Make(dtypes.Float32, 1, m.KVHeads, g.maxLen, m.HeadDim))
	}
	defer func() {
		for _, c := range caches {
			if c != nil && c.Ok() {
				_ = c.FinalizeAll()
			}
		}
	}()
	// The prompt, padded to a bucket: the padding's keys land after the prompt in the cache and
	// are overwritten by the generated tokens before any query can see them.
	bucket := 16
	for bucket < n {
		bucket *= 2
	}
	if bucket > g.maxLen {
		bucket = n
	}
	tokens := make([]int32, bucket)
	for i, id := range prompt {
		tokens[i] = int32(id)
	}
	logits, err := g.step(tokens, 0, n-1, caches)
	if err != nil {
		return nil, err
	}
	pos := n
	limit := g.maxLen - n
	if opts.MaxNewTokens > 0 {
		limit = min(limit, opts.MaxNewTokens)
	}
	stop := map[int]bool{}
	for _, id := range opts.Stop {
		stop[id] = true
	}
	for len(out) < limit {
		next := argmax(logits)
		out = append(out, next)
		if stop[next] || (opts.OnToken != nil && !opts.OnToken(next)) || len(out) == limit {
			break
		}
		if logits, err = g.step([]int32{int32(next)}, pos, 0, caches); err != nil {
			return out, err
		}
		pos++
	}
	return out, nil
}

// step runs one Step graph, donating the cache buffers and replacing them with the outputs.
func (g *Generator) step(tokens []int32, start, last int, caches []*tensors.Tensor) ([]float32, error) {
	args := make([]any, 3, 3+len(caches))
	args[0] = [][]int32{tokens}
	args[1] = int32(start)
	args[2] = int32(last)
	for _, c := range caches {
		d, err := DonateTensorBuffer(c, g.backend, 0)
		if err != nil {
			return nil, errors.WithMessage(err, "llama.Generate: donating the cache")
		}
		args = append(args, d)
	}
	outputs, err := g.exec.Exec(args...)
	if err != nil {
		return nil, errors.WithMessage(err, "llama.Generate")
	}
	copy(caches, outputs[1:])
	logits, err := tensors.CopyFlatData[float32](outputs[0])
	_ = outputs[0].FinalizeAll()
	return logits, errors.WithMessage(err, "llama.Generate")
}

// argmax returns the index of the largest value (the first among equals).
func argmax[F float32 | float64](values []F) int {
	best := 0
	for i, v := range values {
		if v > values[best] {
			best = i
		}
	}
	return best
}

// MaxLen returns the longest sequence (prompt and generated tokens) the generator holds.
func (g *Generator) MaxLen() int { return g.maxLen }
