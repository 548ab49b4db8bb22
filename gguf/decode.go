package gguf

import (
	"encoding/binary"
	"math"

	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/x448/float16"
)

// Decode converts src, the raw storage of len(dst) elements of type t, to float32 into dst.
//
// F32, F16 and BF16 are little-endian arrays. The block types (BlockTypes) are ggml's
// (ggml-common.h): every value equals what ggml's dequantize_row_* computes from the same bytes,
// bit for bit (a NaN is some NaN); the package documentation describes their layouts. len(dst)
// must be a multiple of t's block size and len(src) exactly the storage of len(dst) elements;
// otherwise, or for a type that CanDecode rejects, Decode returns an error and leaves dst
// unspecified.
func Decode(t Type, src []byte, dst []float32) error {
	if !t.CanDecode() {
		return errors.Wrapf(ErrUnsupported, "gguf.Decode: type %s; accepted: %s", t, decodableNames)
	}
	bs, bb := t.BlockSize(), t.BlockBytes()
	if len(dst)%bs != 0 || len(src) != len(dst)/bs*bb {
		return errors.Errorf("gguf.Decode: %d bytes of %s for %d elements; %s needs %d bytes per %d elements",
			len(src), t, len(dst), t, bb, bs)
	}
	switch t {
	case TypeF32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case TypeF16:
		fileio.DecodeF16(src, dst)
	case TypeBF16:
		fileio.DecodeBF16(src, dst)
	default:
		decodeBlock := traits[t].decodeBlock
		for b := range len(dst) / bs {
			decodeBlock(src[b*bb:(b+1)*bb], dst[b*bs:(b+1)*bs])
		}
	}
	return nil
}

// f16 reads a little-endian IEEE half-precision value.
func f16(b []byte) float32 {
	return float16.Frombits(binary.LittleEndian.Uint16(b)).Float32()
}
