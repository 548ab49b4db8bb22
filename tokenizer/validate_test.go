package tokenizer_test

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/tokenizer"
)

// toyBPEGGUF is the metadata of a small byte-level BPE vocabulary as a GGUF file holds it, with
// entries replaced or added by kvs.
func toyBPEGGUF(kvs ...ggufbuild.KV) []byte {
	base := []ggufbuild.KV{
		{Key: "tokenizer.ggml.model", Value: "gpt2"},
		{Key: "tokenizer.ggml.pre", Value: "smollm"},
		{Key: "tokenizer.ggml.tokens", Value: []string{"<|endoftext|>", "a", "b", "c", "Ġ", "ab", "Ġa", "Ġab", "1", "<|im_start|>"}},
		{Key: "tokenizer.ggml.token_type", Value: []int32{3, 1, 1, 1, 1, 1, 1, 1, 1, 3}},
		{Key: "tokenizer.ggml.merges", Value: []string{"Ġ a", "Ġa b", "a b"}},
		{Key: "tokenizer.ggml.bos_token_id", Value: uint32(0)},
		{Key: "tokenizer.ggml.eos_token_id", Value: uint32(0)},
	}
	return ggufbuild.Build(ggufbuild.Override(base, kvs...), nil)
}

// toySPMGGUF is a SentencePiece vocabulary (GGUF model "llama") in GGUF metadata: control
// tokens, byte tokens for the bytes of "☃", pieces with scores.
func toySPMGGUF(kvs ...ggufbuild.KV) []byte {
	base := []ggufbuild.KV{
		{Key: "tokenizer.ggml.model", Value: "llama"},
		{Key: "tokenizer.ggml.tokens", Value: []string{"<unk>", "<s>", "<0xE2>", "<0x98>", "<0x83>", "▁", "a", "b", "ab", "▁ab", "<turn>"}},
		{Key: "tokenizer.ggml.token_type", Value: []int32{3, 3, 6, 6, 6, 1, 1, 1, 1, 1, 3}},
		{Key: "tokenizer.ggml.scores", Value: []float32{0, 0, 0, 0, 0, -1, -2, -2, -1, -0.5, 0}},
		{Key: "tokenizer.ggml.bos_token_id", Value: uint32(1)},
		{Key: "tokenizer.ggml.unknown_token_id", Value: uint32(0)},
	}
	return ggufbuild.Build(ggufbuild.Override(base, kvs...), nil)
}

// oneTokenSPM overrides toySPMGGUF's vocabulary with one token, "<unk>": too short for the
// default BOS (1) and EOS (2) of a "llama" vocabulary.
var oneTokenSPM = []ggufbuild.KV{{Key: "tokenizer.ggml.tokens", Value: []string{"<unk>"}},
	{Key: "tokenizer.ggml.token_type", Value: []int32{2}}, {Key: "tokenizer.ggml.scores", Value: []float32{0}},
	{Key: "tokenizer.ggml.bos_token_id"}}

