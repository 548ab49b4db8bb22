package tokenizer

import (
	"container/heap"
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
)

// TokenType is the GGUF type of a vocabulary entry ("tokenizer.ggml.token_type").
type TokenType int32

// The token types of llama.cpp's vocabularies.
const (
	Normal      TokenType = 1
	Unknown     TokenType = 2
	Control     TokenType = 3
	UserDefined TokenType = 4
	Unused      TokenType = 5
	Byte        TokenType = 6
)

// BPE is a BPE tokenizer with llama.cpp's special-token handling, of one of GGUF's two BPE
// vocabularies: byte-level BPE (GPT-2 style, model "gpt2": pre-tokenization, merges by rank) or
// SentencePiece BPE (model "llama": spaces as ▁, merges by the scores of the merged tokens,
// byte-fallback tokens). It is immutable after construction and safe for concurrent use.
type BPE struct {
	tokens  []string
	types   []TokenType
	ids     map[string]int
	ranks   map[string]int // "left right" → merge rank (byte-level)
	scores  []float32      // token scores (SentencePiece)
	spm     bool
	pre     PreTokenizer
	special []int // control, user-defined and unknown tokens, longest text first

	ignoreMerges bool // a word that is a token is that token (llama.cpp's ignore_merges)

	bos, eos, unk  int
	addBOS, addEOS bool
	addSpacePrefix bool
}

// BPEConfig holds what NewBPE builds a tokenizer from.
type BPEConfig struct {
	// Tokens is the vocabulary, indexed by id: in the byte-level alphabet, or for SentencePiece
	// the UTF-8 text of each piece with spaces written ▁ (U+2581).
	Tokens []string
	// Types gives each token's type; nil means all Normal.
	Types []TokenType
	// Merges are "left right" pairs, highest priority first (byte-level BPE).
	Merges []string
	// Pre is the pre-tokenizer (byte-level BPE).
	Pre PreTokenizer
	// SentencePiece selects SentencePiece BPE (GGUF's "llama" model): Scores instead of Merges
	// and Pre, byte-fallback tokens "<0xXX>".
	SentencePiece bool
	// Scores gives each token's score (SentencePiece: the merge whose result scores highest goes
	// first); NaN is refused, ±Inf accepted.
	Scores []float32
	// AddSpacePrefix (SentencePiece) writes a space before text at the start of the input or
	// after a special token.
	AddSpacePrefix bool
	// BOS, EOS and UNK are the ids of those tokens, -1 if none.
	BOS, EOS, UNK int
	// AddBOS and AddEOS: EncodeOptions.AddSpecial adds BOS before and EOS after the text.
	AddBOS, AddEOS bool
}

