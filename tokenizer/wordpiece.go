package tokenizer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/fileio"
	"golang.org/x/text/unicode/norm"
)

// WordPiece is BERT's tokenizer as Hugging Face tokenizers runs it for a tokenizer.json with a
// BertNormalizer, a BertPreTokenizer, a WordPiece model and a [CLS] $A [SEP] template:
//
//  1. added special tokens ("[CLS]", "[MASK]", ...) written in the text are matched first, as
//     they are (leftmost, longest);
//  2. normalization (BertNormalizer): drop NUL, U+FFFD and control characters (categories
//     Cc, Cf, Co and Cs, except tab, newline and carriage return; unassigned code points stay), turn
//     whitespace into spaces, surround CJK ideographs with spaces, then with StripAccents
//     decompose (NFD) and drop non-spacing marks (Mn), then with Lowercase map each character to
//     lower case;
//  3. pre-tokenization (BertPreTokenizer): split on whitespace, and make every punctuation
//     character (ASCII punctuation, or a Unicode P category) a word of its own;
//  4. WordPiece: each word becomes the longest vocabulary prefix, then the longest "##"-prefixed
//     continuation, and so on; a word with no full cover, or longer than MaxInputCharsPerWord
//     characters, becomes [UNK];
//  5. [CLS] before and [SEP] after, the middle truncated so that the whole has at most
//     MaxLength ids (0: no limit).
//
// A WordPiece is immutable after construction and safe for concurrent use.
type WordPiece struct {
	vocab              map[string]int
	tokens             []string
	added              []string // special tokens matched in raw text, longest first
	longest            int      // the longest text of vocab, in bytes: no longer piece can match
	options            WordPieceOptions
	unk, cls, sep, pad int
}

// WordPieceOptions are the settings of a WordPiece tokenizer; NewWordPieceFromJSON reads them from
// tokenizer.json.
type WordPieceOptions struct {
	// Lowercase maps text to lower case; StripAccents (default: Lowercase's value, as BERT's
	// normalizer) removes accents; CleanText and ChineseChars are the other normalizer steps.
	Lowercase, CleanText, ChineseChars bool
	StripAccents                       *bool
	// UNK, CLS, SEP, PAD are the special tokens' texts; MASK, if in the vocabulary, is one more
	// text matched as a special token.
	UNK, CLS, SEP, PAD, MASK string
	// ContinuingPrefix marks word continuations ("##").
	ContinuingPrefix string
	// MaxInputCharsPerWord: longer words become UNK (100).
	MaxInputCharsPerWord int
	// MaxLength truncates Encode's output, [CLS] and [SEP] included (0: no limit).
	MaxLength int
}

// BertOptions returns the options of the uncased BERT tokenizers (bert-base-uncased, MiniLM):
// lower-casing with accent stripping, clean text, CJK splitting, [UNK] [CLS] [SEP] [PAD] [MASK],
// "##", 100 characters a word, 512 ids at most.
func BertOptions() WordPieceOptions {
	return WordPieceOptions{
		Lowercase: true, CleanText: true, ChineseChars: true,
		UNK: "[UNK]", CLS: "[CLS]", SEP: "[SEP]", PAD: "[PAD]", MASK: "[MASK]",
		ContinuingPrefix: "##", MaxInputCharsPerWord: 100, MaxLength: 512,
	}
}

