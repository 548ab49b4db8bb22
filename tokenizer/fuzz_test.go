package tokenizer_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/tokenizer"
)

// FuzzBPE builds a BPE tokenizer (byte-level or SentencePiece) from arbitrary GGUF bytes and encodes arbitrary text
// with it: the construction either fails with an error or gives a tokenizer whose ids are all in
// its vocabulary and whose Decode takes them back; all of it allocating in proportion to the
// input (`make fuzz` runs it under a memory limit).
func FuzzBPE(f *testing.F) {
	f.Add(toyBPEGGUF(), " ab a<|im_start|>1 2 3")
	f.Add(toyBPEGGUF(), "")
	f.Add(toyBPEGGUF(), "\xff\xfe café 中文\n\n  x")
	f.Add(toySPMGGUF(), " ab a<turn>☃ \xe2\x98 b")
	for _, pre := range []string{"llama-bpe", "qwen2"} {
		f.Add(toyBPEGGUF(ggufbuild.KV{Key: "tokenizer.ggml.pre", Value: pre}), "ab'S 1234 \t\r\n\n  x!!\n a\xff")
	}
	f.Fuzz(func(t *testing.T, data []byte, text string) {
		testutil.AllocatesAtMost(t, "tokenizer.NewBPEFromGGUF and Encode", 64*uint64(len(data)+len(text))+32<<20, func() {
			file, err := gguf.Read(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				return
			}
			tok, err := tokenizer.NewBPEFromGGUF(file)
			if err != nil {
				return
			}
			for _, opts := range []tokenizer.EncodeOptions{{}, {AddSpecial: true, ParseSpecial: true}} {
				ids := tok.Encode(text, opts)
				for _, id := range ids {
					if id < 0 || id >= tok.VocabSize() {
						t.Fatalf("Encode(%q) gave id %d outside the vocabulary of %d", text, id, tok.VocabSize())
					}
				}
				_ = tok.Decode(ids)
			}
		})
	})
}

// FuzzWordPiece builds a WordPiece tokenizer from an arbitrary tokenizer.json and encodes
// arbitrary text with it: the construction either fails with an error or gives a tokenizer
// whose ids are all in its vocabulary, at most MaxLength of them; all of it allocating in
// proportion to the input (`make fuzz` runs it under a memory limit).
func FuzzWordPiece(f *testing.F) {
	small, err := json.Marshal(map[string]any{
		"truncation":     map[string]any{"max_length": 8},
		"added_tokens":   []map[string]any{{"id": 4, "content": "[MASK]", "special": true}},
		"normalizer":     map[string]any{"type": "BertNormalizer", "lowercase": true, "clean_text": true, "handle_chinese_chars": true},
		"pre_tokenizer":  map[string]any{"type": "BertPreTokenizer"},
		"post_processor": map[string]any{"type": "TemplateProcessing", "special_tokens": map[string]any{"[CLS]": map[string]any{"ids": []int{2}}}},
		"model": map[string]any{"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
			"max_input_chars_per_word": 10, "vocab": map[string]int{"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4,
				"un": 5, "##aff": 6, "##able": 7, "a": 8, "中": 9}},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(small, "Unaffable [MASK] a中b, É!")
	f.Add(small, "aaaaaaaaaaaaaaaaaaaaaaaaa un##aff [CLS][SEP]")
	f.Fuzz(func(t *testing.T, data []byte, text string) {
		testutil.AllocatesAtMost(t, "tokenizer.json and Encode", 64*uint64(len(data)+len(text))+32<<20, func() {
			w, err := tokenizer.ParseWordPieceJSON(data)
			if err != nil {
				return
			}
			ids := w.Encode(text)
			if m := w.Options().MaxLength; m > 0 && len(ids) > m {
				t.Fatalf("Encode gave %d ids; MaxLength is %d", len(ids), m)
			}
			for _, id := range ids {
				if id < 0 || id >= w.VocabSize() {
					t.Fatalf("Encode(%q) gave id %d outside the vocabulary of %d", text, id, w.VocabSize())
				}
			}
		})
	})
}