// NewBPE builds a tokenizer from cfg.
func NewBPE(cfg BPEConfig) (*BPE, error) {
	if len(cfg.Tokens) == 0 {
		return nil, errors.New("tokenizer.NewBPE: empty vocabulary")
	}
	if cfg.Types != nil && len(cfg.Types) != len(cfg.Tokens) {
		return nil, errors.Errorf("tokenizer.NewBPE: %d token types for %d tokens", len(cfg.Types), len(cfg.Tokens))
	}
	switch {
	case cfg.SentencePiece && len(cfg.Scores) != len(cfg.Tokens):
		return nil, errors.Errorf("tokenizer.NewBPE: %d scores for %d tokens; accepted: one score per token (SentencePiece)",
			len(cfg.Scores), len(cfg.Tokens))
	case !cfg.SentencePiece && !cfg.Pre.valid():
		return nil, errors.Errorf("tokenizer.NewBPE: pre-tokenizer %q; accepted: %q, %q, %q, %q", cfg.Pre, PreGPT2, PreSmolLM,
			PreLlamaBPE, PreQwen2)
	}
	if cfg.SentencePiece { // ±Inf is ordered; NaN is neither above, below nor equal to a score
		for id, s := range cfg.Scores {
			if math.IsNaN(float64(s)) {
				return nil, errors.Errorf("tokenizer.NewBPE: token %d (%q) has score NaN (tokenizer.ggml.scores); accepted: a number "+
					"(SentencePiece merges the highest-scoring token first: NaN leaves the order undefined)", id, cfg.Tokens[id])
			}
		}
	}
	t := &BPE{
		tokens: cfg.Tokens, types: cfg.Types, pre: cfg.Pre, scores: cfg.Scores, spm: cfg.SentencePiece,
		ids: make(map[string]int, len(cfg.Tokens)), ranks: make(map[string]int, len(cfg.Merges)),
		bos: cfg.BOS, eos: cfg.EOS, unk: cfg.UNK, addBOS: cfg.AddBOS, addEOS: cfg.AddEOS, addSpacePrefix: cfg.AddSpacePrefix,
		ignoreMerges: !cfg.SentencePiece && cfg.Pre == PreLlamaBPE,
	}
	if t.types == nil {
		t.types = make([]TokenType, len(cfg.Tokens))
		for i := range t.types {
			t.types[i] = Normal
		}
	}
	for id, tok := range cfg.Tokens {
		// llama.cpp (llama-cpp-python 0.3.36 included) aborts on a repeated text: its token_to_id
		// would hold fewer entries than its tokens. It renames an empty token "[EMPTY_<id>]":
		// several never collide with each other (a literal "[EMPTY_<id>]" is checked below).
		if prev, dup := t.ids[tok]; dup && tok != "" {
			return nil, errors.Errorf("tokenizer.NewBPE: tokens %d and %d are both %q; accepted: distinct token texts "+
				"(llama.cpp refuses a repeated one)", prev, id, tok)
		}
		t.ids[tok] = id
		switch t.types[id] {
		case Control, UserDefined, Unknown:
			if tok != "" {
				t.special = append(t.special, id)
			}
		}
	}
	for id, tok := range cfg.Tokens { // llama.cpp's "[EMPTY_<id>]" would repeat a token's text: it aborts
		if tok != "" {
			continue
		}
		name := fmt.Sprintf("[EMPTY_%d]", id)
		if other, dup := t.ids[name]; dup {
			return nil, errors.Errorf("tokenizer.NewBPE: token %d is empty and token %d is %q, the name llama.cpp gives an empty "+
				"token %d; accepted: distinct token texts (llama.cpp refuses a repeated one)", id, other, name, id)
		}
	}
	sort.SliceStable(t.special, func(i, j int) bool { return len(t.tokens[t.special[i]]) > len(t.tokens[t.special[j]]) })
	for rank, m := range cfg.Merges {
		// As llama.cpp: the separator is the first space after the first byte.
		sep := strings.IndexByte(m[min(1, len(m)):], ' ')
		if sep < 0 {
			return nil, errors.Errorf("tokenizer.NewBPE: merge #%d %q has no space; accepted: \"left right\"", rank, m)
		}
		sep += min(1, len(m))
		key := m[:sep] + " " + m[sep+1:]
		if _, dup := t.ranks[key]; !dup {
			t.ranks[key] = rank
		}
	}
	for _, s := range []struct {
		name string
		id   int
	}{{"BOS", cfg.BOS}, {"EOS", cfg.EOS}, {"UNK", cfg.UNK}} {
		if s.id < -1 || s.id >= len(cfg.Tokens) {
			return nil, errors.Errorf("tokenizer.NewBPE: %s id %d; accepted: -1 (none) or an id below the vocabulary size %d",
				s.name, s.id, len(cfg.Tokens))
		}
	}
	if (cfg.AddBOS && cfg.BOS < 0) || (cfg.AddEOS && cfg.EOS < 0) {
		return nil, errors.New("tokenizer.NewBPE: AddBOS/AddEOS without a BOS/EOS token")
	}
	return t, nil
}

