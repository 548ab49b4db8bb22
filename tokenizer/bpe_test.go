package tokenizer_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/tokenizer"
)

// splitCase is a text and its splits under a pair of pre-tokenizers: want under the first, alt
// under the second where it differs (nil: want).
type splitCase struct {
	text      string
	want, alt []string
}

// testSplits checks each case's splits under first and second, as a subtest named by its text.
func testSplits(t *testing.T, first, second tokenizer.PreTokenizer, tests []splitCase) {
	for _, tc := range tests {
		t.Run(tc.text, func(t *testing.T) {
			if got := first.Split(tc.text); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s: %q, want %q", first, got, tc.want)
			}
			want := tc.alt
			if want == nil {
				want = tc.want
			}
			if got := second.Split(tc.text); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: %q, want %q", second, got, want)
			}
		})
	}
}

// The splits below are derived by hand from llama.cpp's rules (see PreTokenizer's documentation):
// smollm's, then gpt2's where they differ.
func TestPreTokenizerSplit(t *testing.T) {
	testSplits(t, tokenizer.PreSmolLM, tokenizer.PreGPT2, []splitCase{
		{"Hello world", []string{"Hello", " world"}, nil},
		{"0. Definitions", []string{"0", ".", " Definitions"}, nil},
		{"a  0", []string{"a", "  ", "0"}, []string{"a", " ", " 0"}},
		{"x\n 5", []string{"x", "\n ", "5"}, []string{"x", "\n", " 5"}},
		{"12345", []string{"1", "2", "3", "4", "5"}, []string{"12345"}},
		{"2nd", []string{"2", "nd"}, []string{"2", "nd"}},
		{"v½", []string{"v", "½"}, []string{"v", "½"}},
		{"it's", []string{"it", "'s"}, nil},
		{"we're they've I'll she'd I'm", []string{"we", "'re", " they", "'ve", " I", "'ll", " she", "'d", " I", "'m"}, nil},
		{"DON'T", []string{"DON", "'", "T"}, nil},
		{"x'", []string{"x", "'"}, nil},
		{"  indented", []string{" ", " indented"}, nil},
		{"hello    world", []string{"hello", "   ", " world"}, nil},
		{"trailing   ", []string{"trailing", "   "}, nil},
		{"\n\n\n", []string{"\n\n\n"}, nil},
		{"a\tb", []string{"a", "\t", "b"}, nil},
		{"a \nb", []string{"a", " ", "\n", "b"}, nil},
		{"...!? x", []string{"...!?", " x"}, nil},
		{"a+b_c", []string{"a", "+", "b", "_", "c"}, nil},
		{"café 日本語", []string{"café", " 日本語"}, nil},
		{"emoji 😀🎉", []string{"emoji", " 😀🎉"}, nil},
		{" ", []string{" "}, nil},
		{"", []string{}, nil},
		{"a\xffb", []string{"a", "\uFFFD", "b"}, nil},
	})
}

// The splits below are derived by hand from Llama 3's rules (see PreTokenizer's documentation);
// qwen2 differs only where numbers are, given second.
func TestPreTokenizerSplitLlama3(t *testing.T) {
	testSplits(t, tokenizer.PreLlamaBPE, tokenizer.PreQwen2, []splitCase{
		{"Hello world", []string{"Hello", " world"}, nil},
		{"12345", []string{"123", "45"}, []string{"1", "2", "3", "4", "5"}},
		{"2nd 4½", []string{"2", "nd", " ", "4½"}, []string{"2", "nd", " ", "4", "½"}},
		{"½x", []string{"½", "x"}, nil},
		{"x  5", []string{"x", " ", " ", "5"}, nil},
		{"it's DON'T we'RE I'Ll", []string{"it", "'s", " DON", "'T", " we", "'RE", " I", "'Ll"}, nil},
		{"' era", []string{"'", " era"}, nil},
		{"x'", []string{"x", "'"}, nil},
		{"'x", []string{"'x"}, nil},
		{"  Hello", []string{" ", " Hello"}, nil},
		{"\tHello", []string{"\tHello"}, nil},
		{"\n Hello", []string{"\n", " Hello"}, nil},
		{"x   y", []string{"x", "  ", " y"}, nil},
		{"x   ", []string{"x", "   "}, nil},
		{"a \n\n b", []string{"a", " \n\n", " b"}, nil},
		{"a\r\n\r\nb", []string{"a", "\r\n\r\n", "b"}, nil},
		{"(normal) !!!\r\n", []string{"(normal", ")", " !!!\r\n"}, nil},
		{"a+b", []string{"a", "+b"}, nil},
		{"...!? x", []string{"...!?", " x"}, nil},
		{"café 日本語 😀🎉", []string{"café", " 日本語", " 😀🎉"}, nil},
		{"", []string{}, nil},
		{"a\xffb", []string{"a", "\uFFFDb"}, nil},
	})
}