// NewWordPiece builds a tokenizer from a vocabulary (token texts indexed by id) and options. A
// text given twice maps to its last id, as Hugging Face tokenizers reads a vocab.txt.
func NewWordPiece(tokens []string, opts WordPieceOptions) (*WordPiece, error) {
	w := &WordPiece{vocab: make(map[string]int, len(tokens)), tokens: tokens, options: opts}
	for id, tok := range tokens {
		w.vocab[tok] = id
		w.longest = max(w.longest, len(tok))
	}
	var missing []string
	for _, s := range []struct {
		text string
		id   *int
	}{{opts.UNK, &w.unk}, {opts.CLS, &w.cls}, {opts.SEP, &w.sep}, {opts.PAD, &w.pad}} {
		id, ok := w.vocab[s.text]
		if !ok {
			missing = append(missing, s.text)
		}
		*s.id = id
	}
	if len(missing) > 0 {
		return nil, errors.Errorf("tokenizer.NewWordPiece: special tokens %q are not in the vocabulary of %d tokens", missing, len(tokens))
	}
	if opts.MaxInputCharsPerWord <= 0 {
		return nil, errors.Errorf("tokenizer.NewWordPiece: MaxInputCharsPerWord %d; accepted: a positive count", opts.MaxInputCharsPerWord)
	}
	if err := checkMaxLength(opts.MaxLength); err != nil {
		return nil, errors.WithMessage(err, "tokenizer.NewWordPiece")
	}
	w.added = []string{opts.UNK, opts.CLS, opts.SEP, opts.PAD}
	if _, ok := w.vocab[opts.MASK]; ok && opts.MASK != "" {
		w.added = append(w.added, opts.MASK)
	}
	return w, nil
}

// NewWordPieceFromVocab builds a tokenizer from a vocab.txt file (one token a line, the line
// number is the id, trailing whitespace trimmed as Hugging Face tokenizers trims it) and options.
// A file that is not UTF-8 is an error naming the first line that is not, as Hugging Face
// tokenizers refuses it.
func NewWordPieceFromVocab(path string, opts WordPieceOptions) (*WordPiece, error) {
	data, err := fileio.ReadFile("tokenizer.NewWordPieceFromVocab", path, fileio.MaxConfigBytes)
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(data) {
		line := 1
		for i := 0; i < len(data); {
			r, n := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			if r == '\n' {
				line++
			}
			i += n
		}
		return nil, errors.Errorf("tokenizer.NewWordPieceFromVocab(%q): line %d is not valid UTF-8; accepted: a UTF-8 text file", path, line)
	}
	var tokens []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		tokens = append(tokens, strings.TrimRightFunc(sc.Text(), unicode.IsSpace))
	}
	if err := sc.Err(); err != nil {
		return nil, errors.Wrapf(err, "tokenizer.NewWordPieceFromVocab(%q)", path)
	}
	w, err := NewWordPiece(tokens, opts)
	return w, errors.WithMessagef(err, "tokenizer.NewWordPieceFromVocab(%q)", path)
}

// tokenizerJSON is the part of a Hugging Face tokenizer.json that a BERT WordPiece tokenizer uses.
type tokenizerJSON struct {
	Truncation *struct {
		MaxLength int `json:"max_length"`
	} `json:"truncation"`
	AddedTokens []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer *struct {
		Type               string `json:"type"`
		CleanText          bool   `json:"clean_text"`
		HandleChineseChars bool   `json:"handle_chinese_chars"`
		StripAccents       *bool  `json:"strip_accents"`
		Lowercase          bool   `json:"lowercase"`
	} `json:"normalizer"`
	PreTokenizer *struct {
		Type string `json:"type"`
	} `json:"pre_tokenizer"`
	PostProcessor *struct {
		Type          string `json:"type"`
		SpecialTokens map[string]struct {
			IDs []int `json:"ids"`
		} `json:"special_tokens"`
	} `json:"post_processor"`
	Model struct {
		Type                    string         `json:"type"`
		UnkToken                string         `json:"unk_token"`
		ContinuingSubwordPrefix string         `json:"continuing_subword_prefix"`
		MaxInputCharsPerWord    int            `json:"max_input_chars_per_word"`
		Vocab                   map[string]int `json:"vocab"`
	} `json:"model"`
}

// NewWordPieceFromJSON builds the tokenizer a Hugging Face tokenizer.json describes. It must have
// a WordPiece model, a BertNormalizer (or none), a BertPreTokenizer and only special added
// tokens; MaxLength comes from its truncation (0 if none), the special tokens from its added
// tokens and post-processor.
func NewWordPieceFromJSON(path string) (*WordPiece, error) {
	raw, err := fileio.ReadFile("tokenizer.NewWordPieceFromJSON", path, fileio.MaxConfigBytes)
	if err != nil {
		return nil, err
	}
	w, err := parseWordPieceJSON(raw)
	return w, errors.WithMessagef(err, "tokenizer.NewWordPieceFromJSON(%q)", path)
}

