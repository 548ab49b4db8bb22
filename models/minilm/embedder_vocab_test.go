package minilm_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models/minilm"
	"github.com/quanta-ml/quanta/tokenizer"
)

// TestEmbedderVocabulary: a tokenizer whose ids go past the model's word table (a vocab.txt or
// tokenizer.json of more tokens than config.json's vocab_size) is an error naming both sizes:
// the lookup of an id past the table is clamped by the backend, a silently wrong embedding.
func TestEmbedderVocabulary(t *testing.T) {
	backend := testutil.Backend(t)
	ctx, m := randomModel(t, backend)
	tokens := []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
	for i := len(tokens); i < m.VocabSize+10; i++ {
		tokens = append(tokens, fmt.Sprintf("w%d", i))
	}
	tok, err := tokenizer.NewWordPiece(tokens, tokenizer.BertOptions())
	if err != nil {
		t.Fatal(err)
	}
	e, err := minilm.NewEmbedder(backend, ctx, m, tok)
	if err == nil {
		v, embedErr := e.Embed([]string{fmt.Sprintf("w%d", m.VocabSize+5)}) // an id past the table
		t.Fatalf("NewEmbedder with %d tokens for a table of %d: no error; Embed gave %v, %v", len(tokens), m.VocabSize, v != nil, embedErr)
	}
	if !strings.Contains(err.Error(), "vocab_size") {
		t.Errorf("error %v; want one naming vocab_size", err)
	}
}
