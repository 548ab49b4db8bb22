package gguf_test

import (
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/refdata"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// TestBlockCodecsMatchGGML checks every block type against ggml's C code: Quantize gives the bytes
// of quantize_row_*_ref on every input row (zeros, constants, one-signed, huge, tiny, subnormal,
// mixed groups, rounding ties), and Decode the values of dequantize_row_* on those bytes and on
// random blocks with random (finite and infinite) half scales.
func TestBlockCodecsMatchGGML(t *testing.T) {
	for _, typ := range gguf.BlockTypes() {
		t.Run(typ.String(), func(t *testing.T) {
			refdata.Require(t, "ggml", "x.npy")
			v, err := refdata.GGML(typ.String())
			if err != nil {
				t.Fatal(err)
			}
			q := make([]byte, len(v.Q))
			if err := gguf.Quantize(typ, v.X, q); err != nil {
				t.Fatal(err)
			}
			rowBytes := len(v.Q) / v.Rows
			for r := range v.Rows {
				got, want := q[r*rowBytes:(r+1)*rowBytes], v.Q[r*rowBytes:(r+1)*rowBytes]
				for i := range got {
					if got[i] != want[i] {
						t.Errorf("quantize row %d: byte %d (block %d) = %#02x, want %#02x", r, i, i/typ.BlockBytes(), got[i], want[i])
						break
					}
				}
			}
			for _, c := range []struct {
				name string
				raw  []byte
				want []float32
			}{{"quantized", v.Q, v.Deq}, {"random blocks", v.Raw, v.RawDeq}} {
				got := make([]float32, len(c.want))
				if err := gguf.Decode(typ, c.raw, got); err != nil {
					t.Fatal(err)
				}
				testutil.SameBits(t, "decode "+c.name, got, c.want)
			}
		})
	}
}

func TestQuantizeErrors(t *testing.T) {
	tests := []struct {
		name string
		typ  gguf.Type
		src  []float32
		dst  int
		want string
	}{
		{"plain type", gguf.TypeF16, make([]float32, 32), 64, "accepted: Q4_0, Q4_1"},
		{"unknown type", gguf.Type(99), make([]float32, 32), 18, "type(99)"},
		{"partial block", gguf.TypeQ4_K, make([]float32, 255), 144, "a multiple of 256 elements"},
		{"short destination", gguf.TypeQ8_0, make([]float32, 64), 67, "67 bytes of Q8_0"},
		{"NaN", gguf.TypeQ4_0, append(make([]float32, 31), float32(math.NaN())), 18, "element 31 is NaN"},
		{"infinity", gguf.TypeQ6_K, append([]float32{float32(math.Inf(-1))}, make([]float32, 255)...), 210, "element 0 is -Inf"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := make([]byte, tc.dst)
			for i := range dst {
				dst[i] = 0xA5
			}
			err := gguf.Quantize(tc.typ, tc.src, dst)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want one containing %q", err, tc.want)
			}
			for i, b := range dst {
				if b != 0xA5 {
					t.Fatalf("byte %d of the destination written (%#02x) on error", i, b)
				}
			}
		})
	}
}

// TestQuantizeSplitInvariant checks that quantizing many blocks in one call (split over
// goroutines) gives the bytes of quantizing them one block at a time.
func TestQuantizeSplitInvariant(t *testing.T) {
	for _, typ := range []gguf.Type{gguf.TypeQ4_0, gguf.TypeQ4_1, gguf.TypeQ5_0, gguf.TypeQ5_1, gguf.TypeQ8_0,
		gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K, gguf.TypeIQ4_NL} {
		t.Run(typ.String(), func(t *testing.T) {
			bs, bb := typ.BlockSize(), typ.BlockBytes()
			const blocks = 2048
			src := make([]float32, blocks*bs)
			for i := range src {
				src[i] = float32(math.Sin(float64(i)*0.37) * math.Exp(float64(i%bs)/float64(bs)*3-1.5))
			}
			whole := make([]byte, blocks*bb)
			if err := gguf.Quantize(typ, src, whole); err != nil {
				t.Fatal(err)
			}
			one := make([]byte, bb)
			for b := range blocks {
				if err := gguf.Quantize(typ, src[b*bs:(b+1)*bs], one); err != nil {
					t.Fatal(err)
				}
				if string(one) != string(whole[b*bb:(b+1)*bb]) {
					t.Fatalf("block %d: one call gives % x, block by block % x", b, whole[b*bb:(b+1)*bb], one)
				}
			}
		})
	}
}

// TestQuantizeIQ4NLCarriesCodes: an IQ4_NL block whose largest magnitude is below 1e-15 takes the
// codes of the previous block of the call, as ggml's quantize_row_iq4_nl_ref does, wherever the
// call's blocks are split over goroutines.
func TestQuantizeIQ4NLCarriesCodes(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	const blocks = 2048
	src := make([]float32, blocks*32)
	for i := range src {
		if b := i / 32; b%64 != 0 || b == 0 {
			src[i] = float32(math.Sin(float64(i) * 0.37))
		}
	}
	dst := make([]byte, blocks*18)
	if err := gguf.Quantize(gguf.TypeIQ4_NL, src, dst); err != nil {
		t.Fatal(err)
	}
	for b := 64; b < blocks; b += 64 {
		got, want := dst[18*b:18*b+18], append([]byte{0, 0}, dst[18*b-16:18*b]...)
		if string(got) != string(want) {
			t.Errorf("zero block %d: % x, want scale 0 and the codes of block %d: % x", b, got, b-1, want)
		}
	}
}
