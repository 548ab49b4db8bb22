package gguf_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
)

// TestCheckScales: a NaN or infinite half-precision scale, at the offsets ggml-common.h gives
// each block type (block_q4_0's d at 0, block_q4_1's d and m at 0 and 2, block_q2_K's d and dmin
// after 16 scale bytes and 64 code bytes, block_q3_K's d after 32 + 64 + 12 bytes, block_q6_K's
// after 128 + 64 + 16), is named by block and scale; the same bytes decode to a non-finite value
// (so the offset is a scale's), and with finite scales every block passes. DecodeInto refuses
// the tensor, naming it.
func TestCheckScales(t *testing.T) {
	const nan, inf = 0x7E00, 0xFC00 // a half NaN, -Inf
	for _, tc := range []struct {
		typ    gguf.Type
		offset int
		bits   uint16
		want   string
	}{
		{gguf.TypeQ4_0, 0, nan, "Q4_0 block 2: scale d is NaN"},
		{gguf.TypeQ4_1, 0, inf, "Q4_1 block 2: scale d is -Inf"},
		{gguf.TypeQ4_1, 2, nan, "Q4_1 block 2: scale m is NaN"},
		{gguf.TypeQ5_0, 0, nan, "Q5_0 block 2: scale d is NaN"},
		{gguf.TypeQ5_1, 2, inf, "Q5_1 block 2: scale m is -Inf"},
		{gguf.TypeQ8_0, 0, 0x7C00, "Q8_0 block 2: scale d is +Inf"},
		{gguf.TypeQ2_K, 80, nan, "Q2_K block 2: scale d is NaN"},
		{gguf.TypeQ2_K, 82, nan, "Q2_K block 2: scale dmin is NaN"},
		{gguf.TypeQ3_K, 108, nan, "Q3_K block 2: scale d is NaN"},
		{gguf.TypeQ4_K, 0, inf, "Q4_K block 2: scale d is -Inf"},
		{gguf.TypeQ4_K, 2, nan, "Q4_K block 2: scale dmin is NaN"},
		{gguf.TypeQ5_K, 2, nan, "Q5_K block 2: scale dmin is NaN"},
		{gguf.TypeQ6_K, 208, nan, "Q6_K block 2: scale d is NaN"},
		{gguf.TypeIQ4_NL, 0, nan, "IQ4_NL block 2: scale d is NaN"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			bb, bs := tc.typ.BlockBytes(), tc.typ.BlockSize()
			raw := make([]byte, 4*bb) // zero codes and scales: finite
			for i := range raw {
				raw[i] = 0x7E // a code byte with a half NaN's high byte: not a scale, accepted
			}
			for b := range 4 {
				for _, s := range []int{0, 2, 80, 82, 108, 208} {
					if s+2 <= bb {
						raw[b*bb+s], raw[b*bb+s+1] = 0, 0x3C // 1.0 wherever a type may hold a scale
					}
				}
			}
			if err := gguf.CheckScales(tc.typ, raw); err != nil {
				t.Fatalf("finite scales: %v", err)
			}
			raw[2*bb+tc.offset], raw[2*bb+tc.offset+1] = byte(tc.bits), byte(tc.bits>>8)
			raw[3*bb+tc.offset], raw[3*bb+tc.offset+1] = byte(tc.bits), byte(tc.bits>>8)
			err := gguf.CheckScales(tc.typ, raw)
			if err == nil || !errors.Is(err, gguf.ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckScales: %v; want an error wrapping ErrCorrupt containing %q", err, tc.want)
			}
			decoded := make([]float32, 4*bs)
			if err := gguf.Decode(tc.typ, raw, decoded); err != nil {
				t.Fatal(err)
			}
			finite := func(vs []float32) bool {
				for _, v := range vs {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						return false
					}
				}
				return true
			}
			if !finite(decoded[:2*bs]) || finite(decoded[2*bs:3*bs]) {
				t.Errorf("decoded blocks 0-1 finite %v, block 2 finite %v; want true, false", finite(decoded[:2*bs]), finite(decoded[2*bs:3*bs]))
			}
			data := ggufbuild.Build(nil, []ggufbuild.Tensor{{Name: "w", Type: uint32(tc.typ), Dims: []uint64{uint64(4 * bs)}, Data: raw}})
			f, err := gguf.Read(strings.NewReader(string(data)), int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			err = f.DecodeInto("w", make([]float32, 4*bs))
			if err == nil || !errors.Is(err, gguf.ErrCorrupt) || !strings.Contains(err.Error(), "tensor w") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("DecodeInto: %v; want an error naming tensor w and %q", err, tc.want)
			}
		})
	}
	if err := gguf.CheckScales(gguf.TypeQ8_0, make([]byte, 35)); err == nil {
		t.Error("CheckScales of 35 bytes of Q8_0: no error")
	}
}

