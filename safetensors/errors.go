package safetensors

import "github.com/pkg/errors"

var (
	// ErrCorrupt is wrapped by every error about a file that is not well-formed safetensors: a
	// header length past the end of the file, invalid JSON, unknown dtypes, offsets that do not
	// match the shapes, leave gaps, overlap, or do not end where the file ends.
	ErrCorrupt = errors.New("safetensors: corrupt file")

	// ErrUnsupported is wrapped by errors about valid content this package cannot convert: an 8-bit
	// or sub-byte float tensor read as a GoMLX tensor, a GoMLX dtype safetensors has no name for.
	ErrUnsupported = errors.New("safetensors: unsupported")

	// ErrNotFound is wrapped by errors about a tensor name the file lacks.
	ErrNotFound = errors.New("safetensors: not found")
)
