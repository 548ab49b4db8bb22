package tokenizer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/quanta-ml/quanta/tokenizer"
)

// TestWordPieceSpecialFile: a tokenizer.json or vocab.txt that is a device is refused by name:
// os.ReadFile of /dev/zero never ends, growing without bound; /dev/urandom, read a line at a
// time, did the same.
func TestWordPieceSpecialFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func() error
	}{
		{"NewWordPieceFromJSON(/dev/zero)", func() error { _, err := tokenizer.NewWordPieceFromJSON("/dev/zero"); return err }},
		{"NewWordPieceFromVocab(/dev/urandom)", func() error {
			_, err := tokenizer.NewWordPieceFromVocab("/dev/urandom", tokenizer.BertOptions())
			return err
		}},
	} {
		done := make(chan error, 1)
		go func() { done <- tc.open() }()
		var err error
		select {
		case err = <-done:
		case <-time.After(3 * time.Second):
			t.Fatalf("%s: still reading after 3s", tc.name)
		}
		if err == nil || !strings.Contains(err.Error(), "regular file") {
			t.Errorf("%s: error %v; want one refusing a file that is not a regular file", tc.name, err)
		}
	}
}
