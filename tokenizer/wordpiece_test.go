package tokenizer_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/internal/refdata"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/tokenizer"
)

// toyWordPiece has a vocabulary small enough to tokenize by hand.
func toyWordPiece(t *testing.T, maxLength int) *tokenizer.WordPiece {
	t.Helper()
	vocab := []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", ",", "!", "un", "##aff", "##able",
		"cafe", "中", "文", "$", "1", "a", "##b", "i"}
	opts := tokenizer.BertOptions()
	opts.MaxLength = maxLength
	opts.MaxInputCharsPerWord = 10
	w, err := tokenizer.NewWordPiece(vocab, opts)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWordPiece(t *testing.T) {
	tests := []struct {
		text   string
		pieces []string
	}{
		{"Hello, World!", []string{"hello", ",", "world", "!"}},
		{"unaffable", []string{"un", "##aff", "##able"}},
		{"Café", []string{"cafe"}},             // accents stripped, lower case
		{"CAFÉ", []string{"cafe"}},             // NFD then Mn dropped, then lower case
		{"中文", []string{"中", "文"}},             // CJK ideographs are words of their own
		{"$1", []string{"$", "1"}},             // ASCII symbols are BERT punctuation
		{"hel\x01lo\u200b", []string{"hello"}}, // control and format characters removed
		{"hello\u0378", []string{"[UNK]"}},     // an unassigned code point stays: no piece covers it
		{"a\uffff hello", []string{"[UNK]", "hello"}},
		{"hello\tworld\u00a0!", []string{"hello", "world", "!"}},
		{"ab abc", []string{"a", "##b", "[UNK]"}}, // "c" has no piece: the whole word is unknown
		{"unknownword", []string{"[UNK]"}},
		{"aaaaaaaaaaa", []string{"[UNK]"}}, // 11 characters > MaxInputCharsPerWord
		{"[MASK] hello[SEP]", []string{"[MASK]", "hello", "[SEP]"}},
		{"İ", []string{"i"}},
		{"", nil},
	}
	w := toyWordPiece(t, 0)
	for _, tc := range tests {
		t.Run(tc.text, func(t *testing.T) {
			if got := w.Tokenize(tc.text); !reflect.DeepEqual(got, tc.pieces) {
				t.Errorf("Tokenize(%q) = %q, want %q", tc.text, got, tc.pieces)
			}
		})
	}
	if got, want := w.Encode("Hello, world!"), []int{2, 5, 7, 6, 8, 3}; !reflect.DeepEqual(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	if got, want := toyWordPiece(t, 4).Encode("hello world hello"), []int{2, 5, 6, 3}; !reflect.DeepEqual(got, want) {
		t.Errorf("Encode with MaxLength 4 = %v, want %v", got, want)
	}
	short, err := toyWordPiece(t, 0).WithMaxLength(3)
	if err != nil {
		t.Fatal(err)
	}
	if got := short.Encode("hello world"); len(got) != 3 {
		t.Errorf("WithMaxLength(3): %v", got)
	}
	for _, bad := range []int{1, -1} { // no room for [CLS] and [SEP]; a negative length
		if _, err := short.WithMaxLength(bad); err == nil || !strings.Contains(err.Error(), "at least 2") {
			t.Errorf("WithMaxLength(%d) error = %v, want one naming what is accepted", bad, err)
		}
	}
}

func TestNewWordPieceErrors(t *testing.T) {
	if _, err := tokenizer.NewWordPiece([]string{"a"}, tokenizer.BertOptions()); err == nil || !strings.Contains(err.Error(), "not in the vocabulary") {
		t.Errorf("missing special tokens: %v", err)
	}
	if _, err := tokenizer.NewWordPieceFromVocab(filepath.Join(t.TempDir(), "none.txt"), tokenizer.BertOptions()); err == nil {
		t.Error("missing vocab.txt: no error")
	}
	path := testutil.TempFile(t, "tokenizer.json", []byte(`{"model":{"type":"BPE"}}`))
	if _, err := tokenizer.NewWordPieceFromJSON(path); err == nil || !strings.Contains(err.Error(), `model "BPE"`) {
		t.Errorf("BPE tokenizer.json: %v", err)
	}
}

// TestWordPieceNonSpecialAddedToken: a tokenizer.json added token that is not special (one added
// by tokenizer.add_tokens) is split out of the text by Hugging Face tokenizers (tokenizers
// 0.23.3 encodes "xfoobary" as x, foobar, y with "foobar" added), which this package does not
// do: it is an error naming the token, not ids that differ in silence.
func TestWordPieceNonSpecialAddedToken(t *testing.T) {
	raw, err := json.Marshal(map[string]any{
		"added_tokens": []map[string]any{{"id": 0, "content": "[PAD]", "special": true},
			{"id": 5, "content": "foobar", "special": false, "normalized": true}},
		"normalizer":    map[string]any{"type": "BertNormalizer", "lowercase": true, "clean_text": true, "handle_chinese_chars": true},
		"pre_tokenizer": map[string]any{"type": "BertPreTokenizer"},
		"model": map[string]any{"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
			"max_input_chars_per_word": 100, "vocab": map[string]int{"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "x": 4, "foobar": 5}},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := testutil.TempFile(t, "tokenizer.json", raw)
	if _, err := tokenizer.NewWordPieceFromJSON(path); err == nil || !strings.Contains(err.Error(), `added token "foobar"`) ||
		!strings.Contains(err.Error(), "special") {
		t.Errorf("error %v; want one naming the non-special added token \"foobar\" and saying only special ones are accepted", err)
	}
}

// TestWordPieceVocabNotUTF8: a vocab.txt that is not UTF-8 is an error naming the line, as
// Hugging Face tokenizers 0.23.3 refuses it ("stream did not contain valid UTF-8"), not a
// vocabulary holding a token no text can match.
func TestWordPieceVocabNotUTF8(t *testing.T) {
	path := testutil.TempFile(t, "vocab.txt", []byte("[PAD]\n[UNK]\n[CLS]\n[SEP]\né\n\xff\xfe\nb\n"))
	_, err := tokenizer.NewWordPieceFromVocab(path, tokenizer.BertOptions())
	if err == nil || !strings.Contains(err.Error(), "line 6 is not valid UTF-8") {
		t.Errorf("error %v; want one naming line 6", err)
	}
}

// TestWordPieceVocabLines: a vocab.txt line is read as Hugging Face tokenizers' WordPiece.read_file
// reads it (and transformers' load_vocab maps a repeated token): trailing whitespace trimmed, and a
// token written twice has the id of its last line. Checked with tokenizers 0.23.3
// (BertWordPieceTokenizer of this file encodes "hello world foo" as [2 7 6 8 3]).
func TestWordPieceVocabLines(t *testing.T) {
	path := testutil.TempFile(t, "vocab.txt", []byte("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld \nhello\nfoo\t\r\n"))
	w, err := tokenizer.NewWordPieceFromVocab(path, tokenizer.BertOptions())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := w.Encode("hello world foo"), []int{2, 7, 6, 8, 3}; !reflect.DeepEqual(got, want) {
		t.Errorf("Encode(\"hello world foo\") = %v, want %v", got, want)
	}
}

// TestMiniLMHF compares with the ids Hugging Face tokenizers gives for all-MiniLM-L6-v2's
// tokenizer.json (testdata/minilm_hf_ids.json, written by reference/gen_minilm_hf_ids.py), from
// tokenizer.json and from vocab.txt.
func TestMiniLMHF(t *testing.T) {
	path := assets.Require(t, assets.MiniLMTokenizer, assets.MiniLMVocab)
	raw, err := os.ReadFile(filepath.Join("testdata", "minilm_hf_ids.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Strings []struct {
			Text string `json:"text"`
			IDs  []int  `json:"ids"`
		} `json:"strings"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	fromJSON, err := tokenizer.NewWordPieceFromJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	opts := tokenizer.BertOptions()
	opts.MaxLength = 128 // tokenizer.json's truncation
	fromVocab, err := tokenizer.NewWordPieceFromVocab(assets.Path(assets.MiniLMVocab), opts)
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range map[string]*tokenizer.WordPiece{"tokenizer.json": fromJSON, "vocab.txt": fromVocab} {
		for _, s := range ref.Strings {
			if got := w.Encode(s.Text); !reflect.DeepEqual(got, s.IDs) {
				t.Errorf("%s: Encode(%.50q) = %v\nHF tokenizers: %v", name, s.Text, got, s.IDs)
			}
		}
	}
}

// TestMiniLMReference compares with the reference harness's ids and tokens of its 32 MiniLM
// sentences (reference/testdata/minilm/sentences.json: Hugging Face tokenizers, no padding).
func TestMiniLMReference(t *testing.T) {
	path := assets.Require(t, assets.MiniLMTokenizer)
	var ref struct {
		Sentences []struct {
			Text   string   `json:"text"`
			IDs    []int    `json:"ids"`
			Tokens []string `json:"tokens"`
		} `json:"sentences"`
	}
	if err := refdata.JSON(&ref, "minilm", "sentences.json"); err != nil {
		t.Skip(err)
	}
	w, err := tokenizer.NewWordPieceFromJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(ref.Sentences) == 0 {
		t.Fatal("sentences.json holds no sentence")
	}
	for _, s := range ref.Sentences {
		if got := w.Encode(s.Text); !reflect.DeepEqual(got, s.IDs) {
			t.Errorf("Encode(%.50q) = %v\nreference: %v", s.Text, got, s.IDs)
		}
		// Tokenize gives the word pieces; the reference's tokens include [CLS] and [SEP].
		if got := append(append([]string{"[CLS]"}, w.Tokenize(s.Text)...), "[SEP]"); !reflect.DeepEqual(got, s.Tokens) {
			t.Errorf("Tokenize(%.50q) = %q\nreference: %q", s.Text, got, s.Tokens)
		}
	}
}

// TestWordPieceSpecialFile: a tokenizer.json or vocab.txt that is a device is refused by name:
// os.ReadFile of /dev/zero never ends, growing without bound; /dev/urandom, read a line at a
// time, did the same.
func TestWordPieceSpecialFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func() error
	}{
		{"NewWordPieceFromJSON(/dev/zero)", func() error { _, err := tokenizer.NewWordPieceFromJSON("/dev/zero"); return err }},
		{"NewWordPieceFromVocab(/dev/urandom)", func() error {
			_, err := tokenizer.NewWordPieceFromVocab("/dev/urandom", tokenizer.BertOptions())
			return err
		}},
	} {
		var err error
		testutil.Within(t, 3*time.Second, tc.name, func() { err = tc.open() })
		if err == nil || !strings.Contains(err.Error(), "regular file") {
			t.Errorf("%s: error %v; want one refusing a file that is not a regular file", tc.name, err)
		}
	}
}

// TestWordPieceLongWord: max_input_chars_per_word comes from tokenizer.json; with a huge value a
// long word must still be split in time linear in its length (the longest-match search need not
// look past the longest vocabulary entry), not cubic: a 20,000-character word took hours.
func TestWordPieceLongWord(t *testing.T) {
	opts := tokenizer.BertOptions()
	opts.MaxInputCharsPerWord = 1 << 30
	w, err := tokenizer.NewWordPiece([]string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "##a", "##aa"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	word := strings.Repeat("a", 20001)
	var pieces []string
	testutil.Within(t, 5*time.Second, "Tokenize of a 20,001-letter word", func() { pieces = w.Tokenize(word) })
	if len(pieces) != 10001 || pieces[0] != "a" || pieces[1] != "##aa" || pieces[10000] != "##aa" {
		t.Errorf("Tokenize: %d pieces, first %q, last %q; want 10001: a, then ##aa", len(pieces), pieces[0], pieces[len(pieces)-1])
	}
}

// TestWordPieceManyAddedTokens: each added token found rescanned the rest of the text for every
// added token, quadratic in the text: a text of 100,000 [SEP] (the others absent) took 20 s.
func TestWordPieceManyAddedTokens(t *testing.T) {
	w, err := tokenizer.NewWordPiece([]string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"}, tokenizer.BertOptions())
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("[SEP]", 100000) + "a"
	var pieces []string
	testutil.Within(t, 5*time.Second, "Tokenize of 100,000 added tokens", func() { pieces = w.Tokenize(text) })
	if len(pieces) != 100001 || pieces[0] != "[SEP]" || pieces[100000] != "a" {
		t.Errorf("Tokenize: %d pieces; want 100000 [SEP] and a", len(pieces))
	}
}
