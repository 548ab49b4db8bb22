package tokenizer

import "unicode/utf8"

// GPT-2's byte-level alphabet: every byte is written as one printable character, so that a
// vocabulary of text tokens covers arbitrary bytes. Printable Latin-1 bytes ('!'..'~', '¡'..'¬',
// '®'..'ÿ') stand for themselves; the other 68 bytes, in increasing order, take the characters
// U+0100, U+0101, ... (so the space 0x20 is 'Ġ' U+0120 and the newline 0x0A is 'Ċ' U+010A).
var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
)

func init() {
	next := rune(256)
	for b := 0; b < 256; b++ {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = next
			next++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteEncode writes the bytes of s in the byte-level alphabet.
func byteEncode(s string) string {
	out := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		out = utf8.AppendRune(out, byteToRune[s[i]])
	}
	return string(out)
}

// byteDecode maps a token's text in the byte-level alphabet back to bytes; a character outside
// the alphabet is kept as its UTF-8.
func byteDecode(s string) []byte {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if b, ok := runeToByte[r]; ok {
			out = append(out, b)
		} else {
			out = utf8.AppendRune(out, r)
		}
	}
	return out
}