// NewBPEFromGGUF builds the tokenizer described by a GGUF file's metadata:
// "tokenizer.ggml.model" must be "gpt2" (byte-level BPE, whose "tokenizer.ggml.pre" must be one
// of the pre-tokenizers this package implements, with "tokenizer.ggml.merges") or "llama"
// (SentencePiece BPE, with "tokenizer.ggml.scores" and "tokenizer.ggml.add_space_prefix",
// default true); tokens, token types, the BOS/EOS/UNK ids and add_bos_token/add_eos_token are
// read from their "tokenizer.ggml.*" keys, with llama.cpp's defaults (a "llama" vocabulary, and a
// "gpt2" one with the "llama-bpe" pre-tokenizer, adds BOS unless the file says otherwise; a
// "llama" vocabulary's BOS, EOS and UNK are 1, 2 and 0 unless the file says otherwise, each only
// where the vocabulary has that id; a "gpt2" one has none unless the file says). As in
// llama.cpp, the end-of-generation tokens (EndOfTurnIDs) are control tokens whatever type the
// file gives them.
func NewBPEFromGGUF(f *gguf.File) (*BPE, error) {
	model, err := f.String("tokenizer.ggml.model")
	if err != nil {
		return nil, errors.WithMessage(err, "tokenizer.NewBPEFromGGUF")
	}
	cfg := BPEConfig{BOS: -1, EOS: -1, UNK: -1}
	switch model {
	case "gpt2":
		if _, has := f.Value("tokenizer.ggml.pre"); !has {
			return nil, errors.Errorf("tokenizer.NewBPEFromGGUF: no tokenizer.ggml.pre (llama.cpp then splits with its "+
				"\"default\" pre-tokenizer, which this package does not implement); accepted: %s", acceptedPreTokenizers)
		}
		preName, err := f.String("tokenizer.ggml.pre")
		if err != nil {
			return nil, errors.WithMessage(err, "tokenizer.NewBPEFromGGUF")
		}
		pre, ok := preTokenizers[preName]
		if !ok {
			return nil, errors.Errorf("tokenizer.NewBPEFromGGUF: pre-tokenizer %q; accepted: %s", preName, acceptedPreTokenizers)
		}
		cfg.Pre = pre
		cfg.AddBOS = pre == PreLlamaBPE // llama.cpp's default for "llama-bpe"; add_bos_token overrides it
		if cfg.Merges, err = f.Strings("tokenizer.ggml.merges"); err != nil {
			return nil, errors.WithMessage(err, "tokenizer.NewBPEFromGGUF")
		}
	case "llama":
		cfg.SentencePiece, cfg.AddSpacePrefix, cfg.AddBOS = true, true, true
		if cfg.Scores, err = gguf.Get[[]float32](f, "tokenizer.ggml.scores"); err != nil {
			return nil, errors.WithMessage(err, "tokenizer.NewBPEFromGGUF")
		}
		if _, has := f.Value("tokenizer.ggml.add_space_prefix"); has {
			if cfg.AddSpacePrefix, err = f.Bool("tokenizer.ggml.add_space_prefix"); err != nil {
				return nil, errors.WithMessage(err, "tokenizer.NewBPEFromGGUF")
			}
		}
	default:
		return nil, errors.Errorf("tokenizer.NewBPEFromGGUF: tokenizer model %q; accepted: \"gpt2\" (byte-level BPE), \"llama\" (SentencePiece BPE)", model)
	}
	if cfg.Tokens, err = f.Strings("tokenizer.ggml.tokens"); err != nil {
		return nil, errors.WithMessage(err, "tokenizer.NewBPEFromGGUF")
	}
	if cfg.SentencePiece && len(cfg.Scores) != len(cfg.Tokens) {
		return nil, errors.Errorf("tokenizer.NewBPEFromGGUF: tokenizer.ggml.scores has %d entries; accepted: one per token of "+
			"tokenizer.ggml.tokens (%d)", len(cfg.Scores), len(cfg.Tokens))
	}
	if _, has := f.Value("tokenizer.ggml.token_type"); has {
		types, err := gguf.Get[[]int32](f, "tokenizer.ggml.token_type")
		if err != nil {
			return nil, errors.WithMessage(err, "tokenizer.NewBPEFromGGUF")
		}
		cfg.Types = make([]TokenType, len(types))
		for i, v := range types {
			cfg.Types[i] = TokenType(v)
		}
	}
	if cfg.SentencePiece {
		// llama.cpp's defaults for its SPM type, each disabled where the vocabulary has no such id.
		for _, d := range []struct {
			dst *int
			id  int
		}{{&cfg.BOS, 1}, {&cfg.EOS, 2}, {&cfg.UNK, 0}} {
			if d.id < len(cfg.Tokens) {
				*d.dst = d.id
			}
		}
	}
	for _, s := range []struct {
		key string
		dst *int
	}{{"tokenizer.ggml.bos_token_id", &cfg.BOS}, {"tokenizer.ggml.eos_token_id", &cfg.EOS}, {"tokenizer.ggml.unknown_token_id", &cfg.UNK}} {
		if _, has := f.Value(s.key); has {
			id, err := f.Uint(s.key)
			if err != nil {
				return nil, errors.WithMessage(err, "tokenizer.NewBPEFromGGUF")
			}
			if id >= uint64(len(cfg.Tokens)) {
				return nil, errors.Errorf("tokenizer.NewBPEFromGGUF: %s = %d; accepted: an id below the vocabulary size %d "+
					"(tokenizer.ggml.tokens)", s.key, id, len(cfg.Tokens))
			}
			*s.dst = int(id)
		}
	}
	for _, s := range []struct {
		key string
		dst *bool
	}{{"tokenizer.ggml.add_bos_token", &cfg.AddBOS}, {"tokenizer.ggml.add_eos_token", &cfg.AddEOS}} {
		if _, has := f.Value(s.key); has {
			if *s.dst, err = f.Bool(s.key); err != nil {
				return nil, errors.WithMessage(err, "tokenizer.NewBPEFromGGUF")
			}
		}
	}
	// NewBPE refuses these too, but by its field names.
	for _, s := range []struct {
		add         bool
		id, def     int
		addKey, key string
	}{{cfg.AddBOS, cfg.BOS, 1, "tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id"},
		{cfg.AddEOS, cfg.EOS, 2, "tokenizer.ggml.add_eos_token", "tokenizer.ggml.eos_token_id"}} {
		if s.add && s.id < 0 {
			why := ""
			if cfg.SentencePiece {
				why = fmt.Sprintf(" (nor id %d, a \"llama\" vocabulary's default, in a vocabulary of %d token(s))", s.def, len(cfg.Tokens))
			}
			return nil, errors.Errorf("tokenizer.NewBPEFromGGUF: %s is true (by default for the BOS of a \"llama\" vocabulary or of the \"llama-bpe\" pre-tokenizer), "+
				"but there is no %s%s; accepted: the id, or %s false", s.addKey, s.key, why, s.addKey)
		}
	}
	if cfg.Types != nil && len(cfg.Types) != len(cfg.Tokens) {
		return nil, errors.Errorf("tokenizer.NewBPEFromGGUF: tokenizer.ggml.token_type has %d entries; accepted: one per token "+
			"of tokenizer.ggml.tokens (%d)", len(cfg.Types), len(cfg.Tokens))
	}
	t, err := NewBPE(cfg)
	if err != nil {
		return nil, errors.WithMessage(err, "tokenizer.NewBPEFromGGUF")
	}
	t.markEndOfGeneration()
	return t, nil
}