// TestSentencePieceFromGGUFMetadata: a "llama" vocabulary reads its scores and
// add_space_prefix (default true, as llama.cpp), adds BOS by default, and its scores must be one
// per token.
func TestSentencePieceFromGGUFMetadata(t *testing.T) {
	for _, tc := range []struct {
		name string
		kvs  []ggufbuild.KV
		text string
		want []int
	}{
		{"defaults: BOS, space prefix", nil, "ab", []int{1, 9}},
		{"no space prefix", []ggufbuild.KV{{Key: "tokenizer.ggml.add_space_prefix", Value: false}}, "ab", []int{1, 8}},
		{"no BOS", []ggufbuild.KV{{Key: "tokenizer.ggml.add_bos_token", Value: false}}, "ab☃", []int{9, 2, 3, 4}},
		{"special token", []ggufbuild.KV{{Key: "tokenizer.ggml.add_space_prefix", Value: false}}, "ab<turn>ab", []int{1, 8, 10, 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := bpeFromGGUF(t, toySPMGGUF(tc.kvs...))
			if err != nil {
				t.Fatal(err)
			}
			if got := tok.Encode(tc.text, tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true}); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		kv   ggufbuild.KV
		want string
	}{
		{ggufbuild.KV{Key: "tokenizer.ggml.scores", Value: []float32{0, 1}},
			"tokenizer.ggml.scores has 2 entries; accepted: one per token of tokenizer.ggml.tokens (11)"},
		{ggufbuild.KV{Key: "tokenizer.ggml.scores", Value: "high"}, "tokenizer.ggml.scores"},
		// NaN compares neither above, below nor equal to any score: the merge order would be undefined.
		{ggufbuild.KV{Key: "tokenizer.ggml.scores", Value: []float32{0, 0, 0, 0, 0, -1, -2, -2, float32(math.NaN()), -0.5, 0}},
			`tokenizer.NewBPE: token 8 ("ab") has score NaN (tokenizer.ggml.scores); accepted: a number`},
		{ggufbuild.KV{Key: "tokenizer.ggml.model", Value: "bert"}, `tokenizer model "bert"; accepted: "gpt2" (byte-level BPE), "llama" (SentencePiece BPE)`},
	} {
		t.Run(tc.kv.Key, func(t *testing.T) {
			if _, err := bpeFromGGUF(t, toySPMGGUF(tc.kv)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want one containing %q", err, tc.want)
			}
		})
	}
}

// TestSentencePieceDefaultSpecialIDs: a "llama" vocabulary without bos_token_id, eos_token_id or
// unknown_token_id takes llama.cpp's defaults for its SPM type (BOS 1, EOS 2, UNK 0), each only
// where the vocabulary has that id (llama.cpp disables a default beyond it); the default BOS
// added by default, when the vocabulary is too short for it, is an error naming the keys.
func TestSentencePieceDefaultSpecialIDs(t *testing.T) {
	noIDs := []ggufbuild.KV{{Key: "tokenizer.ggml.bos_token_id"}, {Key: "tokenizer.ggml.unknown_token_id"},
		{Key: "tokenizer.ggml.add_space_prefix", Value: false}}
	tok, err := bpeFromGGUF(t, toySPMGGUF(noIDs...))
	if err != nil {
		t.Fatal(err)
	}
	if tok.BOS() != 1 || tok.EOS() != 2 {
		t.Errorf("BOS %d, EOS %d; want llama.cpp's defaults 1, 2", tok.BOS(), tok.EOS())
	}
	// "x" is neither a token nor a byte token: the unknown token, 0 by default.
	if got := tok.Encode("abx", tokenizer.EncodeOptions{AddSpecial: true}); !reflect.DeepEqual(got, []int{1, 8, 0}) {
		t.Errorf("Encode(\"abx\", AddSpecial) = %v, want [1 8 0] (BOS 1, ab, UNK 0)", got)
	}
	// Two tokens: no id 2, so no EOS.
	short := append(noIDs, ggufbuild.KV{Key: "tokenizer.ggml.tokens", Value: []string{"<unk>", "<s>"}},
		ggufbuild.KV{Key: "tokenizer.ggml.token_type", Value: []int32{2, 3}},
		ggufbuild.KV{Key: "tokenizer.ggml.scores", Value: []float32{0, 0}})
	if tok, err = bpeFromGGUF(t, toySPMGGUF(short...)); err != nil {
		t.Fatal(err)
	} else if tok.BOS() != 1 || tok.EOS() != -1 {
		t.Errorf("two tokens: BOS %d, EOS %d; want 1, -1 (none)", tok.BOS(), tok.EOS())
	}
	// One token: no id 1 for the BOS that a "llama" vocabulary adds by default.
	_, err = bpeFromGGUF(t, toySPMGGUF(append(noIDs, oneTokenSPM...)...))
	for _, w := range []string{"tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id", "1 token"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("one token: error %v; want one naming %s", err, w)
		}
	}
}

