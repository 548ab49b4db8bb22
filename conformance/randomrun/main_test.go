package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/testutil"
)

// TestSummaryReplacedWhole: -json is replaced whole (a complete new file renamed over the old one),
// not rewritten in place, where an interrupted run left a truncated file.
func TestSummaryReplacedWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "summary.json")
	testutil.ReplacedWhole(t, func() error { return writeSummary(path, map[string]int{"Cases": 3}) }, path)
}

// TestCheckFlags: a -json that cannot be written is an error naming -json before the run (the
// run's summary was then not written and the command still exited 0), as are an argument, after
// which -json was not read, and a missing -dir.
func TestCheckFlags(t *testing.T) {
	file := testutil.FileInTemp(t)
	dir, jsonPath := *flagDir, *flagJSON
	defer func() { *flagDir, *flagJSON = dir, jsonPath }()
	for _, c := range []struct{ dir, json, want string }{
		{"run", filepath.Join(file, "summary.json"), "-json " + file},
		{"", "", "-dir is required"},
		{"run", "", ""},
	} {
		*flagDir, *flagJSON = c.dir, c.json
		if err := checkFlags(); c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("-dir %q -json %q: checkFlags() = %v; want %q", c.dir, c.json, err, c.want)
		}
	}
	*flagDir = "run"
	testutil.ArgumentRefused(t, checkFlags)
}