// parseWordPieceJSON builds the tokenizer the content of a tokenizer.json describes.
func parseWordPieceJSON(raw []byte) (*WordPiece, error) {
	// encoding/json would read invalid UTF-8, and a lone surrogate escape, as U+FFFD, renaming a
	// token; Hugging Face's tokenizers (serde_json) refuses both.
	if !utf8.Valid(raw) {
		return nil, errors.New("tokenizer.json is not valid UTF-8; accepted: UTF-8 JSON")
	}
	var j tokenizerJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, errors.Wrap(err, "tokenizer.json")
	}
	if err := fileio.CheckSurrogates(raw); err != nil {
		return nil, errors.WithMessage(err, "tokenizer.json")
	}
	fail := errors.Errorf
	if j.Model.Type != "WordPiece" {
		return nil, fail("model %q; accepted: \"WordPiece\"", j.Model.Type)
	}
	if j.PreTokenizer == nil || j.PreTokenizer.Type != "BertPreTokenizer" {
		return nil, fail("pre-tokenizer %v; accepted: \"BertPreTokenizer\"", j.PreTokenizer)
	}
	opts := WordPieceOptions{
		UNK: j.Model.UnkToken, CLS: "[CLS]", SEP: "[SEP]", PAD: "[PAD]",
		ContinuingPrefix: j.Model.ContinuingSubwordPrefix, MaxInputCharsPerWord: j.Model.MaxInputCharsPerWord,
	}
	if n := j.Normalizer; n != nil {
		if n.Type != "BertNormalizer" {
			return nil, fail("normalizer %q; accepted: \"BertNormalizer\"", n.Type)
		}
		opts.Lowercase, opts.CleanText, opts.ChineseChars, opts.StripAccents = n.Lowercase, n.CleanText, n.HandleChineseChars, n.StripAccents
	}
	if j.Truncation != nil {
		opts.MaxLength = j.Truncation.MaxLength
	}
	tokens := make([]string, len(j.Model.Vocab))
	for tok, id := range j.Model.Vocab {
		if id < 0 || id >= len(tokens) || tokens[id] != "" {
			return nil, fail("vocabulary ids are not 0..%d, each once (token %q has id %d)", len(tokens)-1, tok, id)
		}
		tokens[id] = tok
	}
	w, err := NewWordPiece(tokens, opts)
	if err != nil {
		return nil, err
	}
	// Every id Encode can emit is one of the vocabulary, which the model's tables have rows for.
	w.added = w.added[:0]
	for _, a := range j.AddedTokens {
		if !a.Special && a.Content != "" {
			// Hugging Face tokenizers splits it out of the (normalized) text like a special token.
			return nil, fail("added token %q (id %d) is not special; accepted: special added tokens only (a non-special "+
				"one, added by add_tokens, is not matched by this package)", a.Content, a.ID)
		}
		if a.Special && a.Content != "" {
			if a.ID < 0 || a.ID >= len(tokens) {
				return nil, fail("added token %q has id %d; accepted: an id below the vocabulary size %d", a.Content, a.ID, len(tokens))
			}
			w.added = append(w.added, a.Content)
			w.vocab[a.Content] = a.ID
			w.longest = max(w.longest, len(a.Content))
		}
	}
	for _, s := range []struct {
		name string
		id   *int
	}{{"[CLS]", &w.cls}, {"[SEP]", &w.sep}} {
		if pp := j.PostProcessor; pp != nil {
			if st, ok := pp.SpecialTokens[s.name]; ok && len(st.IDs) == 1 {
				if id := st.IDs[0]; id < 0 || id >= len(tokens) {
					return nil, fail("post_processor special token %s has id %d; accepted: an id below the vocabulary size %d",
						s.name, id, len(tokens))
				}
				*s.id = st.IDs[0]
			}
		}
	}
	return w, nil
}

