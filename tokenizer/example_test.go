package tokenizer_test

import (
	"fmt"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/tokenizer"
)

// Byte-level BPE with a hand-made vocabulary: "Ġ" is the space of GPT-2's byte alphabet; each
// digit is a word of its own under the "smollm" pre-tokenizer.
func ExampleBPE() {
	tok, err := tokenizer.NewBPE(tokenizer.BPEConfig{
		Tokens: []string{"<|im_end|>", "l", "o", "w", "Ġ", "lo", "low", "Ġlow", "1", "2", "12"},
		Types:  []tokenizer.TokenType{tokenizer.Control, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
		Merges: []string{"l o", "lo w", "Ġ low", "1 2"},
		Pre:    tokenizer.PreSmolLM, BOS: -1, EOS: 0, UNK: -1,
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%q\n", tokenizer.PreSmolLM.Split("low low 12"))
	ids := tok.Encode("low low 12<|im_end|>", tokenizer.EncodeOptions{ParseSpecial: true})
	fmt.Println(ids)
	fmt.Printf("%q\n", tok.Decode(ids))
	// Output:
	// ["low" " low" " " "1" "2"]
	// [6 7 4 8 9 0]
	// "low low 12"
}

// WordPiece with a hand-made vocabulary and the uncased BERT rules.
func ExampleWordPiece() {
	w, err := tokenizer.NewWordPiece([]string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able", "café", "cafe", "!"},
		tokenizer.BertOptions())
	if err != nil {
		panic(err)
	}
	fmt.Println(w.Tokenize("Unaffable CAFÉ!"))
	fmt.Println(w.Encode("Unaffable CAFÉ!"))
	// Output:
	// [un ##aff ##able cafe !]
	// [2 4 5 6 8 9 3]
}

// The SmolLM2 tokenizer from its GGUF file.
func ExampleNewBPEFromGGUF() {
	f, err := gguf.Open("SmolLM2-135M-Instruct.Q4_1.gguf")
	if err != nil {
		panic(err)
	}
	defer f.Close()
	tok, err := tokenizer.NewBPEFromGGUF(f)
	if err != nil {
		panic(err)
	}
	prompt := "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
	fmt.Println(tok.Encode(prompt, tokenizer.EncodeOptions{ParseSpecial: true}))
}