// TestBPEWithoutPreTokenizer: a byte-level vocabulary without tokenizer.ggml.pre (llama.cpp splits
// it with a "default" pre-tokenizer this package lacks) is refused naming the key and the
// pre-tokenizers accepted, not with a bare "key not found".
func TestBPEWithoutPreTokenizer(t *testing.T) {
	_, err := bpeFromGGUF(t, toyBPEGGUF(ggufbuild.KV{Key: "tokenizer.ggml.pre"}))
	if err == nil || !strings.Contains(err.Error(), "no tokenizer.ggml.pre") || !strings.Contains(err.Error(), `"llama-bpe"`) {
		t.Errorf("error %v; want one naming tokenizer.ggml.pre and the accepted pre-tokenizers", err)
	}
}

func bpeFromGGUF(t *testing.T, data []byte) (*tokenizer.BPE, error) {
	t.Helper()
	return tokenizer.NewBPEFromGGUF(testutil.FromBytes(t, gguf.Read, data))
}

// TestPreTokenizerBOSDefault: as llama.cpp, a "llama-bpe" vocabulary adds BOS unless
// add_bos_token says otherwise; the other pre-tokenizers add it only when it says so.
func TestPreTokenizerBOSDefault(t *testing.T) {
	for _, tc := range []struct {
		pre    string
		addBOS any // nil: no add_bos_token
		want   []int
	}{
		{"llama-bpe", nil, []int{0, 1}},
		{"llama-bpe", false, []int{1}},
		{"qwen2", nil, []int{1}},
		{"qwen2", true, []int{0, 1}},
		{"smollm", nil, []int{1}},
	} {
		tok, err := bpeFromGGUF(t, toyBPEGGUF(ggufbuild.KV{Key: "tokenizer.ggml.pre", Value: tc.pre},
			ggufbuild.KV{Key: "tokenizer.ggml.add_bos_token", Value: tc.addBOS}))
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Encode("a", tokenizer.EncodeOptions{AddSpecial: true}); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s, add_bos_token %v: Encode(\"a\", AddSpecial) = %v, want %v", tc.pre, tc.addBOS, got, tc.want)
		}
	}
}

// TestPreTokenizerAliases: the names llama.cpp's src/llama-vocab.cpp gives its GPT-2, Llama 3
// and Qwen2 pre-tokenizer types read as those rule sets (the Llama 3 ones adding BOS by default,
// as "llama-bpe"); "gpt-2" is what llama.cpp's converter writes for GPT-2 itself. A name whose
// type adds a SEP token, which this package does not, stays an error listing the names accepted.
func TestPreTokenizerAliases(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  tokenizer.PreTokenizer
		bos   []int
	}{
		{[]string{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum", "modern-bert", "exaone4"},
			tokenizer.PreGPT2, []int{1}},
		{[]string{"llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"}, tokenizer.PreLlamaBPE, []int{0, 1}},
		{[]string{"deepseek-r1-qwen", "kormo", "f2llmv2", "megrez"}, tokenizer.PreQwen2, []int{1}},
	} {
		for _, name := range tc.names {
			tok, err := bpeFromGGUF(t, toyBPEGGUF(ggufbuild.KV{Key: "tokenizer.ggml.pre", Value: name}))
			if err != nil {
				t.Errorf("%q: %v", name, err)
				continue
			}
			if got := tok.PreTokenizer(); got != tc.want {
				t.Errorf("%q: PreTokenizer() = %q, want %q", name, got, tc.want)
			}
			if got := tok.Encode("a", tokenizer.EncodeOptions{AddSpecial: true}); !reflect.DeepEqual(got, tc.bos) {
				t.Errorf("%q: Encode(\"a\", AddSpecial) = %v, want %v", name, got, tc.bos)
			}
		}
	}
	_, err := bpeFromGGUF(t, toyBPEGGUF(ggufbuild.KV{Key: "tokenizer.ggml.pre", Value: "jina-v1-en"}))
	if err == nil || !strings.Contains(err.Error(), `"jina-v1-en"; accepted: `) || !strings.Contains(err.Error(), `"gpt-2"`) {
		t.Errorf("pre-tokenizer \"jina-v1-en\": error %v; want one naming it and the names accepted", err)
	}
}