// Options returns the tokenizer's options.
func (w *WordPiece) Options() WordPieceOptions { return w.options }

// WithMaxLength returns a copy of the tokenizer that truncates to maxLength ids, [CLS] and [SEP]
// included: 0 (no limit) or at least 2, as NewWordPiece accepts.
func (w *WordPiece) WithMaxLength(maxLength int) (*WordPiece, error) {
	if err := checkMaxLength(maxLength); err != nil {
		return nil, errors.WithMessage(err, "tokenizer.WordPiece.WithMaxLength")
	}
	c := *w
	c.options.MaxLength = maxLength
	return &c, nil
}

// checkMaxLength checks a MaxLength: room for [CLS] and [SEP], or no limit.
func checkMaxLength(maxLength int) error {
	if maxLength != 0 && maxLength < 2 {
		return errors.Errorf("MaxLength %d; accepted: 0 (no limit) or at least 2", maxLength)
	}
	return nil
}

// Encode returns [CLS] + the word-piece ids of text + [SEP], truncated to MaxLength.
func (w *WordPiece) Encode(text string) []int {
	ids := []int{w.cls}
	for _, piece := range w.Tokenize(text) {
		ids = append(ids, w.vocab[piece])
	}
	if m := w.options.MaxLength; m > 0 && len(ids)+1 > m {
		ids = ids[:m-1]
	}
	return append(ids, w.sep)
}

// Tokenize returns the word pieces of text (no [CLS]/[SEP], no truncation); unknown words are
// the UNK token's text.
func (w *WordPiece) Tokenize(text string) []string {
	var out []string
	// next[i] is where added token i next occurs at or after off (-1: nowhere), searched again
	// only once off passes it: searching every token again after each match was quadratic in the
	// text (a long text of [SEP] rescanned for the absent [MASK] each time).
	next := make([]int, len(w.added))
	for i, tok := range w.added {
		next[i] = indexFrom(text, tok, 0)
	}
	for off := 0; off < len(text); {
		// The leftmost added token (the longest at that position), or none: the end of text.
		pos, tok := len(text), ""
		for i, t := range w.added {
			if next[i] >= 0 && next[i] < off {
				next[i] = indexFrom(text, t, off)
			}
			if p := next[i]; p >= 0 && (p < pos || (p == pos && len(t) > len(tok))) {
				pos, tok = p, t
			}
		}
		for _, word := range w.words(text[off:pos]) {
			out = w.wordPieces(word, out)
		}
		if tok == "" {
			break
		}
		out = append(out, tok)
		off = pos + len(tok)
	}
	return out
}

// indexFrom is the position of the first tok in text at or after from, or -1.
func indexFrom(text, tok string, from int) int {
	if i := strings.Index(text[from:], tok); i >= 0 {
		return from + i
	}
	return -1
}

// ID returns the id of a token text.
func (w *WordPiece) ID(token string) (int, bool) {
	id, ok := w.vocab[token]
	return id, ok
}

// Token returns the text of token id, "" if out of range.
func (w *WordPiece) Token(id int) string {
	if id < 0 || id >= len(w.tokens) {
		return ""
	}
	return w.tokens[id]
}

// VocabSize returns the number of tokens.
func (w *WordPiece) VocabSize() int { return len(w.tokens) }

// PadID returns the id of the padding token.
func (w *WordPiece) PadID() int { return w.pad }

