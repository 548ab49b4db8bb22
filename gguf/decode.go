package gguf

import (
	"encoding/binary"
	"math"

	"github.com/pkg/errors"
	"github.com/x448/float16"
)

// Decode converts src, the raw storage of len(dst) elements of type t, to float32 into dst.
//
// The block formats are llama.cpp's (ggml-common.h), each block covering 32 consecutive elements:
//
//   - Q4_0: f16 scale d, then 16 bytes; byte j holds element j in its low nibble and element
//     j+16 in its high nibble, each decoded as (q - 8)·d.
//   - Q4_1: f16 scale d, f16 minimum m, then 16 bytes of nibbles as Q4_0, decoded as q·d + m.
//   - Q8_0: f16 scale d, then 32 int8 values, decoded as q·d.
//
// F32, F16 and BF16 are little-endian arrays. len(dst) must be a multiple of t's block size and
// len(src) exactly the storage of len(dst) elements; otherwise, or for a type that CanDecode
// rejects, Decode returns an error and leaves dst unspecified.
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
		for i := range dst {
			dst[i] = float16.Frombits(binary.LittleEndian.Uint16(src[2*i:])).Float32()
		}
	case TypeBF16:
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
		}
	case TypeQ4_0:
		for b := 0; b < len(dst)/32; b++ {
			blk, out := src[b*18:(b+1)*18], dst[b*32:(b+1)*32]
			d := f16(blk[0:])
			for j, q := range blk[2:18] {
				out[j] = float32(int(q&0x0F)-8) * d
				out[j+16] = float32(int(q>>4)-8) * d
			}
		}
	case TypeQ4_1:
		for b := 0; b < len(dst)/32; b++ {
			blk, out := src[b*20:(b+1)*20], dst[b*32:(b+1)*32]
			d, m := f16(blk[0:]), f16(blk[2:])
			for j, q := range blk[4:20] {
				out[j] = float32(q&0x0F)*d + m
				out[j+16] = float32(q>>4)*d + m
			}
		}
	case TypeQ8_0:
		for b := 0; b < len(dst)/32; b++ {
			blk, out := src[b*34:(b+1)*34], dst[b*32:(b+1)*32]
			d := f16(blk[0:])
			for j, q := range blk[2:34] {
				out[j] = float32(int8(q)) * d
			}
		}
	}
	return nil
}

// f16 reads a little-endian IEEE half-precision value.
func f16(b []byte) float32 {
	return float16.Frombits(binary.LittleEndian.Uint16(b)).Float32()
}
