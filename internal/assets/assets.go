// Package assets locates the real models that `make assets` (scripts/fetch-assets.sh) fetches,
// for tests and examples: $QUANTA_ASSETS, or ${XDG_CACHE_HOME:-$HOME/.cache}/quanta/assets, as the
// script does. Tests that need a file call Require, which skips with one line when it is absent.
// It also reads Fashion-MNIST (ReadFashionMNIST), the data set of the training examples.
package assets

import (
	"os"
	"path/filepath"
	"testing"
)

// The files under the assets directory.
const (
	// SmolLM2 is SmolLM2-135M-Instruct in GGUF (Q4_1 linears, Q8_0 embeddings).
	SmolLM2 = "smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
	// Gemma3 is Gemma-3-270M in GGUF Q4_K_M (Q4_K, Q5_0, Q6_K and Q8_0 tensors).
	Gemma3 = "gemma3/gemma-3-270m-q4_k_m.gguf"
	// SmolLM2Quants is the folder of SmolLM2 in llama.cpp's block types that `make assets-quants`
	// writes (reference/llamacpp.sh quants): SmolLM2-135M-Instruct.<TYPE>.gguf.
	SmolLM2Quants = "smollm2-quants"
	// MiniLMWeights is all-MiniLM-L6-v2's fp32 checkpoint.
	MiniLMWeights = "minilm/model.safetensors"
	// MiniLMTokenizer is all-MiniLM-L6-v2's Hugging Face tokenizer.json.
	MiniLMTokenizer = "minilm/tokenizer.json"
	// MiniLMVocab is all-MiniLM-L6-v2's WordPiece vocabulary, one token a line.
	MiniLMVocab = "minilm/vocab.txt"
	// MiniLMConfig is all-MiniLM-L6-v2's config.json.
	MiniLMConfig = "minilm/config.json"
	// LlamaBPEVocab is llama.cpp's vocabulary-only GGUF file of Llama 3's tokenizer
	// ("tokenizer.ggml.pre" = "llama-bpe"). Beside it, as beside Qwen2Vocab, are llama.cpp's
	// tokenizer test cases (tests/test-tokenizer-0.cpp): the file name plus ".inp", the texts
	// separated by a line "__ggml_vocab_test__", and plus ".out", one line of ids per text.
	LlamaBPEVocab = "vocab/ggml-vocab-llama-bpe.gguf"
	// Qwen2Vocab is llama.cpp's vocabulary-only GGUF file of Qwen2's tokenizer ("qwen2").
	Qwen2Vocab = "vocab/ggml-vocab-qwen2.gguf"
)

// Dir returns the assets directory: $QUANTA_ASSETS when set, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/quanta/assets.
func Dir() string {
	if dir := os.Getenv("QUANTA_ASSETS"); dir != "" {
		return dir
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "quanta", "assets")
}

// Path returns the path of a file of the assets directory (one of the constants above).
func Path(name string) string { return filepath.Join(Dir(), name) }

// Require returns the path of the first named file, skipping the test with one line when any of
// the named files is missing.
func Require(t testing.TB, names ...string) string {
	t.Helper()
	for _, name := range names {
		if _, err := os.Stat(Path(name)); err != nil {
			t.Skipf("assets missing: run make assets (%s not found)", Path(name))
		}
	}
	if len(names) == 0 {
		return Dir()
	}
	return Path(names[0])
}