// markEndOfGeneration makes the end-of-generation tokens (EndOfTurnIDs) control tokens, as
// llama.cpp's loader does whatever type the file gives them (Gemma-3's </s> is user-defined,
// Qwen2's normal): their texts are then matched only with EncodeOptions.ParseSpecial, and Piece
// writes nothing for them.
func (t *BPE) markEndOfGeneration() {
	changed := false
	for _, id := range EndOfTurnIDs(t) {
		switch t.types[id] {
		case Control:
			continue
		case UserDefined, Unknown: // already among the special tokens
		default:
			t.special = append(t.special, id)
		}
		t.types[id], changed = Control, true
	}
	if changed { // longest first, then in id order, as NewBPE sorts them
		sort.Slice(t.special, func(i, j int) bool {
			a, b := t.special[i], t.special[j]
			return len(t.tokens[a]) > len(t.tokens[b]) || len(t.tokens[a]) == len(t.tokens[b]) && a < b
		})
	}
}

// EncodeOptions are the switches of llama_tokenize.
type EncodeOptions struct {
	// AddSpecial adds BOS/EOS when the vocabulary asks for them (add_bos_token, add_eos_token).
	AddSpecial bool
	// ParseSpecial matches the text of control tokens (e.g. "<|im_start|>") in the input and
	// emits their ids; without it only user-defined tokens are matched and control-token text is
	// tokenized as plain text.
	ParseSpecial bool
}