// TestDecodeIntoNonFinite: an F32, F16 or BF16 tensor holding a NaN or an infinity, as llama.cpp's
// ggml_validate_row_data refuses it, is an error wrapping ErrCorrupt naming the tensor and the
// element (past the first 1 MiB chunk, and as the last element, after the last whole 8 bytes);
// Decode still decodes the bytes; finite values (1.0 and the largest) pass.
func TestDecodeIntoNonFinite(t *testing.T) {
	const n = 1<<19 + 7
	for _, tc := range []struct {
		typ  gguf.Type
		at   int
		bits uint32 // the non-finite value as stored
		want string
	}{
		{gguf.TypeF32, 524291, 0x7FC00000, "element 524291 is NaN"},
		{gguf.TypeF32, n - 1, 0xFF800000, "element 524294 is -Inf"},
		{gguf.TypeF16, 524291, 0x7C00, "element 524291 is +Inf"},
		{gguf.TypeF16, n - 1, 0xFE01, "element 524294 is NaN"},
		{gguf.TypeBF16, 524291, 0x7F81, "element 524291 is NaN"},
		{gguf.TypeBF16, n - 1, 0xFF80, "element 524294 is -Inf"},
	} {
		t.Run(tc.typ.String()+"/"+tc.want, func(t *testing.T) {
			size := tc.typ.BlockBytes()
			one, largest := map[gguf.Type]uint32{gguf.TypeF32: 0x3F800000, gguf.TypeF16: 0x3C00, gguf.TypeBF16: 0x3F80}[tc.typ],
				map[gguf.Type]uint32{gguf.TypeF32: 0xFF7FFFFF, gguf.TypeF16: 0xFBFF, gguf.TypeBF16: 0xFF7F}[tc.typ] // negative
			raw := make([]byte, n*size)
			set := func(i int, bits uint32) {
				for k := range size {
					raw[i*size+k] = byte(bits >> (8 * k))
				}
			}
			for i := range n {
				set(i, one)
			}
			set(tc.at-1, largest)
			read := func() error {
				data := ggufbuild.Build(nil, []ggufbuild.Tensor{{Name: "w", Type: uint32(tc.typ), Dims: []uint64{n}, Data: raw}})
				f, err := gguf.Read(strings.NewReader(string(data)), int64(len(data)))
				if err != nil {
					t.Fatal(err)
				}
				_, err = f.ReadFloat32("w")
				return err
			}
			if err := read(); err != nil {
				t.Fatalf("finite values: %v", err)
			}
			set(tc.at, tc.bits)
			err := read()
			if err == nil || !errors.Is(err, gguf.ErrCorrupt) || !strings.Contains(err.Error(), "tensor w") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadFloat32: %v; want an error wrapping ErrCorrupt naming tensor w and %q", err, tc.want)
			}
			decoded := make([]float32, n)
			if err := gguf.Decode(tc.typ, raw, decoded); err != nil {
				t.Fatal(err)
			}
			if v := float64(decoded[tc.at]); !math.IsNaN(v) && !math.IsInf(v, 0) {
				t.Errorf("Decode: element %d is %v; want the stored non-finite value", tc.at, v)
			}
		})
	}
}
