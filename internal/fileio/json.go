package fileio

import (
	"bytes"
	"strconv"

	"github.com/pkg/errors"
)

// CheckSurrogates returns an error for a \u escape of a UTF-16 surrogate that is not half of a
// pair (a high one, then a low one) in text, valid JSON text (encoding/json has accepted it: a
// backslash starts an escape, inside a string), quoting the string that holds it. serde_json, which
// Hugging Face's readers (safetensors, tokenizers) parse with, refuses such an escape; encoding/json
// reads it as U+FFFD, renaming a tensor or a token, or altering metadata.
func CheckSurrogates(text []byte) error {
	surrogate := func(at int) (rune, bool) { // the \uXXXX escape at text[at:], if any
		if at+6 > len(text) || text[at] != '\\' || text[at+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(text[at+2:at+6]), 16, 16)
		return rune(v), err == nil
	}
	start := -1 // the string being read
	for i := 0; i < len(text); i++ {
		switch {
		case start < 0 && text[i] == '"':
			start = i
		case start >= 0 && text[i] == '"':
			start = -1
		case start >= 0 && text[i] == '\\':
			r, ok := surrogate(i)
			if !ok { // another escape: \" \\ \/ \b \f \n \r \t
				i++
				continue
			}
			if r >= 0xD800 && r < 0xDC00 {
				if low, ok := surrogate(i + 6); ok && low >= 0xDC00 && low < 0xE000 {
					i += 11
					continue
				}
			}
			if r >= 0xD800 && r < 0xE000 {
				end := start + 1 + bytes.IndexByte(text[start+1:], '"') // at an escaped quote at worst: a shorter excerpt
				return errors.Errorf("lone UTF-16 surrogate escape %s in %s; accepted: a high surrogate escape followed by a low one",
					text[i:i+6], text[start:min(end+1, start+200)])
			}
			i += 5
		}
	}
	return nil
}
