package main

import (
	"path/filepath"
	"testing"

	"github.com/quanta-ml/quanta/internal/testutil"
)

// TestMarkdownReplacedWhole: -markdown is replaced whole (a complete new file renamed over the old
// one), not rewritten in place, where an interrupted run left a truncated file.
func TestMarkdownReplacedWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peer.md")
	testutil.ReplacedWhole(t, func() error { return writeMarkdown(path, "| quanta variant | eformer |\n") }, path)
}
