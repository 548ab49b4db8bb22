package gguf

import (
	"encoding/binary"
	"math"
	"slices"

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

// CheckScales returns nil when every half-precision scale of the blocks of type t in src (the d of
// each block, and its m or dmin where the type has one) is finite, and otherwise an error wrapping
// ErrCorrupt naming the first block (its index in src) and scale that is NaN or infinite: such a
// block decodes to NaN or infinite values, and every product over it gives NaN. It reads only the
// scales (2 or 4 bytes a block), not the codes. Types without block scales (the float types)
// always pass; len(src) must be a whole number of blocks.
func CheckScales(t Type, src []byte) error {
	bb := t.BlockBytes()
	if bb == 0 || len(src)%bb != 0 {
		return errors.Errorf("gguf.CheckScales: %d bytes of %s; accepted: whole blocks of %d bytes", len(src), t, bb)
	}
	if block, at := firstNonFiniteScale(t, src); block >= 0 {
		return scaleError(t, src[block*bb:(block+1)*bb], block, at)
	}
	return nil
}

// firstNonFiniteScale returns the index of the first block of t in src with a NaN or infinite
// scale and that scale's offset in the block, or -1.
func firstNonFiniteScale(t Type, src []byte) (block, at int) {
	bb := t.BlockBytes()
	block = -1
	for _, s := range traits[t].scales {
		// A half is NaN or infinite when its five exponent bits (of its high byte) are all set.
		for off := s + 1; off < len(src); off += bb {
			if src[off]&0x7C == 0x7C {
				if b := off / bb; block < 0 || b < block {
					block, at = b, s
				}
				break
			}
		}
	}
	return block, at
}

// nonFiniteFloats reports whether src, values of the float type t (F32, F16 or BF16; any other
// type gives false), holds a NaN or an infinity: a value whose exponent bits are all set. It tests
// eight bytes at a time: adding the lowest exponent bit to a value's masked exponent bits carries
// into its sign bit only when they are all set, and never past it into the next value.
func nonFiniteFloats(t Type, src []byte) bool {
	var mask, low uint64
	switch t {
	case TypeF32:
		mask, low = 0x7F800000_7F800000, 0x00800000_00800000
	case TypeF16:
		mask, low = 0x7C00_7C00_7C00_7C00, 0x0400_0400_0400_0400
	case TypeBF16:
		mask, low = 0x7F80_7F80_7F80_7F80, 0x0080_0080_0080_0080
	default:
		return false
	}
	var acc, acc1, acc2, acc3 uint64 // four chains, so that the ORs of consecutive words overlap
	i := 0
	for ; i+32 <= len(src); i += 32 {
		w := src[i : i+32]
		acc |= binary.LittleEndian.Uint64(w)&mask + low
		acc1 |= binary.LittleEndian.Uint64(w[8:])&mask + low
		acc2 |= binary.LittleEndian.Uint64(w[16:])&mask + low
		acc3 |= binary.LittleEndian.Uint64(w[24:])&mask + low
	}
	acc |= acc1 | acc2 | acc3
	for ; i+8 <= len(src); i += 8 {
		acc |= binary.LittleEndian.Uint64(src[i:])&mask + low
	}
	var tail [8]byte // the last values, padded with zeros (finite)
	copy(tail[:], src[i:])
	acc |= binary.LittleEndian.Uint64(tail[:])&mask + low
	return acc&(mask+low) != 0
}

// scaleError describes the non-finite scale at offset at of blk, block number index of type t.
func scaleError(t Type, blk []byte, index, at int) error {
	names := []string{"d", "m"}
	if t == TypeQ2_K || t == TypeQ4_K || t == TypeQ5_K {
		names[1] = "dmin"
	}
	name := names[slices.Index(traits[t].scales, at)]
	return errors.Wrapf(ErrCorrupt, "%s block %d: scale %s is %v; accepted: finite scales", t, index, name, f16(blk[at:]))
}
