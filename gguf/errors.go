package gguf

import "github.com/pkg/errors"

var (
	// ErrCorrupt is wrapped by every error about a file that is not well-formed GGUF: a wrong
	// magic, a truncated header or data section, sizes or offsets outside the file, overlapping
	// tensors, a metadata value of the wrong type for its key.
	ErrCorrupt = errors.New("gguf: corrupt file")

	// ErrUnsupported is wrapped by errors about well-formed content this package does not handle:
	// a GGUF version other than 2 and 3, a big-endian file, an unknown tensor type, decoding a
	// type CanDecode rejects, quantizing to a type other than the block types.
	ErrUnsupported = errors.New("gguf: unsupported")

	// ErrNotFound is wrapped by errors about a metadata key or tensor name the file lacks.
	ErrNotFound = errors.New("gguf: not found")
)
