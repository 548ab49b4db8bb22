package tokenizer_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/tokenizer"
)

// gemma3Dir holds llama.cpp's token ids for Gemma-3's vocabulary (reference/llamacpp.sh, which
// runs reference/gen_tokens.py on the Gemma-3 file).
var gemma3Dir = filepath.Join("..", "reference", "testdata", "tokenizer_gemma3")

// TestGemma3Reference compares Gemma-3's SentencePiece vocabulary with llama.cpp's ids of ~40
// strings (special tokens as text), of chat prompts (special tokens parsed, BOS added as the
// vocabulary asks) and of the GPL-3 text, and the detokenized strings.
func TestGemma3Reference(t *testing.T) {
	tok, f := assetBPE(t, assets.Gemma3)
	if !tok.SentencePiece() || tok.VocabSize() != 262144 || tok.BOS() != 2 || tok.EOS() != 1 {
		t.Errorf("SentencePiece %v, vocabulary %d, BOS %d, EOS %d", tok.SentencePiece(), tok.VocabSize(), tok.BOS(), tok.EOS())
	}
	type entry struct {
		Text        string `json:"text"`
		IDs         []int  `json:"ids"`
		Detokenized string `json:"detokenized"`
	}
	for _, set := range []struct {
		file string
		opts tokenizer.EncodeOptions
	}{
		{"strings.json", tokenizer.EncodeOptions{}},
		{"chat_strings.json", tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true}},
	} {
		raw, err := os.ReadFile(filepath.Join(gemma3Dir, set.file))
		if err != nil {
			t.Fatal(err)
		}
		var ref struct{ Strings []entry }
		if err := json.Unmarshal(raw, &ref); err != nil {
			t.Fatal(err)
		}
		for _, s := range ref.Strings {
			got := tok.Encode(s.Text, set.opts)
			if len(got) == 0 && len(s.IDs) == 0 {
				continue
			}
			if !reflect.DeepEqual(got, s.IDs) {
				t.Errorf("%s: Encode(%q) = %v\nllama.cpp:     %v", set.file, s.Text, got, s.IDs)
			}
			if s.Detokenized != "" || set.file == "strings.json" {
				if d := tok.Decode(s.IDs); d != s.Detokenized {
					t.Errorf("Decode(%v) = %q, llama.cpp %q", s.IDs, d, s.Detokenized)
				}
			}
		}
	}
	text, err := os.ReadFile(gpl3)
	if err != nil {
		t.Skipf("%s missing: the GPL-3 comparison needs it", gpl3)
	}
	for _, tc := range []struct {
		file string
		bos  bool
	}{{filepath.Join(gemma3Dir, "gpl3_ids.npy"), false}, {filepath.Join("..", "reference", "testdata", "llamacpp", "gemma3_eval_ids.npy"), true}} {
		want, err := readInt32Npy(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		got := tok.Encode(string(text), tokenizer.EncodeOptions{AddSpecial: tc.bos})
		for i, w := range want {
			if i >= len(got) || got[i] != int(w) {
				t.Fatalf("GPL-3 (BOS %v): first difference at token %d: got %v, llama.cpp %v", tc.bos, i, got[i:min(i+8, len(got))],
					want[i:min(i+8, len(want))])
			}
		}
		if got := tok.Decode(got); got != string(text) {
			t.Errorf("Decode(Encode(GPL-3)) differs from the text")
		}
	}
	if ct, err := tokenizer.ChatTemplateFromGGUF(f); !errors.Is(err, gguf.ErrNotFound) {
		t.Errorf("chat template %+v, %v; want gguf.ErrNotFound (the file, a base model's, has none)", ct, err)
	}
}

// TestSentencePieceByteFallback: a character no token covers becomes its UTF-8 bytes' tokens
// <0xXX>, which decode back to it; BOS comes only with AddSpecial (add_bos_token).
func TestSentencePieceByteFallback(t *testing.T) {
	tok, err := tokenizer.NewBPE(tokenizer.BPEConfig{
		Tokens:        []string{"<unk>", "<s>", "<0xE2>", "<0x98>", "<0x83>", "▁", "a", "b", "ab", "▁ab", "▁a"},
		Types:         []tokenizer.TokenType{tokenizer.Control, tokenizer.Control, 6, 6, 6, 1, 1, 1, 1, 1, 1},
		Scores:        []float32{0, 0, 0, 0, 0, -1, -2, -2, -1, -0.5, -3},
		SentencePiece: true, AddBOS: true, BOS: 1, EOS: -1, UNK: 0,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		text string
		opts tokenizer.EncodeOptions
		want []int
	}{
		// "▁ab" scores -0.5 but needs "▁a" (-3) or "ab" (-1) first: "ab" merges first, then "▁ab".
		{" ab", tokenizer.EncodeOptions{}, []int{9}},
		{"ab a", tokenizer.EncodeOptions{AddSpecial: true}, []int{1, 8, 10}},
		{"☃", tokenizer.EncodeOptions{}, []int{2, 3, 4}},
	} {
		got := tok.Encode(tc.text, tc.opts)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
		if d := tok.Decode(got); d != tc.text {
			t.Errorf("Decode(%v) = %q, want %q", got, d, tc.text)
		}
	}
}
