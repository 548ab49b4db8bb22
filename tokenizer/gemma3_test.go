package tokenizer_test

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
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

// spmDir holds llama.cpp's ids and detokenized text for a Llama-2-style variant of Gemma-3's
// vocabulary (reference/gen_spm_vocab.py: add_space_prefix true, some token types changed).
var spmDir = filepath.Join("..", "reference", "testdata", "tokenizer_spm")

// TestSentencePieceSpacePrefixReference compares the Llama-2-style variant of Gemma-3's
// vocabulary with llama.cpp: Encode with and without AddSpecial and ParseSpecial, and Decode as
// llama_detokenize (the first token's leading space removed).
func TestSentencePieceSpacePrefixReference(t *testing.T) {
	f := openAsset(t, assets.Gemma3)
	var index struct {
		Variant struct {
			AddSpacePrefix bool           `json:"tokenizer.ggml.add_space_prefix"`
			TokenTypes     map[string]int `json:"token_types"`
		}
	}
	var strs struct {
		Strings []struct {
			Text string
			Runs []struct {
				AddSpecial   bool   `json:"add_special"`
				ParseSpecial bool   `json:"parse_special"`
				IDs          []int  `json:"ids"`
				Detokenized  string `json:"detokenized_hex"`
			}
		}
	}
	var dec struct {
		Decode []struct {
			IDs         []int  `json:"ids"`
			Detokenized string `json:"detokenized_hex"`
		}
	}
	for name, dst := range map[string]any{"index.json": &index, "strings.json": &strs, "decode.json": &dec} {
		raw, err := os.ReadFile(filepath.Join(spmDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	tokens, err := f.Strings("tokenizer.ggml.tokens")
	if err != nil {
		t.Fatal(err)
	}
	scores, err := gguf.Get[[]float32](f, "tokenizer.ggml.scores")
	if err != nil {
		t.Fatal(err)
	}
	rawTypes, err := gguf.Get[[]int32](f, "tokenizer.ggml.token_type")
	if err != nil {
		t.Fatal(err)
	}
	types := make([]tokenizer.TokenType, len(rawTypes))
	for i, v := range rawTypes {
		types[i] = tokenizer.TokenType(v)
	}
	for id, typ := range index.Variant.TokenTypes {
		i, err := strconv.Atoi(id)
		if err != nil {
			t.Fatal(err)
		}
		types[i] = tokenizer.TokenType(typ)
	}
	tok, err := tokenizer.NewBPE(tokenizer.BPEConfig{
		Tokens: tokens, Types: types, Scores: scores, SentencePiece: true, AddSpacePrefix: index.Variant.AddSpacePrefix,
		BOS: 2, EOS: 1, UNK: 3, AddBOS: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	unhex := func(s string) string {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, s := range strs.Strings {
		for _, r := range s.Runs {
			opts := tokenizer.EncodeOptions{AddSpecial: r.AddSpecial, ParseSpecial: r.ParseSpecial}
			if got := tok.Encode(s.Text, opts); !(len(got) == 0 && len(r.IDs) == 0) && !reflect.DeepEqual(got, r.IDs) {
				t.Errorf("Encode(%q, %+v) = %v\nllama.cpp:     %v", s.Text, opts, got, r.IDs)
			}
			if got, want := tok.Decode(r.IDs), unhex(r.Detokenized); got != want {
				t.Errorf("Decode(%v) = %q, llama.cpp %q (Encode(%q, %+v))", r.IDs, got, want, s.Text, opts)
			}
		}
	}
	for _, d := range dec.Decode {
		if got, want := tok.Decode(d.IDs), unhex(d.Detokenized); got != want {
			t.Errorf("Decode(%v) = %q, llama.cpp %q", d.IDs, got, want)
		}
	}
}
