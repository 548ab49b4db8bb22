package fileio

import (
	"io"
	"os"
	"path/filepath"

	"github.com/pkg/errors"
)

// WriteAtomic writes path with write through a temporary file in the same directory, synced and
// renamed into place, so that path holds either its old content or the whole new one, also after
// a crash. The file's mode is 0644 (the temporary file alone would be 0600): model and adapter
// files are read by other users and programs. On error the temporary file is removed and path is
// left as it was; the error names op.
func WriteAtomic(op, path string, write func(w io.Writer) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return errors.Wrap(err, op)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err = write(tmp); err != nil {
		return err
	}
	for _, step := range []func() error{func() error { return tmp.Chmod(0o644) }, tmp.Sync, tmp.Close} {
		if err = step(); err != nil {
			return errors.Wrap(err, op)
		}
	}
	return errors.Wrap(os.Rename(tmp.Name(), path), op)
}

// CheckOutput checks, before a long run, that a file can be written at path once it is done: its
// directory is created when missing, path is not a directory, and the directory takes a new file
// (one is created and removed). The error names key, the flag that gave path.
func CheckOutput(key, path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return errors.Wrapf(err, "%s %s", key, path)
	}
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		return errors.Errorf("%s %s: a directory; accepted: a file's path", key, path)
	}
	f, err := os.CreateTemp(dir, ".quanta-check*")
	if err != nil {
		return errors.Wrapf(err, "%s %s", key, path)
	}
	_ = f.Close()
	return errors.Wrapf(os.Remove(f.Name()), "%s %s", key, path)
}

// Output is one result file of a command: the flag or action that names it in errors, its path
// and its encoded content.
type Output struct {
	Name, Path string
	Data       []byte
}

// WriteOutputs writes each output in order, each replaced whole (WriteAtomic), so that an
// interrupted run leaves no truncated file. Callers encode every output before they call it, so
// that an encoding error leaves none written, and put the data before the tables made from it.
func WriteOutputs(outs ...Output) error {
	for _, out := range outs {
		if err := WriteAtomic(out.Name+" "+out.Path, out.Path, func(w io.Writer) error {
			_, err := w.Write(out.Data)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}
