package fileio_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/fileio"
)

// TestWriteAtomic: a write that fails leaves path as it was and no temporary file; one that
// succeeds replaces path whole, mode 0644.
func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	failed := errors.New("disk full")
	err := fileio.WriteAtomic("op", path, func(w io.Writer) error {
		_, _ = w.Write([]byte("partial"))
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("failing write: %v, want %v", err, failed)
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("after a failed write the file holds %q, want %q", got, "old")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("after a failed write the folder holds %d entries, want the file alone", len(entries))
	}
	if err := fileio.WriteAtomic("op", path, func(w io.Writer) error {
		_, err := w.Write([]byte("new"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if got, _ := os.ReadFile(path); err != nil || string(got) != "new" || info.Mode().Perm() != 0o644 {
		t.Errorf("after a write: %q, mode %v, %v; want %q, 0644", got, info.Mode().Perm(), err, "new")
	}
}

// TestCheckOutput: a path under a regular file, or naming a directory, is an error naming the
// flag; a path in a missing directory gets the directory, and nothing else is left behind.
func TestCheckOutput(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(file, "out.json"), root} {
		if err := fileio.CheckOutput("-json", path); err == nil || !strings.Contains(err.Error(), "-json "+path) {
			t.Errorf("CheckOutput(%s) = %v; want an error naming -json and the path", path, err)
		}
	}
	path := filepath.Join(root, "a", "b", "out.json")
	if err := fileio.CheckOutput("-json", path); err != nil {
		t.Fatalf("CheckOutput(%s) = %v", path, err)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(entries) != 0 {
		t.Errorf("the directory holds %v (%v); want it empty", entries, err)
	}
}

// TestWriteOutputs: the outputs are written whole and in order; the first that cannot be written
// stops the rest, with an error naming its flag and path.
func TestWriteOutputs(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.md")
	if err := fileio.WriteOutputs(fileio.Output{Name: "-json", Path: a, Data: []byte("{}\n")},
		fileio.Output{Name: "-markdown", Path: b, Data: []byte("| x |\n")}); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{a: "{}\n", b: "| x |\n"} {
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", path, got, err, want)
		}
	}
	blocked, c := filepath.Join(a, "under-a-file.md"), filepath.Join(dir, "c.png")
	err := fileio.WriteOutputs(fileio.Output{Name: "-markdown", Path: blocked, Data: []byte("x")},
		fileio.Output{Name: "-png", Path: c, Data: []byte("x")})
	if err == nil || !strings.Contains(err.Error(), "-markdown "+blocked) {
		t.Errorf("an output under a file: %v; want an error naming -markdown and its path", err)
	}
	if _, err := os.Stat(c); !os.IsNotExist(err) {
		t.Errorf("the output after the failed one was written (stat: %v)", err)
	}
}
