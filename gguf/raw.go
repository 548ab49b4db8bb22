package gguf

import "io"

// TensorReader returns a reader of the stored bytes of the tensor called name (Tensor.Bytes of
// them, from its offset), for a loader that streams them into storage of its own instead of the
// copy ReadRaw allocates.
func (f *File) TensorReader(name string) (*io.SectionReader, error) {
	t, err := f.lookup("TensorReader", name)
	if err != nil {
		return nil, err
	}
	return io.NewSectionReader(f.r, t.Offset, t.Bytes), nil
}
