package tokenizer_test

import (
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/tokenizer"
)

func containsString(s, sub string) bool { return strings.Contains(s, sub) }

// openAsset opens the GGUF file of the asset name (the test is skipped without it), closed when
// the test ends.
func openAsset(t *testing.T, name string) *gguf.File {
	t.Helper()
	f, err := gguf.Open(assets.Require(t, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// assetBPE is the tokenizer of the GGUF asset name, and its file.
func assetBPE(t *testing.T, name string) (*tokenizer.BPE, *gguf.File) {
	t.Helper()
	f := openAsset(t, name)
	tok, err := tokenizer.NewBPEFromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return tok, f
}
