package main

import (
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// TestRunNoContextLength: a file without llama.context_length and no -maxlen is an error naming
// the missing key and the flag that supplies it (it said "-maxlen 0 (context length 0) leaves no
// room for an answer").
func TestRunNoContextLength(t *testing.T) {
	testutil.Backend(t)
	model := tinyModel(t, 0, ggufbuild.KV{Key: "llama.context_length"})
	code, _, stderr := runCmd("run", "-max", "2", model, "hi")
	if code != exitFailure || !strings.Contains(stderr, "llama.context_length") || !strings.Contains(stderr, "-maxlen") {
		t.Errorf("exit code %d, stderr:\n%s\nwant a failure naming llama.context_length and -maxlen", code, stderr)
	}
	if code, _, stderr := runCmd("run", "-max", "2", "-maxlen", "32", model, "hi"); code != exitOK {
		t.Errorf("-maxlen 32: exit code %d, stderr:\n%s", code, stderr)
	}
}
