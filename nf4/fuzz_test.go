package nf4_test

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/nf4"
)

// FuzzQuantize quantizes random shapes and values on the host and checks, with an independent
// host decode of the bytes, the shapes, the absmax (the block's largest |x|), the nearest-code
// choice for x·(1/(absmax + tiny)) (XLA's product with the float32 reciprocal), and the round-trip
// bound. Block sizes beyond MaxBlockSize must be rejected.
func FuzzQuantize(f *testing.F) {
	f.Add(uint8(3), uint8(10), uint8(2), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(uint8(1), uint8(64), uint8(32), []byte{0xff, 0x7f, 0x80, 0x00})
	f.Add(uint8(2), uint8(7), uint8(4), []byte{})
	f.Fuzz(func(t *testing.T, rows, cols, halfBlock uint8, data []byte) {
		r, c, bs := int(rows%4)+1, int(cols%100)+1, 2*(int(halfBlock%40)+1)
		values := make([]float32, r*c)
		for i := range values {
			var word [4]byte
			for j := range word {
				if len(data) > 0 {
					word[j] = data[(4*i+j)%len(data)] + byte(i)
				}
			}
			values[i] = float32(int32(binary.LittleEndian.Uint32(word[:]))) / (1 << 24)
		}
		x := tensors.FromFlatDataAndDimensions(values, r, c)
		if bs > nf4.MaxBlockSize(c) {
			if _, err := nf4.Quantize(x, bs); err == nil {
				t.Fatalf("block size %d accepted for %d columns (maximum %d)", bs, c, nf4.MaxBlockSize(c))
			}
			bs = nf4.MaxBlockSize(c)
		}
		a, err := nf4.Quantize(x, bs)
		if err != nil {
			t.Fatal(err)
		}
		nb := (c + bs - 1) / bs
		packed := tensors.MustCopyFlatData[uint8](a.Packed().Tensor())
		absmax := tensors.MustCopyFlatData[float32](a.Absmax().Tensor())
		if len(packed) != r*nb*bs/2 || len(absmax) != r*nb {
			t.Fatalf("packed %s, absmax %s for %dx%d block %d", a.Packed().Shape(), a.Absmax().Shape(), r, c, bs)
		}
		for row := range r {
			for b := range nb {
				am := float32(0)
				for col := b * bs; col < min((b+1)*bs, c); col++ {
					am = max(am, float32(math.Abs(float64(values[row*c+col]))))
				}
				if absmax[row*nb+b] != am {
					t.Fatalf("absmax[%d,%d] = %v, want %v", row, b, absmax[row*nb+b], am)
				}
				for i := range bs {
					col := b*bs + i
					byt := packed[(row*nb+b)*bs/2+i/2]
					code := byt >> 4
					if i%2 == 1 {
						code = byt & 15
					}
					if col >= c {
						if code != 7 {
							t.Fatalf("padding code %d, want 7", code)
						}
						continue
					}
					recip := 1 / (am + 0x1p-126)
					v := float32(values[row*c+col] * recip)
					d := float32(math.Abs(float64(v - refCodebook[code])))
					for j, cb := range refCodebook {
						if dj := float32(math.Abs(float64(v - cb))); dj < d || (dj == d && j < int(code)) {
							t.Fatalf("(%d,%d): code %d, but code %d is nearer to %v", row, col, code, j, v)
						}
					}
					if err := math.Abs(float64(refCodebook[code]*am - values[row*c+col])); err > nf4.MaxCodeGap()/2*float64(am)*1.0001 {
						t.Fatalf("(%d,%d): round-trip error %v above the bound", row, col, err)
					}
				}
			}
		}
	})
}