// TestIgnoreMerges: under "llama-bpe" a word that is a token is that token even where no merge
// leads to it (llama.cpp's ignore_merges: " Việt" is one token of Llama 3's vocabulary, three by
// its merges); other pre-tokenizers merge.
func TestIgnoreMerges(t *testing.T) {
	for _, tc := range []struct {
		pre  tokenizer.PreTokenizer
		want []int
	}{{tokenizer.PreLlamaBPE, []int{4}}, {tokenizer.PreQwen2, []int{3, 2}}, {tokenizer.PreGPT2, []int{3, 2}}} {
		tok, err := tokenizer.NewBPE(tokenizer.BPEConfig{Tokens: []string{"a", "b", "c", "ab", "abc"}, Merges: []string{"a b"},
			Pre: tc.pre, BOS: -1, EOS: -1, UNK: -1})
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Encode("abc", tokenizer.EncodeOptions{}); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Encode(\"abc\") = %v, want %v", tc.pre, got, tc.want)
		}
	}
}

// toyBPE has a vocabulary small enough to BPE by hand. "Ġ" is the byte-level space, "Ċ" the
// newline.
func toyBPE(t *testing.T, merges ...string) *tokenizer.BPE {
	t.Helper()
	tokens := []string{"<s>", "</s>", "a", "b", "c", "ab", "bc", "abc", "aa", "Ġ", "Ġa", "Ċ", "<", "s", ">", "/", "1", "2", "<u>"}
	types := make([]tokenizer.TokenType, len(tokens))
	for i := range types {
		types[i] = tokenizer.Normal
	}
	types[0], types[1], types[18] = tokenizer.Control, tokenizer.Control, tokenizer.UserDefined
	tok, err := tokenizer.NewBPE(tokenizer.BPEConfig{
		Tokens: tokens, Types: types, Merges: merges, Pre: tokenizer.PreSmolLM,
		BOS: 0, EOS: 1, UNK: -1, AddBOS: true, AddEOS: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestBPEEncode(t *testing.T) {
	const (
		bos, eos, a, b, c, ab, bc, abc, aa, sp, spA, nl, lt, s, gt, slash, one, two, user = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18
	)
	tests := []struct {
		name   string
		merges []string
		text   string
		opts   tokenizer.EncodeOptions
		want   []int
	}{
		// (b,c) has rank 0, (a,b) rank 1: bc first, then (a,bc) at rank 2.
		{"lowest rank first", []string{"b c", "a b", "a bc"}, "abc", tokenizer.EncodeOptions{}, []int{abc}},
		// (a,b) first; (ab,c) is no merge.
		{"no further merge", []string{"a b", "b c"}, "abc", tokenizer.EncodeOptions{}, []int{ab, c}},
		// equal ranks: the leftmost pair merges first.
		{"leftmost on ties", []string{"a a"}, "aaa", tokenizer.EncodeOptions{}, []int{aa, a}},
		{"space is Ġ", []string{"Ġ a"}, "a a", tokenizer.EncodeOptions{}, []int{a, spA}},
		{"newline is Ċ", nil, "a\nb", tokenizer.EncodeOptions{}, []int{a, nl, b}},
		{"digits split", []string{"1 2"}, "12", tokenizer.EncodeOptions{}, []int{one, two}},
		{"add special", nil, "a", tokenizer.EncodeOptions{AddSpecial: true}, []int{bos, a, eos}},
		{"control as text", nil, "a<s>b", tokenizer.EncodeOptions{}, []int{a, lt, s, gt, b}},
		{"control parsed", nil, "a<s>b</s>", tokenizer.EncodeOptions{ParseSpecial: true}, []int{a, bos, b, eos}},
		{"longest special first", nil, "</s><s>", tokenizer.EncodeOptions{ParseSpecial: true}, []int{eos, bos}},
		{"user-defined always", nil, "a<u>b", tokenizer.EncodeOptions{}, []int{a, user, b}},
		{"empty", nil, "", tokenizer.EncodeOptions{}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := toyBPE(t, tc.merges...).Encode(tc.text, tc.opts)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
			}
		})
	}
}

func TestBPEDecode(t *testing.T) {
	tok := toyBPE(t, "Ġ a")
	if got := tok.Decode([]int{0, 2, 10, 11, 1, 18, 99}); got != "a a\n<u>" {
		t.Errorf("Decode = %q, want %q (control tokens and unknown ids dropped)", got, "a a\n<u>")
	}
	if got := string(tok.Bytes(0)); got != "<s>" {
		t.Errorf("Bytes(<s>) = %q", got)
	}
	if got := tok.Bytes(9); !reflect.DeepEqual(got, []byte(" ")) {
		t.Errorf("Bytes(Ġ) = %q", got)
	}
	for _, tc := range []struct {
		id   int
		want []byte
	}{{0, nil}, {9, []byte(" ")}, {18, []byte("<u>")}, {99, nil}, {-1, nil}} {
		if got := tok.Piece(tc.id); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Piece(%d) = %q, want %q (what Decode writes for it)", tc.id, got, tc.want)
		}
	}
}

func TestNewBPEErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  tokenizer.BPEConfig
		want string
	}{
		{"empty", tokenizer.BPEConfig{Pre: tokenizer.PreGPT2}, "empty vocabulary"},
		{"pre", tokenizer.BPEConfig{Tokens: []string{"a"}, Pre: "llama3", BOS: -1, EOS: -1, UNK: -1}, `pre-tokenizer "llama3"`},
		{"types", tokenizer.BPEConfig{Tokens: []string{"a"}, Types: []tokenizer.TokenType{1, 1}, Pre: tokenizer.PreGPT2}, "2 token types for 1 tokens"},
		{"merge", tokenizer.BPEConfig{Tokens: []string{"a"}, Merges: []string{"ab"}, Pre: tokenizer.PreGPT2, BOS: -1, EOS: -1, UNK: -1}, `merge #0 "ab"`},
		{"bos", tokenizer.BPEConfig{Tokens: []string{"a"}, Pre: tokenizer.PreGPT2, BOS: 5, EOS: -1, UNK: -1}, "BOS id 5; accepted: -1 (none) or an id below the vocabulary size 1"},
		{"add bos", tokenizer.BPEConfig{Tokens: []string{"a"}, Pre: tokenizer.PreGPT2, BOS: -1, EOS: -1, UNK: -1, AddBOS: true}, "without a BOS"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tokenizer.NewBPE(tc.cfg)
			if err == nil || !containsString(err.Error(), tc.want) {
				t.Errorf("error %v; want one containing %q", err, tc.want)
			}
		})
	}
}

// TestAddSpecialWithoutID: add_bos_token (or the default of a "llama" vocabulary or of the
// "llama-bpe" pre-tokenizer) without a BOS id (a "llama" vocabulary's default, 1, beyond its one token),
// or add_eos_token without an EOS id, is an error naming the keys, as every other metadata error
// of NewBPEFromGGUF, not NewBPE's field names (AddBOS/AddEOS), which a GGUF file does not have.
func TestAddSpecialWithoutID(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want []string
	}{
		{"llama default BOS", toySPMGGUF(oneTokenSPM...),
			[]string{"tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id"}},
		{"llama-bpe default BOS", toyBPEGGUF(ggufbuild.KV{Key: "tokenizer.ggml.bos_token_id"}, ggufbuild.KV{Key: "tokenizer.ggml.pre", Value: "llama-bpe"}),
			[]string{"tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id"}},
		{"add_eos_token", toyBPEGGUF(ggufbuild.KV{Key: "tokenizer.ggml.eos_token_id"}, ggufbuild.KV{Key: "tokenizer.ggml.add_eos_token", Value: true}),
			[]string{"tokenizer.ggml.add_eos_token", "tokenizer.ggml.eos_token_id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bpeFromGGUF(t, tc.data)
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v; want one naming %s", err, w)
				}
			}
		})
	}
}

// TestPartitionManySpecialTokens: a text cut by one special token into many fragments is not
// walked again for every other special token of the vocabulary (Gemma-3 has 6414): rebuilding
// the fragment list for each would allocate special tokens × fragments (seconds for a long
// prompt on Gemma-3's vocabulary); a token absent from the text is skipped.
func TestPartitionManySpecialTokens(t *testing.T) {
	const reserved, turns = 2000, 5000
	tokens := []string{"x", "<|a_long_turn_marker_token|>"}
	types := []tokenizer.TokenType{tokenizer.Normal, tokenizer.Control}
	for i := range reserved {
		tokens = append(tokens, fmt.Sprintf("<|reserved_%d|>", i))
		types = append(types, tokenizer.Control)
	}
	tok, err := tokenizer.NewBPE(tokenizer.BPEConfig{Tokens: tokens, Types: types, Pre: tokenizer.PreGPT2, BOS: -1, EOS: -1, UNK: -1})
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("<|a_long_turn_marker_token|>x", turns)
	var ids []int
	testutil.AllocatesAtMost(t, "Encode", 64*uint64(len(text))+32<<20, func() {
		ids = tok.Encode(text, tokenizer.EncodeOptions{ParseSpecial: true})
	})
	if len(ids) != 2*turns || ids[0] != 1 || ids[1] != 0 || ids[2*turns-2] != 1 {
		t.Errorf("%d ids, starting %v; want %d, alternating 1 and 0", len(ids), ids[:min(4, len(ids))], 2*turns)
	}
}
