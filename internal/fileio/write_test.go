package fileio_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
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
