package fileio

import (
	"encoding/binary"
	"math"

	"github.com/x448/float16"
)

// DecodeF16 converts the little-endian IEEE half-precision values in src to dst (len(dst) of
// them), exactly.
func DecodeF16(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = float16.Frombits(binary.LittleEndian.Uint16(src[2*i:])).Float32()
	}
}

// DecodeBF16 converts the little-endian bfloat16 values in src to dst (len(dst) of them), exactly:
// each is the top half of a float32.
func DecodeBF16(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
	}
}
