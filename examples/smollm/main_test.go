package main

import (
	"slices"
	"testing"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/tokenizer"
)

// TestPromptIDs compares the ids the generation sends with llama.cpp's (llama-cpp-python 0.3.36,
// tokenize(add_bos=True, special=True) of the same text): Gemma-3's vocabulary asks for its BOS,
// without which the model's continuation is a repetition ("France of France of ..."); SmolLM2's
// does not.
func TestPromptIDs(t *testing.T) {
	for _, tc := range []struct {
		name, file, prompt string
		chat               bool
		want               []int
	}{
		{"smollm2/chat", assets.SmolLM2, "What is the capital of France?", true, []int{1, 9690, 198, 2683, 359, 253, 5356, 5646,
			11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 1780, 314, 260, 3575, 282, 4649,
			47, 2, 198, 1, 520, 9531, 198}},
		{"smollm2/raw", assets.SmolLM2, "What is the capital of France?", false, []int{1780, 314, 260, 3575, 282, 4649, 47}},
		{"gemma3/raw", assets.Gemma3, "The capital of France is", false, []int{2, 818, 5279, 529, 7001, 563}},
		// Gemma-3's file is a base model's, without a chat template: -chat sends the raw prompt, as
		// quanta run does (it was wrapped in SmolLM2's ChatML, whose markers Gemma reads as text).
		{"gemma3/chat", assets.Gemma3, "The capital of France is", true, []int{2, 818, 5279, 529, 7001, 563}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := gguf.Open(assets.Require(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			tok, err := tokenizer.NewBPEFromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			if got, _, _ := promptIDs(f, tok, tc.prompt, tc.chat, ""); !slices.Equal(got, tc.want) {
				t.Errorf("promptIDs(%q, chat %v) = %v; want %v", tc.prompt, tc.chat, got, tc.want)
			}
		})
	}
}