// TestBPEFromGGUFMetadata: special-token ids and token types that do not fit the vocabulary are
// errors naming the metadata key and the vocabulary size.
func TestBPEFromGGUFMetadata(t *testing.T) {
	tok, err := bpeFromGGUF(t, toyBPEGGUF())
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode(" ab a", tokenizer.EncodeOptions{}); len(got) != 2 || got[0] != 7 || got[1] != 6 {
		t.Errorf("Encode(\" ab a\") = %v, want [7 6]", got)
	}
	for _, tc := range []struct {
		kv   ggufbuild.KV
		want string
	}{
		{ggufbuild.KV{Key: "tokenizer.ggml.bos_token_id", Value: uint32(1 << 30)},
			"tokenizer.ggml.bos_token_id = 1073741824; accepted: an id below the vocabulary size 10 (tokenizer.ggml.tokens)"},
		{ggufbuild.KV{Key: "tokenizer.ggml.eos_token_id", Value: uint32(10)},
			"tokenizer.ggml.eos_token_id = 10; accepted: an id below the vocabulary size 10"},
		{ggufbuild.KV{Key: "tokenizer.ggml.unknown_token_id", Value: uint64(1) << 63},
			"tokenizer.ggml.unknown_token_id = 9223372036854775808; accepted: an id below the vocabulary size 10"},
		{ggufbuild.KV{Key: "tokenizer.ggml.bos_token_id", Value: int32(-2)}, `"tokenizer.ggml.bos_token_id" is -2`},
		{ggufbuild.KV{Key: "tokenizer.ggml.token_type", Value: []int32{1, 1}},
			"tokenizer.ggml.token_type has 2 entries; accepted: one per token of tokenizer.ggml.tokens (10)"},
		{ggufbuild.KV{Key: "tokenizer.ggml.merges", Value: []string{"ab"}}, `merge #0 "ab" has no space`},
		{ggufbuild.KV{Key: "tokenizer.ggml.tokens", Value: []string{}}, "tokenizer.ggml.bos_token_id = 0; accepted: an id below the vocabulary size 0"},
		// llama-cpp-python 0.3.36 aborts on it: GGML_ASSERT(id_to_token.size() == token_to_id.size()).
		{ggufbuild.KV{Key: "tokenizer.ggml.tokens", Value: []string{"<|endoftext|>", "a", "b", "c", "Ġ", "ab", "Ġa", "Ġab", "a", "<|im_start|>"}},
			`tokenizer.NewBPE: tokens 1 and 8 are both "a"; accepted: distinct token texts`},
		// llama.cpp renames the empty token 2 "[EMPTY_2]", which token 8 already is, and aborts on
		// the same assertion, whichever comes first.
		{ggufbuild.KV{Key: "tokenizer.ggml.tokens", Value: []string{"<|endoftext|>", "a", "", "c", "Ġ", "ab", "Ġa", "Ġab", "[EMPTY_2]", "<|im_start|>"}},
			`tokenizer.NewBPE: token 2 is empty and token 8 is "[EMPTY_2]", the name llama.cpp gives an empty token 2; accepted: distinct token texts`},
		{ggufbuild.KV{Key: "tokenizer.ggml.tokens", Value: []string{"<|endoftext|>", "a", "b", "c", "Ġ", "[EMPTY_8]", "Ġa", "Ġab", "", "<|im_start|>"}},
			`tokenizer.NewBPE: token 8 is empty and token 5 is "[EMPTY_8]", the name llama.cpp gives an empty token 8; accepted: distinct token texts`},
	} {
		t.Run(tc.kv.Key, func(t *testing.T) {
			if _, err := bpeFromGGUF(t, toyBPEGGUF(tc.kv)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want one containing %q", err, tc.want)
			}
		})
	}
}