// normalize applies BertNormalizer's steps to text.
func (w *WordPiece) normalize(text string) string {
	var b strings.Builder
	for _, r := range text {
		if w.options.CleanText {
			if r == 0 || r == utf8.RuneError || isBertControl(r) {
				continue
			}
			if isBertWhitespace(r) {
				r = ' '
			}
		}
		if w.options.ChineseChars && isCJK(r) {
			b.WriteByte(' ')
			b.WriteRune(r)
			b.WriteByte(' ')
			continue
		}
		b.WriteRune(r)
	}
	s := b.String()
	strip := w.options.Lowercase
	if w.options.StripAccents != nil {
		strip = *w.options.StripAccents
	}
	if strip {
		b.Reset()
		for _, r := range norm.NFD.String(s) {
			if !unicode.Is(unicode.Mn, r) {
				b.WriteRune(r)
			}
		}
		s = b.String()
	}
	if w.options.Lowercase {
		b.Reset()
		for _, r := range s {
			if r == 'İ' { // the one character whose lower case is two: i and a combining dot
				b.WriteString("i\u0307")
				continue
			}
			b.WriteRune(unicode.ToLower(r))
		}
		s = b.String()
	}
	return s
}

// words normalizes text and splits it on whitespace and punctuation (BertPreTokenizer).
func (w *WordPiece) words(text string) []string {
	var words []string
	start := -1
	s := w.normalize(text)
	for i, r := range s {
		switch {
		case unicode.Is(unicode.White_Space, r):
			if start >= 0 {
				words = append(words, s[start:i])
				start = -1
			}
		case isBertPunctuation(r):
			if start >= 0 {
				words = append(words, s[start:i])
				start = -1
			}
			words = append(words, s[i:i+utf8.RuneLen(r)])
		default:
			if start < 0 {
				start = i
			}
		}
	}
	if start >= 0 {
		words = append(words, s[start:])
	}
	return words
}

// wordPieces appends the greedy longest-match-first pieces of one word.
func (w *WordPiece) wordPieces(word string, out []string) []string {
	if utf8.RuneCountInString(word) > w.options.MaxInputCharsPerWord {
		return append(out, w.options.UNK)
	}
	n := len(out)
	for start := 0; start < len(word); {
		// The longest match is no longer than the longest vocabulary text: the search starts there
		// (on a character boundary), or it is quadratic in the word for each piece.
		end := len(word)
		if limit := start + w.longest; limit < end {
			for end = limit; end > start && !utf8.RuneStart(word[end]); end-- {
			}
		}
		found := ""
		for start < end {
			piece := word[start:end]
			if start > 0 {
				piece = w.options.ContinuingPrefix + piece
			}
			if _, ok := w.vocab[piece]; ok {
				found = piece
				break
			}
			_, size := utf8.DecodeLastRuneInString(word[start:end])
			end -= size
		}
		if found == "" {
			return append(out[:n], w.options.UNK)
		}
		out = append(out, found)
		start = end
	}
	return out
}

// isBertWhitespace: tab, newline, carriage return and the White_Space property.
func isBertWhitespace(r rune) bool {
	return r == '\t' || r == '\n' || r == '\r' || unicode.Is(unicode.White_Space, r)
}

// isBertControl: the "other" categories Cc, Cf, Co and Cs except tab, newline and carriage
// return. Unassigned code points (Cn) are kept, as Hugging Face tokenizers keeps them (its
// is_other finds none): such a character makes its word [UNK].
func isBertControl(r rune) bool {
	if r == '\t' || r == '\n' || r == '\r' {
		return false
	}
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs)
}

// isBertPunctuation: ASCII punctuation (which includes symbols such as $ + < = > ^ ` | ~) or a
// Unicode punctuation category.
func isBertPunctuation(r rune) bool {
	if r < 128 {
		return ('!' <= r && r <= '/') || (':' <= r && r <= '@') || ('[' <= r && r <= '`') || ('{' <= r && r <= '~')
	}
	return unicode.IsPunct(r)
}

// isCJK: the CJK ideograph blocks of BERT's tokenizer.
func isCJK(r rune) bool {
	return (0x4E00 <= r && r <= 0x9FFF) || (0x3400 <= r && r <= 0x4DBF) || (0x20000 <= r && r <= 0x2A6DF) ||
		(0x2A700 <= r && r <= 0x2B73F) || (0x2B740 <= r && r <= 0x2B81F) || (0x2B920 <= r && r <= 0x2CEAF) ||
		(0xF900 <= r && r <= 0xFAFF) || (0x2F800 <= r && r <= 0x2FA1F)
}
