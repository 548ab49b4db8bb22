package minilm

import (
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/tokenizer"
)

// Embedder turns texts into sentence embeddings: WordPiece ids, a batch padded to a multiple of 8
// tokens (so that few shapes compile) with its attention mask, then Model.Embed.
type Embedder struct {
	model *Model
	tok   *tokenizer.WordPiece
	exec  *context.Exec
}

// NewEmbedder prepares embedding with model, whose parameters are in ctx (used as ctx.Reuse()),
// and tok.
func NewEmbedder(backend backends.Backend, ctx *context.Context, model *Model, tok *tokenizer.WordPiece) (*Embedder, error) {
	// Every id the tokenizer gives must have a row in the word table: the backend clamps a lookup
	// past it, a silently wrong embedding.
	if tok.VocabSize() > model.VocabSize {
		return nil, errors.Errorf("minilm.NewEmbedder: a tokenizer of %d tokens for a word table of %d (vocab_size); accepted: at most vocab_size tokens",
			tok.VocabSize(), model.VocabSize)
	}
	if tok.Options().MaxLength == 0 || tok.Options().MaxLength > model.MaxPositions {
		var err error
		if tok, err = tok.WithMaxLength(model.MaxPositions); err != nil {
			return nil, errors.WithMessagef(err, "minilm.NewEmbedder: max_position_embeddings %d", model.MaxPositions)
		}
	}
	exec, err := context.NewExec(backend, ctx.Reuse(), func(ctx *context.Context, ids, mask *graph.Node) *graph.Node {
		return model.Embed(ctx, ids, mask)
	})
	if err != nil {
		return nil, errors.WithMessage(err, "minilm.NewEmbedder")
	}
	return &Embedder{model: model, tok: tok, exec: exec.WithName("minilm.Embed")}, nil
}

// Embed returns the unit-norm embedding of each text.
func (e *Embedder) Embed(texts []string) ([][]float32, error) {
	if len(texts) == 0 {
		return nil, nil
	}
	encoded := make([][]int, len(texts))
	longest := 0
	for i, text := range texts {
		encoded[i] = e.tok.Encode(text)
		longest = max(longest, len(encoded[i]))
	}
	seq := min((longest+7)/8*8, e.model.MaxPositions)
	ids := make([][]int32, len(texts))
	mask := make([][]int32, len(texts))
	for i, enc := range encoded {
		ids[i] = make([]int32, seq)
		mask[i] = make([]int32, seq)
		for j := range ids[i] {
			ids[i][j] = int32(e.tok.PadID())
		}
		for j, id := range enc {
			ids[i][j], mask[i][j] = int32(id), 1
		}
	}
	out, err := e.exec.Exec(ids, mask)
	if err != nil {
		return nil, errors.WithMessage(err, "minilm.Embed")
	}
	defer func() { _ = out[0].FinalizeAll() }()
	flat, err := tensors.CopyFlatData[float32](out[0])
	if err != nil {
		return nil, errors.WithMessage(err, "minilm.Embed")
	}
	result := make([][]float32, len(texts))
	for i := range result {
		result[i] = flat[i*e.model.Dim : (i+1)*e.model.Dim]
	}
	return result, nil
}