// TestWordPieceJSONIDs: the special-token ids of a tokenizer.json (added tokens, post-processor)
// must be ids of its vocabulary, the rows a model's embedding table has.
func TestWordPieceJSONIDs(t *testing.T) {
	j := func(added, cls int) []byte {
		v := map[string]any{
			"added_tokens":   []map[string]any{{"id": added, "content": "[MASK]", "special": true}},
			"normalizer":     map[string]any{"type": "BertNormalizer", "lowercase": true, "clean_text": true},
			"pre_tokenizer":  map[string]any{"type": "BertPreTokenizer"},
			"post_processor": map[string]any{"type": "TemplateProcessing", "special_tokens": map[string]any{"[CLS]": map[string]any{"ids": []int{cls}}}},
			"model": map[string]any{"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
				"max_input_chars_per_word": 100, "vocab": map[string]int{"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "a": 5}},
		}
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	for _, tc := range []struct {
		name string
		json []byte
		want string
	}{
		{"valid", j(4, 2), ""},
		{"added id 2^40", j(1<<40, 2), `added token "[MASK]" has id 1099511627776; accepted: an id below the vocabulary size 6`},
		{"added id -1", j(-1, 2), `added token "[MASK]" has id -1`},
		{"CLS id 6", j(4, 6), "post_processor special token [CLS] has id 6; accepted: an id below the vocabulary size 6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := testutil.TempFile(t, "tokenizer.json", tc.json)
			w, err := tokenizer.NewWordPieceFromJSON(path)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := w.Encode("a [MASK]"); len(got) != 4 || got[0] != 2 || got[1] != 5 || got[2] != 4 || got[3] != 3 {
					t.Errorf("Encode(\"a [MASK]\") = %v, want [2 5 4 3]", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want one containing %q", err, tc.want)
			}
		})
	}
}

// TestWordPieceJSONText: a tokenizer.json whose text Hugging Face's tokenizers (serde_json) refuses
// is an error, not a vocabulary with a token renamed U+FFFD (encoding/json's reading): a lone UTF-16
// surrogate escape, high or low, and bytes that are not UTF-8. tokenizers 0.23.3 gave, for the
// same files: "unexpected end of hex escape", "lone leading surrogate in hex escape", "stream did
// not contain valid UTF-8"; and loaded the pair \ud83d\ude00 as 😀.
func TestWordPieceJSONText(t *testing.T) {
	const template = `{"added_tokens": [{"id": 0, "content": "[PAD]", "special": true}],
"normalizer": {"type": "BertNormalizer", "clean_text": true, "lowercase": true},
"pre_tokenizer": {"type": "BertPreTokenizer"},
"model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
"vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "a": 4, TOKEN: 5}}}`
	for _, tc := range []struct {
		name, token, want string
	}{
		{"pair", `"\ud83d\ude00"`, ""},
		{"escaped backslash", `"\\ud800"`, ""}, // the text \ud800, no escape
		{"lone high", `"\ud800"`, `lone UTF-16 surrogate escape \ud800 in "\ud800"`},
		{"lone low", `"\uDC00"`, `lone UTF-16 surrogate escape \uDC00`},
		{"high then a letter", `"\ud800x"`, `lone UTF-16 surrogate escape \ud800`},
		{"low then high", `"\udc00\ud800"`, `lone UTF-16 surrogate escape \udc00`},
		{"not UTF-8", "\"\xff\"", "tokenizer.json is not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := testutil.TempFile(t, "tokenizer.json", []byte(strings.Replace(template, "TOKEN", tc.token, 1)))
			w, err := tokenizer.NewWordPieceFromJSON(path)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if w.VocabSize() != 6 {
					t.Errorf("vocabulary of %d; want 6", w.VocabSize())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want one containing %q", err, tc.want)
			}
		})
	}
}
