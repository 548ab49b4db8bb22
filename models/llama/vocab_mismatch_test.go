package llama_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/models/llama"
)

// TestConfigVocabMismatch: a file whose llama.vocab_size (the embedding table's rows) disagrees
// with its token list is corrupt, as llama.cpp finds it: the model would pick ids the tokenizer
// has no text for (quanta run prints nothing for them), or the tokenizer give ids outside the
// table. The error names both keys.
func TestConfigVocabMismatch(t *testing.T) {
	for _, n := range []int{tiny.VocabSize - 1, tiny.VocabSize + 1} {
		tokens := make([]string, n)
		for i := range tokens {
			tokens[i] = fmt.Sprintf("t%d", i)
		}
		data, _ := tinyGGUF("", ggufbuild.KV{Key: "tokenizer.ggml.tokens", Value: tokens})
		_, err := llama.ConfigFromGGUF(decodertest.Open(t, data))
		if err == nil || !strings.Contains(err.Error(), "llama.vocab_size") || !strings.Contains(err.Error(), "tokenizer.ggml.tokens") {
			t.Errorf("%d tokens for llama.vocab_size = %d: error %v; want one naming both keys", n, tiny.VocabSize, err)
		}
	}
}
