package gguf_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/quanta-ml/quanta/gguf"
)

// FuzzBlockCodecs feeds arbitrary bytes to every block type: Decode of whole blocks never panics,
// and Quantize of the bytes read as float32 (non-finite values replaced by 0) never panics and
// writes the same bytes twice.
func FuzzBlockCodecs(f *testing.F) {
	f.Add([]byte{0x00, 0x3c, 0xff, 0x7b, 0x01, 0x80}, uint8(0))
	f.Add(bytes.Repeat([]byte{0xff, 0x7f, 0x80, 0x00}, 80), uint8(7))
	f.Add(bytes.Repeat([]byte{0x01, 0x00, 0x00, 0x80}, 300), uint8(9))
	types := gguf.BlockTypes()
	f.Fuzz(func(t *testing.T, data []byte, pick uint8) {
		typ := types[int(pick)%len(types)]
		bs, bb := typ.BlockSize(), typ.BlockBytes()
		if n := len(data) / bb; n > 0 {
			if err := gguf.Decode(typ, data[:n*bb], make([]float32, n*bs)); err != nil {
				t.Fatal(err)
			}
		}
		values := make([]float32, len(data)/4/bs*bs)
		for i := range values {
			v := math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				v = 0
			}
			values[i] = v
		}
		first, second := make([]byte, len(values)/bs*bb), make([]byte, len(values)/bs*bb)
		if err := gguf.Quantize(typ, values, first); err != nil {
			t.Fatal(err)
		}
		if err := gguf.Quantize(typ, values, second); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, second) {
			t.Fatalf("%s: two quantizations of the same values differ", typ)
		}
	})
}
