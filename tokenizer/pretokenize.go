package tokenizer

import (
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizer splits text into the words that BPE merges within, with llama.cpp's rules
// (src/unicode.cpp) for the GPT-2 family of tokenizers and for Llama 3's and Qwen2's. It works on
// code points, each piece of a step split further by the next step, never across a boundary of
// the previous one.
//
// GPT-2's regex 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (llama.cpp's hand-written unicode_regex_split_custom_gpt2, since Go's regexp has no
// look-ahead) is, at each position of a piece, the first rule that applies:
//
//  1. an apostrophe followed by s, t, m, d, re, ve or ll (lower case only), inside the piece;
//  2. an optional space then a run of letters (\p{L});
//  3. an optional space then a run of numbers (\p{N});
//  4. an optional space then a run of characters that are neither whitespace, letters nor
//     numbers;
//  5. a run of n > 1 whitespace characters followed by another character of the piece: the first
//     n-1 of them (the last one joins the next word, as a leading space or on its own);
//  6. a run of whitespace: all of it;
//  7. otherwise one character.
//
// Llama 3's regex (llama.cpp's "llama-bpe", one step over the whole text)
// (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ is, at each position, the first rule that
// applies (every character starts one of them):
//
//  1. an apostrophe followed by s, t, m, d, re, ve or ll, in either case;
//  2. an optional character that is not \r, \n, a letter or a number (a space, a tab, a
//     punctuation mark...), then a run of letters;
//  3. one to three numbers ("qwen2": one number);
//  4. an optional space, a run of characters that are neither whitespace, letters nor numbers,
//     then every \r and \n that follows;
//  5. a run of whitespace that holds a \r or \n: up to its last \r or \n;
//  6. a run of n > 1 whitespace characters followed by another character: the first n-1 of them;
//  7. a run of whitespace: all of it.
//
// Qwen2's regex ("qwen2") is the same with \p{N} in place of \p{N}{1,3}.
//
// Whitespace is the Unicode White_Space property; letters and numbers the L and N categories.
// "smollm" (and llama.cpp's other digit-splitting types) first isolates every \p{N} character,
// so "2024" becomes four words and ". Definitions" stays one piece for the GPT-2 step.

// span is a half-open range of code points.
type span struct{ start, end int }

// splitNumbers isolates each number character of each piece: llama.cpp's "\p{N}" step, where
// every match and every unmatched stretch between matches become pieces.
func splitNumbers(runes []rune, pieces []span) []span {
	var out []span
	for _, p := range pieces {
		start := p.start
		for i := p.start; i < p.end; i++ {
			if unicode.IsNumber(runes[i]) {
				if i > start {
					out = append(out, span{start, i})
				}
				out = append(out, span{i, i + 1})
				start = i + 1
			}
		}
		if start < p.end {
			out = append(out, span{start, p.end})
		}
	}
	return out
}

// runeClass is what the GPT-2 rules need to know about a code point; outOfPiece is the class of
// positions past the ends of the current piece.
type runeClass uint8

const (
	outOfPiece runeClass = iota
	classWhitespace
	classLetter
	classNumber
	classOther
)

func classify(r rune) runeClass {
	switch {
	case unicode.Is(unicode.White_Space, r):
		return classWhitespace
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	}
	return classOther
}

// class returns the class of runes[i], or outOfPiece where i is outside the piece s.
func (s span) class(runes []rune, i int) runeClass {
	if i < s.start || i >= s.end {
		return outOfPiece
	}
	return classify(runes[i])
}

// splitGPT2 applies the GPT-2 rules above within each piece.
func splitGPT2(runes []rune, pieces []span) []span {
	var out []span
	for _, p := range pieces {
		class := func(i int) runeClass { return p.class(runes, i) }
		at := func(i int) rune {
			if i < p.start || i >= p.end {
				return -1
			}
			return runes[i]
		}
		prev := p.start
		emit := func(end int) {
			if end > prev {
				out = append(out, span{prev, end})
			}
			prev = end
		}
		for pos := p.start; pos < p.end; {
			r := runes[pos]
			// 1. contractions
			if r == '\'' && pos+1 < p.end {
				next := runes[pos+1]
				if next == 's' || next == 't' || next == 'm' || next == 'd' {
					pos += 2
					emit(pos)
					continue
				}
				if pos+2 < p.end {
					next2 := runes[pos+2]
					if (next == 'r' && next2 == 'e') || (next == 'v' && next2 == 'e') || (next == 'l' && next2 == 'l') {
						pos += 3
						emit(pos)
						continue
					}
				}
			}
			// 2.-4. an optional space, then a run of one class
			c := class(pos)
			if r == ' ' {
				c = class(pos + 1)
			}
			if c == classLetter || c == classNumber || c == classOther {
				if r == ' ' {
					pos++
				}
				for class(pos) == c {
					pos++
				}
				emit(pos)
				continue
			}
			// 5.-6. whitespace runs
			n := 0
			for class(pos+n) == classWhitespace {
				n++
			}
			if n > 1 && at(pos+n) != -1 {
				pos += n - 1
				emit(pos)
				continue
			}
			if n > 0 {
				pos += n
				emit(pos)
				continue
			}
			// 7. anything else, one character
			pos++
			emit(pos)
		}
	}
	return out
}

// splitLlama3 applies Llama 3's rules above within each piece, with runs of at most maxDigits
// numbers (3 for "llama-bpe", 1 for "qwen2").
func splitLlama3(runes []rune, pieces []span, maxDigits int) []span {
	var out []span
	for _, p := range pieces {
		class := func(i int) runeClass { return p.class(runes, i) }
		newline := func(i int) bool { return i < p.end && (runes[i] == '\r' || runes[i] == '\n') }
		lower := func(i int) rune {
			if i >= p.end {
				return -1
			}
			return unicode.ToLower(runes[i])
		}
		for pos := p.start; pos < p.end; {
			end := pos + 1 // a guard only: every character starts one of the rules
			switch c := class(pos); {
			case runes[pos] == '\'' && contraction(lower(pos+1), lower(pos+2)) > 0: // 1.
				end += contraction(lower(pos+1), lower(pos+2))
			case c == classLetter || (c != classNumber && !newline(pos) && class(pos+1) == classLetter): // 2.
				for class(end) == classLetter {
					end++
				}
			case c == classNumber: // 3.
				for end-pos < maxDigits && class(end) == classNumber {
					end++
				}
			case c == classOther || (runes[pos] == ' ' && class(pos+1) == classOther): // 4.
				for class(end) == classOther {
					end++
				}
				for newline(end) {
					end++
				}
			case c == classWhitespace: // 5.-7.
				n, lastNewline := 0, -1
				for ; class(pos+n) == classWhitespace; n++ {
					if newline(pos + n) {
						lastNewline = pos + n
					}
				}
				switch {
				case lastNewline >= 0:
					end = lastNewline + 1
				case n > 1 && pos+n < p.end:
					end = pos + n - 1
				default:
					end = pos + n
				}
			}
			out = append(out, span{pos, end})
			pos = end
		}
	}
	return out
}

// contraction returns the length of the contraction ('s, 't, 'm, 'd, 're, 've, 'll) after an
// apostrophe whose next two characters, lower-cased, are r1 and r2 (-1 past the piece's end),
// 0 if none.
func contraction(r1, r2 rune) int {
	switch {
	case r1 == 's' || r1 == 't' || r1 == 'm' || r1 == 'd':
		return 1
	case (r1 == 'r' && r2 == 'e') || (r1 == 'v' && r2 == 'e') || (r1 == 'l' && r2 == 'l'):
		return 2
	}
	return 0
}

// PreTokenizer names a pre-tokenization rule set (GGUF's "tokenizer.ggml.pre").
type PreTokenizer string

const (
	// PreGPT2 is GPT-2's split alone.
	PreGPT2 PreTokenizer = "gpt2"
	// PreSmolLM isolates each number character, then applies GPT-2's split (llama.cpp's
	// "smollm", shared by "starcoder").
	PreSmolLM PreTokenizer = "smollm"
	// PreLlamaBPE is Llama 3's split (numbers in runs of up to three). As llama.cpp's
	// "ignore_merges", a word that is a token of the vocabulary is that token, merges or not.
	PreLlamaBPE PreTokenizer = "llama-bpe"
	// PreQwen2 is Llama 3's split with each number on its own (llama.cpp's "qwen2").
	PreQwen2 PreTokenizer = "qwen2"
)

// preTokenizers maps the GGUF names to the rule sets; names that share llama.cpp's regexes share
// an entry. Beside each rule set's own name are the names llama.cpp (src/llama-vocab.cpp) gives
// the same pre-tokenizer type with no other setting this package lacks: its GPT-2 type ("gpt-2",
// "phi-2", ...; not "jina-v1-en", "jina-v2-code" and "roberta-bpe", which add a SEP token), its
// Llama 3 type ("llama3", "falcon3", ...: ignore_merges and BOS, as "llama-bpe") and its Qwen2
// type.
var preTokenizers = map[string]PreTokenizer{
	"gpt2":      PreGPT2,
	"smollm":    PreSmolLM,
	"starcoder": PreSmolLM,
	"llama-bpe": PreLlamaBPE,
	"qwen2":     PreQwen2,

	"gpt-2": PreGPT2, "phi-2": PreGPT2, "jina-es": PreGPT2, "jina-de": PreGPT2, "gigachat": PreGPT2,
	"jina-v2-es": PreGPT2, "jina-v2-de": PreGPT2, "a.x-4.0": PreGPT2, "mellum": PreGPT2,
	"modern-bert": PreGPT2, "exaone4": PreGPT2,

	"llama3": PreLlamaBPE, "llama-v3": PreLlamaBPE, "falcon3": PreLlamaBPE, "falcon-h1": PreLlamaBPE,
	"pixtral": PreLlamaBPE, "midm-2.0": PreLlamaBPE, "lfm2": PreLlamaBPE, "jina-v5-nano": PreLlamaBPE,

	"deepseek-r1-qwen": PreQwen2, "kormo": PreQwen2, "f2llmv2": PreQwen2, "megrez": PreQwen2,
}

// acceptedPreTokenizers lists the names of preTokenizers for messages, sorted.
var acceptedPreTokenizers = func() string {
	names := make([]string, 0, len(preTokenizers))
	for name := range preTokenizers {
		names = append(names, strconv.Quote(name))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}()

// valid reports whether p is one of the rule sets above.
func (p PreTokenizer) valid() bool {
	switch p {
	case PreGPT2, PreSmolLM, PreLlamaBPE, PreQwen2:
		return true
	}
	return false
}

// Split returns the words of text under the rule set p (see the package documentation), in
// order; their concatenation is text, with invalid UTF-8 bytes replaced by U+FFFD as llama.cpp
// replaces them.
func (p PreTokenizer) Split(text string) []string {
	runes := []rune(text)
	pieces := []span{{0, len(runes)}}
	switch p {
	case PreLlamaBPE:
		pieces = splitLlama3(runes, pieces, 3)
	case PreQwen2:
		pieces = splitLlama3(runes, pieces, 1)
	case PreSmolLM:
		pieces = splitGPT2(runes, splitNumbers(runes, pieces))
	default:
		pieces = splitGPT2(runes, pieces)
	}
	words := make([]string, len(pieces))
	for i, s := range pieces {
		buf := make([]byte, 0, s.end-s.start)
		for _, r := range runes[s.start:s.end] {
			buf = utf8.AppendRune(buf, r)
		}
		words[i] = string(buf)
	}
	return words
}
