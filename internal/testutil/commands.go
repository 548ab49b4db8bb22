package testutil

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ArgumentRefused checks that check, a command's flag check, refuses a command line holding an
// argument ("int8 -json out.json") with an error naming it: flag parsing stops at the first
// argument, so the flags after it would otherwise be dropped silently.
func ArgumentRefused(t *testing.T, check func() error) {
	t.Helper()
	defer func() { _ = flag.CommandLine.Parse(nil) }()
	if err := flag.CommandLine.Parse([]string{"int8", "-json", "out.json"}); err != nil {
		t.Fatal(err)
	}
	if err := check(); err == nil || !strings.Contains(err.Error(), `argument "int8"`) {
		t.Errorf("the flag check with the arguments int8 -json out.json = %v; want an error naming \"int8\"", err)
	}
}

// FileInTemp returns a regular file in a fresh temporary folder: no output can be written below
// it (filepath.Join(file, "out")).
func FileInTemp(t testing.TB) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// JSONEnvironment checks that the JSON file at path records what its figures ran on in
// "environment" as runtime.Environment writes it: the backend, the kernels and XLA_FLAGS.
func JSONEnvironment(t testing.TB, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Environment string `json:"environment"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"backend ", "kernels", "XLA_FLAGS="} {
		if !strings.Contains(got.Environment, want) {
			t.Errorf("%s: environment %q lacks %q", path, got.Environment, want)
		}
	}
}
