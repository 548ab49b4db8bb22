package tokenizer_test

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/tokenizer"
)

// gpl3 is a long real text, when the machine has it.
const gpl3 = "/usr/share/common-licenses/GPL-3"

// TestSmolLM2 checks what follows from the vocabulary and the rules without reference ids:
// the special tokens, single-digit tokens, and decode(encode(text)) == text.
func TestSmolLM2(t *testing.T) {
	tok, _ := assetBPE(t, assets.SmolLM2)
	if tok.VocabSize() != 49152 || tok.PreTokenizer() != tokenizer.PreSmolLM || tok.EOS() != 2 {
		t.Errorf("vocabulary %d, pre-tokenizer %q, EOS %d", tok.VocabSize(), tok.PreTokenizer(), tok.EOS())
	}
	chat := "<|im_start|>user\nHi<|im_end|>"
	ids := tok.Encode(chat, tokenizer.EncodeOptions{ParseSpecial: true})
	if ids[0] != 1 || ids[len(ids)-1] != 2 || tok.Token(1) != "<|im_start|>" {
		t.Errorf("Encode(%q, ParseSpecial) = %v", chat, ids)
	}
	if plain := tok.Encode(chat, tokenizer.EncodeOptions{}); plain[0] == 1 || len(plain) <= len(ids) {
		t.Errorf("without ParseSpecial the control tokens must be text: %v", plain)
	}
	if got := tok.Encode("x", tokenizer.EncodeOptions{AddSpecial: true}); len(got) != 1 {
		t.Errorf("add_bos_token is false, yet AddSpecial gave %v", got)
	}
	var digits []string
	for _, id := range tok.Encode("In 2024, 31337 people", tokenizer.EncodeOptions{}) {
		if s := tok.Token(id); strings.ContainsAny(s, "0123456789") {
			digits = append(digits, s)
		}
	}
	if want := []string{"2", "0", "2", "4", "3", "1", "3", "3", "7"}; !reflect.DeepEqual(digits, want) {
		t.Errorf("digit tokens %q, want one per digit %q", digits, want)
	}
	texts := []string{"Hello, world!", "  \n\n  mixed\twhitespace  ", "don't I'LL", "café 日本語 😀🎉👍🏽 👨‍👩‍👧‍👦", "x = a + b * c / d"}
	if raw, err := os.ReadFile(gpl3); err == nil {
		texts = append(texts, string(raw))
	}
	for _, text := range texts {
		if got := tok.Decode(tok.Encode(text, tokenizer.EncodeOptions{})); got != text {
			t.Errorf("Decode(Encode(%.40q...)) differs", text)
		}
	}
}

// referenceDir holds llama.cpp's token ids from the reference harness (reference/gen_tokens.py).
var referenceDir = filepath.Join("..", "reference", "testdata", "tokenizer")

// TestSmolLM2Reference compares with llama.cpp's ids of ~40 strings and of the GPL-3 text.
func TestSmolLM2Reference(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(referenceDir, "strings.json"))
	if err != nil {
		t.Skipf("reference vectors missing: %s (reference/gen_tokens.py writes them)", referenceDir)
	}
	tok, _ := assetBPE(t, assets.SmolLM2)
	var ref struct {
		Strings []struct {
			Text        string `json:"text"`
			IDs         []int  `json:"ids"`
			Detokenized string `json:"detokenized"`
		} `json:"strings"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	for _, s := range ref.Strings {
		got := tok.Encode(s.Text, tokenizer.EncodeOptions{})
		if len(got) == 0 && len(s.IDs) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, s.IDs) {
			t.Errorf("Encode(%q) = %v\nllama.cpp:     %v", s.Text, got, s.IDs)
		}
		if d := tok.Decode(s.IDs); d != s.Detokenized {
			t.Errorf("Decode(%v) = %q, llama.cpp %q", s.IDs, d, s.Detokenized)
		}
	}
	want, err := readInt32Npy(filepath.Join(referenceDir, "gpl3_ids.npy"))
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(gpl3)
	if err != nil {
		t.Skipf("%s missing: the GPL-3 comparison needs it", gpl3)
	}
	got := tok.Encode(string(text), tokenizer.EncodeOptions{})
	for i, w := range want {
		if i >= len(got) || got[i] != int(w) {
			t.Fatalf("GPL-3: first difference at token %d: got %v, llama.cpp %v", i, got[i:min(i+8, len(got))], want[i:min(i+8, len(want))])
		}
	}
}

// readInt32Npy reads a little-endian int32 .npy file (format 1.0, C order).
func readInt32Npy(path string) ([]int32, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(raw) < 10 || string(raw[1:6]) != "NUMPY" {
		return nil, os.ErrInvalid
	}
	headerLen := int(binary.LittleEndian.Uint16(raw[8:10]))
	if 10+headerLen > len(raw) || !strings.Contains(string(raw[10:10+headerLen]), "'<i4'") {
		return nil, os.ErrInvalid
	}
	data := raw[10+headerLen:]
	out := make([]int32, len(data)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return out, nil
}
