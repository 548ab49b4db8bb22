package gguf_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/refdata"
)

// blockVectors are reference/testdata/ggml (reference/gen_ggml.py): ggml's own quantize_row_*_ref
// and dequantize_row_* run on the inputs x (one edge case a row), and on random blocks.
type blockVectors struct {
	x, deq, rawDeq []float32
	q, raw         []byte
	rows, rawRows  int
}

func loadBlockVectors(t *testing.T, typ gguf.Type) blockVectors {
	t.Helper()
	name := strings.ToLower(typ.String())
	if strings.HasSuffix(name, "_k") {
		name = name[:len(name)-1] + "K" // the files use ggml's names: q4_K
	}
	refdata.Require(t, "ggml", "x.npy")
	load := func(file, descr string) ([]byte, []int) {
		a, err := refdata.NPY("ggml", file)
		if err != nil {
			t.Fatal(err)
		}
		if a.Descr != descr {
			t.Fatalf("%s holds %s; want %s", file, a.Descr, descr)
		}
		return a.Data, a.Dims
	}
	floats := func(b []byte) []float32 {
		out := make([]float32, len(b)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out
	}
	x, xDims := load("x.npy", "<f4")
	q, _ := load(name+".q.npy", "|u1")
	deq, _ := load(name+".deq.npy", "<f4")
	raw, rawDims := load(name+".raw.npy", "|u1")
	rawDeq, _ := load(name+".raw_deq.npy", "<f4")
	return blockVectors{x: floats(x), deq: floats(deq), rawDeq: floats(rawDeq), q: q, raw: raw, rows: xDims[0], rawRows: rawDims[0]}
}

// sameBits reports the first element where got and want differ in bits (any NaN matches any NaN).
func sameBits(got, want []float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
			return fmt.Errorf("value %d = %g (%#08x), want %g (%#08x)", i, g, math.Float32bits(g), w, math.Float32bits(w))
		}
	}
	return nil
}

// TestBlockCodecsMatchGGML checks every block type against ggml's C code: Quantize gives the bytes
// of quantize_row_*_ref on every input row (zeros, constants, one-signed, huge, tiny, subnormal,
// mixed groups, rounding ties), and Decode the values of dequantize_row_* on those bytes and on
// random blocks with random (finite and infinite) half scales.
func TestBlockCodecsMatchGGML(t *testing.T) {
	for _, typ := range gguf.BlockTypes() {
		t.Run(typ.String(), func(t *testing.T) {
			v := loadBlockVectors(t, typ)
			q := make([]byte, len(v.q))
			if err := gguf.Quantize(typ, v.x, q); err != nil {
				t.Fatal(err)
			}
			rowBytes := len(v.q) / v.rows
			for r := range v.rows {
				got, want := q[r*rowBytes:(r+1)*rowBytes], v.q[r*rowBytes:(r+1)*rowBytes]
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
			}{{"quantized", v.q, v.deq}, {"random blocks", v.raw, v.rawDeq}} {
				got := make([]float32, len(c.want))
				if err := gguf.Decode(typ, c.raw, got); err != nil {
					t.Fatal(err)
				}
				if err := sameBits(got, c.want); err != nil {
					t.Errorf("decode %s: %v", c.name, err)
				}
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