// Encode returns the token ids of text, as llama.cpp's llama_tokenize does: special-token texts
// are cut out first (longest first; see EncodeOptions); then, for a byte-level vocabulary, each
// remaining fragment is pre-tokenized and each word BPE-merged by merge rank (lowest first,
// leftmost on ties), each final symbol mapped to its id; for a SentencePiece vocabulary, each
// fragment (after a space, with AddSpacePrefix, at the start or after a special token) has its
// spaces written ▁ and its UTF-8 characters merged by the score of the merged token (highest
// first, leftmost on ties), a final symbol that is no token falling back to byte tokens <0xXX>.
func (t *BPE) Encode(text string, opts EncodeOptions) []int {
	var out []int
	if opts.AddSpecial && t.addBOS {
		out = append(out, t.bos)
	}
	prevSpecial := true
	for _, frag := range t.partition(text, opts.ParseSpecial) {
		if frag.id >= 0 {
			out = append(out, frag.id)
			prevSpecial = true
			continue
		}
		if t.spm {
			text := frag.text
			if t.addSpacePrefix && prevSpecial {
				text = " " + text
			}
			out = t.encodePieces(strings.ReplaceAll(text, " ", spaceMark), out)
			prevSpecial = false
			continue
		}
		for _, word := range t.pre.Split(frag.text) {
			out = t.encodeWord(byteEncode(word), out)
		}
	}
	if opts.AddSpecial && t.addEOS {
		out = append(out, t.eos)
	}
	return out
}

// fragment is a piece of input: raw text (id < 0) or a special token.
type fragment struct {
	text string
	id   int
}

// partition cuts the special tokens out of text, as llama.cpp's tokenizer_st_partition.
func (t *BPE) partition(text string, parseSpecial bool) []fragment {
	if text == "" {
		return nil
	}
	frags := []fragment{{text: text, id: -1}}
	for _, id := range t.special {
		if !parseSpecial && (t.types[id] == Control || t.types[id] == Unknown) {
			continue
		}
		tok := t.tokens[id]
		if !strings.Contains(text, tok) {
			continue // in no fragment either: the fragments are not walked again for it
		}
		var next []fragment
		for _, f := range frags {
			if f.id >= 0 || !strings.Contains(f.text, tok) {
				next = append(next, f)
				continue
			}
			rest := f.text
			for {
				i := strings.Index(rest, tok)
				if i < 0 {
					break
				}
				if i > 0 {
					next = append(next, fragment{text: rest[:i], id: -1})
				}
				next = append(next, fragment{id: id})
				rest = rest[i+len(tok):]
			}
			if rest != "" {
				next = append(next, fragment{text: rest, id: -1})
			}
		}
		frags = next
	}
	return frags
}

// symbol is a node of the doubly linked list BPE merges over.
type symbol struct {
	text       string
	prev, next int
}

// bigram is a candidate merge of symbols left and right.
type bigram struct {
	left, right int
	text        string
	rank        int
}

// mergeQueue is a priority queue of candidate merges, for container/heap: it pops first the item
// that goes before every other by before.
type mergeQueue[T any] struct {
	items  []T
	before func(a, b T) bool
}

func (q *mergeQueue[T]) Len() int           { return len(q.items) }
func (q *mergeQueue[T]) Less(i, j int) bool { return q.before(q.items[i], q.items[j]) }
func (q *mergeQueue[T]) Swap(i, j int)      { q.items[i], q.items[j] = q.items[j], q.items[i] }
func (q *mergeQueue[T]) Push(x any)         { q.items = append(q.items, x.(T)) }
func (q *mergeQueue[T]) Pop() any {
	x := q.items[len(q.items)-1]
	q.items = q.items[:len(q.items)-1]
	return x
}

// encodeWord BPE-merges one pre-tokenized word (in the byte-level alphabet) and appends its ids.
func (t *BPE) encodeWord(word string, out []int) []int {
	if word == "" {
		return out
	}
	if t.ignoreMerges {
		if id, ok := t.ids[word]; ok {
			return append(out, id)
		}
	}
	syms := make([]symbol, 0, len(word))
	for i := 0; i < len(word); {
		_, n := utf8.DecodeRuneInString(word[i:])
		syms = append(syms, symbol{text: word[i : i+n], prev: len(syms) - 1, next: len(syms) + 1})
		i += n
	}
	syms[len(syms)-1].next = -1
	// The lowest rank first, the leftmost among equal ranks.
	q := &mergeQueue[bigram]{before: func(a, b bigram) bool { return a.rank < b.rank || (a.rank == b.rank && a.left < b.left) }}
	add := func(left, right int) {
		if left < 0 || right < 0 {
			return
		}
		l, r := syms[left].text, syms[right].text
		if rank, ok := t.ranks[l+" "+r]; ok {
			heap.Push(q, bigram{left: left, right: right, text: l + r, rank: rank})
		}
	}
	for i := 1; i < len(syms); i++ {
		add(i-1, i)
	}
	for q.Len() > 0 {
		b := heap.Pop(q).(bigram)
		left, right := &syms[b.left], &syms[b.right]
		if left.text == "" || right.text == "" || left.text+right.text != b.text {
			continue // outdated
		}
		left.text += right.text
		right.text = ""
		left.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = b.left
		}
		add(left.prev, b.left)
		add(b.left, left.next)
	}
	for i := 0; i >= 0; i = syms[i].next {
		s := syms[i].text
		if id, ok := t.ids[s]; ok {
			out = append(out, id)
			continue
		}
		// As llama.cpp: a symbol that is not a token falls back to its single bytes, those that
		// are tokens.
		for j := 0; j < len(s); j++ {
			if id, ok := t.ids[s[j:j+1]]; ok {
				out = append(out, id)
			}
		}
	}
	return out
}

