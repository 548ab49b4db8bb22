// Package fileio holds the file plumbing the model-file readers (gguf, safetensors) share.
package fileio

import (
	"io"
	"os"

	"github.com/pkg/errors"
)

// Open opens path and parses it with read (given the file and its size). It returns the parsed
// value and the open file, which the caller closes; on any error the file is closed and the
// error names op and path.
func Open[T any](op, path string, read func(r io.ReaderAt, size int64) (T, error)) (T, *os.File, error) {
	var none T
	f, err := os.Open(path)
	if err != nil {
		return none, nil, errors.Wrap(err, op)
	}
	info, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return none, nil, errors.Wrap(err, op)
	}
	v, err := read(f, info.Size())
	if err != nil {
		_ = f.Close()
		return none, nil, errors.WithMessagef(err, "%s(%q)", op, path)
	}
	return v, f, nil
}
