// Package fileio holds what the readers of model files and configurations share: the plumbing of
// opening a file (gguf, safetensors), the conversion of the half-precision floats both store
// (DecodeF16, DecodeBF16), and the checks of the numbers read from them (Elements, CheckInt,
// CheckFloatAbove), applied before anything is allocated in proportion to a number and before a
// hyper-parameter is used, with errors that name the key and the accepted range; the check of JSON
// text that Hugging Face's serde_json refuses and encoding/json reads (CheckSurrogates); the writing of a
// file replaced whole (WriteAtomic); and the process's memory figures the commands report
// (ProcStatus).
package fileio

import (
	"io"
	"os"

	"github.com/pkg/errors"
)

// Open opens path, parses it with read (given the file and its size) and hands the open file to
// the result's Closer (closer returns it), so that the result's Close closes the file. On any
// error the file is closed and the error names op and path.
func Open[T any](op, path string, read func(r io.ReaderAt, size int64) (T, error), closer func(T) *Closer) (T, error) {
	var none T
	f, err := os.Open(path)
	if err != nil {
		return none, errors.Wrap(err, op)
	}
	info, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return none, errors.Wrap(err, op)
	}
	if err := regular(op, path, info); err != nil {
		_ = f.Close()
		return none, err
	}
	v, err := read(f, info.Size())
	if err != nil {
		_ = f.Close()
		return none, errors.WithMessagef(err, "%s(%q)", op, path)
	}
	closer(v).c = f
	return v, nil
}

// regular refuses a file that is not a regular one (a directory, a device, a FIFO: a device such
// as /dev/zero reads without end), naming op and path.
func regular(op, path string, info os.FileInfo) error {
	if info.Mode().IsRegular() {
		return nil
	}
	what := "a directory"
	if !info.IsDir() {
		what = "mode " + info.Mode().String()
	}
	return errors.Errorf("%s(%q): %s; accepted: a regular file", op, path, what)
}

// MaxConfigBytes bounds the JSON and text files read whole (config.json, tokenizer.json,
// adapter_config.json): far above the largest real one (a tokenizer.json of a few tens of MB).
const MaxConfigBytes = 1 << 30

// ReadFile reads the whole of the regular file at path, of at most limit bytes: a device or a
// FIFO (os.ReadFile of /dev/zero never ends, growing without bound) or a larger file is an error
// naming op and path.
func ReadFile(op, path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errors.Wrap(err, op)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, errors.Wrap(err, op)
	}
	if err := regular(op, path, info); err != nil {
		return nil, err
	}
	if info.Size() > limit {
		return nil, errors.Errorf("%s(%q): %d bytes; accepted: at most %d", op, path, info.Size(), limit)
	}
	// The size is read again through a bounded reader: the file may grow after Stat.
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, errors.Wrapf(err, "%s(%q)", op, path)
	}
	if int64(len(data)) > limit {
		return nil, errors.Errorf("%s(%q): over %d bytes; accepted: at most %d", op, path, limit, limit)
	}
	return data, nil
}

// Must returns v, or panics with err: the Must form of a reader's Open and reads.
func Must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Closer closes the file a reader's Open opened. The zero Closer, of a reader given an io.ReaderAt
// that belongs to the caller, closes nothing.
type Closer struct{ c io.Closer }

// Close closes the file, once: closing again is a no-op.
func (c *Closer) Close() error {
	if c.c == nil {
		return nil
	}
	err := c.c.Close()
	c.c = nil
	return err
}

// Lookup returns the entry called name, or an error wrapping notFound that names op and name.
func Lookup[T any](byName map[string]T, notFound error, op, name string) (T, error) {
	t, ok := byName[name]
	if !ok {
		return t, errors.Wrapf(notFound, "%s: tensor %q", op, name)
	}
	return t, nil
}
