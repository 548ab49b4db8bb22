package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizer splits text into the words that BPE merges within, with llama.cpp's rules
// (src/unicode.cpp) for the GPT-2 family of tokenizers. It works on code points, each piece of a
// step split further by the next step, never across a boundary of the previous one.
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

// splitGPT2 applies the GPT-2 rules above within each piece.
func splitGPT2(runes []rune, pieces []span) []span {
	var out []span
	for _, p := range pieces {
		class := func(i int) runeClass {
			if i < p.start || i >= p.end {
				return outOfPiece
			}
			return classify(runes[i])
		}
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

// PreTokenizer names a pre-tokenization rule set (GGUF's "tokenizer.ggml.pre").
type PreTokenizer string

const (
	// PreGPT2 is GPT-2's split alone.
	PreGPT2 PreTokenizer = "gpt2"
	// PreSmolLM isolates each number character, then applies GPT-2's split (llama.cpp's
	// "smollm", shared by "starcoder").
	PreSmolLM PreTokenizer = "smollm"
)

// preTokenizers maps the GGUF names to the rule sets; names that share llama.cpp's regexes share
// an entry.
var preTokenizers = map[string]PreTokenizer{
	"gpt2":      PreGPT2,
	"smollm":    PreSmolLM,
	"starcoder": PreSmolLM,
}

const acceptedPreTokenizers = `"gpt2", "smollm", "starcoder"`

// Split returns the words of text under the rule set p (see the package documentation), in
// order; their concatenation is text, with invalid UTF-8 bytes replaced by U+FFFD as llama.cpp
// replaces them.
func (p PreTokenizer) Split(text string) []string {
	runes := []rune(text)
	pieces := []span{{0, len(runes)}}
	if p == PreSmolLM {
		pieces = splitNumbers(runes, pieces)
	}
	pieces = splitGPT2(runes, pieces)
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
