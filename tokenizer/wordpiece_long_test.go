package tokenizer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/quanta-ml/quanta/tokenizer"
)

// within runs f, failing the test if it takes longer than limit (the work is left running).
func within(t *testing.T, limit time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s: still running after %s", what, limit)
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
	within(t, 5*time.Second, "Tokenize of a 20,001-letter word", func() { pieces = w.Tokenize(word) })
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
	within(t, 5*time.Second, "Tokenize of 100,000 added tokens", func() { pieces = w.Tokenize(text) })
	if len(pieces) != 100001 || pieces[0] != "[SEP]" || pieces[100000] != "a" {
		t.Errorf("Tokenize: %d pieces; want 100000 [SEP] and a", len(pieces))
	}
}
