package main

import (
	"path/filepath"
	"testing"

	"github.com/quanta-ml/quanta/internal/testutil"
)

// TestSummaryReplacedWhole: -json is replaced whole (a complete new file renamed over the old one),
// not rewritten in place, where an interrupted run left a truncated file.
func TestSummaryReplacedWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "summary.json")
	testutil.ReplacedWhole(t, func() error { return writeSummary(path, map[string]int{"Cases": 3}) }, path)
}
