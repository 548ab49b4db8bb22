package tokenizer

import (
	"bytes"
	"io"
	"unicode/utf8"
)

// UTF8Writer writes the bytes of a generation's tokens (Bytes), streamed one token at a time, to
// an io.Writer as valid UTF-8: a character split across tokens (an emoji or a CJK character is
// often two or three byte-level tokens) is held back until the token with its last byte arrives,
// so that it is never written in halves, and bytes that form no character are written as U+FFFD.
type UTF8Writer struct {
	w       io.Writer
	pending []byte // the start of a character whose last bytes have not come yet
}

// NewUTF8Writer returns a UTF8Writer to w.
func NewUTF8Writer(w io.Writer) *UTF8Writer { return &UTF8Writer{w: w} }

// Write writes the complete characters of the bytes held back and p, and holds back a character
// p leaves unfinished. It returns len(p), or the error of the underlying writer.
func (u *UTF8Writer) Write(p []byte) (int, error) {
	u.pending = append(u.pending, p...)
	cut := len(u.pending)
	// An unfinished character starts in the last UTFMax-1 bytes, at the last byte that is not a
	// continuation byte (FullRune is true for an invalid start, which is written as it is).
	for i := len(u.pending) - 1; i >= 0 && i > len(u.pending)-utf8.UTFMax; i-- {
		if utf8.RuneStart(u.pending[i]) {
			if !utf8.FullRune(u.pending[i:]) {
				cut = i
			}
			break
		}
	}
	if cut > 0 {
		if _, err := u.w.Write(bytes.ToValidUTF8(u.pending[:cut], []byte(string(utf8.RuneError)))); err != nil {
			return 0, err
		}
		u.pending = append(u.pending[:0], u.pending[cut:]...)
	}
	return len(p), nil
}

// Flush writes a character still held back, which the generation ended inside of, as U+FFFD.
func (u *UTF8Writer) Flush() error {
	if len(u.pending) == 0 {
		return nil
	}
	u.pending = u.pending[:0]
	_, err := u.w.Write([]byte(string(utf8.RuneError)))
	return err
}
