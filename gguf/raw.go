package gguf

import (
	"io"

	"github.com/pkg/errors"
)

// TensorReader returns a reader of the stored bytes of the tensor called name (Tensor.Bytes of
// them, from its offset), for a loader that streams them into storage of its own instead of the
// copy ReadRaw allocates. It first reads the tensor's last byte, so that a loader learns that the
// reader does not hold the tensor (an error wrapping ErrCorrupt: Read was given a size larger than
// its content, or the file was cut since) before it allocates storage for it.
func (f *File) TensorReader(name string) (*io.SectionReader, error) {
	t, err := f.lookup("TensorReader", name)
	if err != nil {
		return nil, err
	}
	if err := f.holds(t); err != nil {
		return nil, errors.WithMessagef(err, "gguf.TensorReader: tensor %q (%d bytes at offset %d)", name, t.Bytes, t.Offset)
	}
	return io.NewSectionReader(f.r, t.Offset, t.Bytes), nil
}
