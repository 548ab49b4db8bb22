package tokenizer_test

import (
	"bytes"
	"testing"
	"unicode/utf8"

	"github.com/quanta-ml/quanta/tokenizer"
)

// TestUTF8Writer: characters split across writes are written whole, bytes that form no
// character as U+FFFD, and a character cut by the end as U+FFFD; what was written after each
// write is valid UTF-8.
func TestUTF8Writer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pieces []string
		want   string
	}{
		{"ascii", []string{"ab", "c"}, "abc"},
		{"empty", []string{"", ""}, ""},
		{"emoji in two", []string{"a\xf0\x9f", "\x8e\x89b"}, "a🎉b"},
		{"emoji byte by byte", []string{"\xf0", "\x9f", "\x8e", "\x89"}, "🎉"},
		{"CJK in three", []string{"\xe4", "\xbd", "\xa0\xe5\xa5\xbd"}, "你好"},
		{"cut at the end", []string{"ok \xf0\x9f"}, "ok \uFFFD"},
		{"lead byte then ascii", []string{"\xe4", "x"}, "\uFFFDx"},
		{"stray continuation", []string{"\x80", "y"}, "\uFFFDy"},
		{"invalid byte", []string{"\xff"}, "\uFFFD"},
		{"control characters", []string{"\x00\x1b[0m\t"}, "\x00\x1b[0m\t"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			w := tokenizer.NewUTF8Writer(&out)
			for _, p := range tc.pieces {
				if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", p, n, err)
				}
				if !utf8.ValidString(out.String()) {
					t.Errorf("after %q: %q is not valid UTF-8", p, out.String())
				}
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if got := out.String(); got != tc.want {
				t.Errorf("wrote %q, want %q", got, tc.want)
			}
		})
	}
}
