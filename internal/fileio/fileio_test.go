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

type file struct {
	size   int64
	closer fileio.Closer
}

func closerOf(f *file) *fileio.Closer { return &f.closer }

func TestOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.bin")
	if err := os.WriteFile(path, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := fileio.Open("test.Open", path, func(r io.ReaderAt, size int64) (*file, error) { return &file{size: size}, nil }, closerOf)
	if err != nil || f.size != 5 {
		t.Fatalf("Open: %v, %+v", f, err)
	}
	if err := f.closer.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := f.closer.Close(); err != nil {
		t.Errorf("second Close: %v, want a no-op", err)
	}
	bad := errors.New("bad header")
	_, err = fileio.Open("test.Open", path, func(io.ReaderAt, int64) (*file, error) { return nil, bad }, closerOf)
	if !errors.Is(err, bad) || !strings.Contains(err.Error(), "test.Open(") {
		t.Errorf("Open of a bad file: %v", err)
	}
	if _, err := fileio.Open("test.Open", path+".none", nil, closerOf); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open of a missing file: %v", err)
	}
}

func TestLookup(t *testing.T) {
	notFound := errors.New("not found")
	byName := map[string]int{"a": 1}
	if v, err := fileio.Lookup(byName, notFound, "test.Read", "a"); v != 1 || err != nil {
		t.Errorf("Lookup(a) = %d, %v", v, err)
	}
	if _, err := fileio.Lookup(byName, notFound, "test.Read", "b"); !errors.Is(err, notFound) || err.Error() != `test.Read: tensor "b": not found` {
		t.Errorf("Lookup(b): %v", err)
	}
}