// Decode returns the text of ids: each token's Piece (control, unknown and unused tokens omitted),
// as llama.cpp's detokenizer (llama_detokenize) writes it without its special flags. With
// AddSpacePrefix (a SentencePiece vocabulary without tokenizer.ggml.add_space_prefix false, as
// Llama 2's), the space the first token starts with is removed, as llama.cpp removes it, so that
// Decode(Encode(text)) is text; a BOS first keeps the next token's space, as in llama.cpp. Ids
// outside the vocabulary are skipped.
func (t *BPE) Decode(ids []int) string {
	var b strings.Builder
	for i, id := range ids {
		p := t.Piece(id)
		if i == 0 && t.addSpacePrefix && len(p) > 0 && p[0] == ' ' {
			p = p[1:]
		}
		b.Write(p)
	}
	return b.String()
}

// Piece returns the bytes Decode writes for token id, one token of a streamed answer: the Bytes
// of a normal, byte or user-defined token; nil for a control, unknown or unused token or one of
// another type (as llama.cpp's detokenizer omits them) and for an id outside the vocabulary.
func (t *BPE) Piece(id int) []byte {
	if id < 0 || id >= len(t.tokens) {
		return nil
	}
	switch t.types[id] {
	case Normal, Byte, UserDefined:
		return t.Bytes(id)
	}
	return nil
}

// Bytes returns the bytes token id stands for: its byte-level text mapped back to bytes, or for a
// SentencePiece vocabulary its text with ▁ as spaces (a byte token <0xXX> its byte); for control,
// unknown and user-defined tokens their text as written. Nil for an id outside the vocabulary. A
// multi-byte character may be split across tokens.
func (t *BPE) Bytes(id int) []byte {
	if id < 0 || id >= len(t.tokens) {
		return nil
	}
	switch t.types[id] {
	case Control, Unknown, UserDefined:
		return []byte(t.tokens[id])
	}
	if t.spm {
		if b, ok := byteToken(t.tokens[id]); ok && t.types[id] == Byte {
			return []byte{b}
		}
		return []byte(strings.ReplaceAll(t.tokens[id], spaceMark, " "))
	}
	return byteDecode(t.tokens[id])
}

// Token returns the text of token id in the vocabulary (byte-level alphabet, or SentencePiece's
// text with ▁), "" if out of range.
func (t *BPE) Token(id int) string {
	if id < 0 || id >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// ID returns the id of a token given by its vocabulary text.
func (t *BPE) ID(token string) (int, bool) {
	id, ok := t.ids[token]
	return id, ok
}

// Type returns the type of token id (0 if out of range).
func (t *BPE) Type(id int) TokenType {
	if id < 0 || id >= len(t.types) {
		return 0
	}
	return t.types[id]
}

// VocabSize returns the number of tokens.
func (t *BPE) VocabSize() int { return len(t.tokens) }

// BOS returns the beginning-of-sequence id, -1 if none.
func (t *BPE) BOS() int { return t.bos }

// EOS returns the end-of-sequence id, -1 if none.
func (t *BPE) EOS() int { return t.eos }

// SentencePiece reports whether the vocabulary is SentencePiece BPE (GGUF's "llama" model).
func (t *BPE) SentencePiece() bool { return t.spm }

// PreTokenizer returns the pre-tokenizer of a byte-level vocabulary ("" for SentencePiece).
func (t *BPE) PreTokenizer() PreTokenizer { return t.pre }
