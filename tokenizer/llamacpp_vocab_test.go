package tokenizer_test

import (
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/tokenizer"
)

// readVocabTests reads llama.cpp's tokenizer test cases beside a vocabulary (FILE.inp, FILE.out)
// as its tests/test-tokenizer-0.cpp pairs them: the texts are the pieces of FILE.inp between
// "\n__ggml_vocab_test__\n" separators (none after the last one), and line i of FILE.out, with
// its surrounding whitespace stripped, holds the space-separated ids of text i.
func readVocabTests(t *testing.T, vocab string) (texts []string, ids [][]int) {
	t.Helper()
	inp, err := os.ReadFile(vocab + ".inp")
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(vocab + ".out")
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	for rest := string(inp); rest != ""; {
		text, after, found := strings.Cut(rest, sep)
		texts = append(texts, text)
		if !found {
			break
		}
		rest = after
	}
	lines := strings.Split(string(out), "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1] // the last line's newline ends it
	}
	for _, line := range lines {
		var row []int
		for _, f := range strings.Fields(line) {
			id, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("%s.out: %q is not an id", vocab, f)
			}
			row = append(row, id)
		}
		ids = append(ids, row)
	}
	if len(texts) != len(ids) || len(texts) == 0 {
		t.Fatalf("%s: %d texts, %d lines of ids", vocab, len(texts), len(ids))
	}
	return texts, ids
}

// TestLlamaCppVocabReference encodes llama.cpp's own tokenizer test cases for Llama 3's
// ("llama-bpe") and Qwen2's ("qwen2") vocabularies, without BOS and with special tokens as text
// (as test-tokenizer-0 calls common_tokenize), compares with its ids, and decodes them back.
func TestLlamaCppVocabReference(t *testing.T) {
	for _, tc := range []struct {
		vocab  string
		pre    tokenizer.PreTokenizer
		size   int
		bos    int
		addBOS bool // llama.cpp's default: the files have no add_bos_token
	}{
		{assets.LlamaBPEVocab, tokenizer.PreLlamaBPE, 128256, 128000, true},
		{assets.Qwen2Vocab, tokenizer.PreQwen2, 151936, 151643, false},
	} {
		t.Run(string(tc.pre), func(t *testing.T) {
			assets.Require(t, tc.vocab, tc.vocab+".inp", tc.vocab+".out")
			tok, _ := assetBPE(t, tc.vocab)
			if tok.PreTokenizer() != tc.pre || tok.VocabSize() != tc.size || tok.BOS() != tc.bos {
				t.Errorf("pre-tokenizer %q, vocabulary %d, BOS %d; want %q, %d, %d",
					tok.PreTokenizer(), tok.VocabSize(), tok.BOS(), tc.pre, tc.size, tc.bos)
			}
			got := tok.Encode("Hello", tokenizer.EncodeOptions{AddSpecial: true})
			if hasBOS := len(got) > 0 && got[0] == tc.bos; hasBOS != tc.addBOS {
				t.Errorf("Encode(\"Hello\", AddSpecial) = %v: BOS added %v, want %v", got, hasBOS, tc.addBOS)
			}
			texts, ids := readVocabTests(t, assets.Path(tc.vocab))
			passed := 0
			for i, text := range texts {
				got := tok.Encode(text, tokenizer.EncodeOptions{})
				if len(got) == 0 && len(ids[i]) == 0 || reflect.DeepEqual(got, ids[i]) {
					passed++
				} else {
					t.Errorf("Encode(%q) = %v\nllama.cpp:     %v", text, got, ids[i])
				}
				if d := tok.Decode(ids[i]); d != text {
					t.Errorf("Decode(%v) = %q, want %q", ids[i], d, text)
				}
			}
			t.Logf("%d of %d of llama.cpp's cases", passed, len(texts))
		})
	}
}
