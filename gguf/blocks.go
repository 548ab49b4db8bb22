package gguf

import "encoding/binary"

// The block decoders: one block of bytes to its elements, with ggml's arithmetic (dequantize_row_*
// of ggml-quants.c). Every product below is exact in float32 (a half-precision scale has 11
// significant bits and the integers it meets at most 12 bits together), so the one rounding of each
// value is that of the final addition, whether or not a compiler fuses it into a multiply-add.

// iq4nlValues are the 16 values of IQ4_NL's codes (ggml's kvalues_iq4nl).
var iq4nlValues = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// decodeQ4_0: d, then 16 bytes; byte j holds element j (low nibble) and j+16 (high), (q-8)·d.
func decodeQ4_0(blk []byte, out []float32) {
	d := f16(blk)
	for j, q := range blk[2:18] {
		out[j] = float32(int(q&0x0F)-8) * d
		out[j+16] = float32(int(q>>4)-8) * d
	}
}

// decodeQ4_1: d, m, then nibbles as Q4_0, q·d + m.
func decodeQ4_1(blk []byte, out []float32) {
	d, m := f16(blk), f16(blk[2:])
	for j, q := range blk[4:20] {
		out[j] = float32(q&0x0F)*d + m
		out[j+16] = float32(q>>4)*d + m
	}
}

// decodeQ5_0: d, 4 bytes of fifth bits (bit j of the little-endian uint32 for element j), the
// low nibbles as Q4_0, (q-16)·d.
func decodeQ5_0(blk []byte, out []float32) {
	d := f16(blk)
	qh := binary.LittleEndian.Uint32(blk[2:])
	for j, q := range blk[6:22] {
		lo := int(q&0x0F) | int(qh>>j&1)<<4
		hi := int(q>>4) | int(qh>>(j+16)&1)<<4
		out[j] = float32(lo-16) * d
		out[j+16] = float32(hi-16) * d
	}
}

// decodeQ5_1: d, m, the fifth bits and nibbles as Q5_0, q·d + m.
func decodeQ5_1(blk []byte, out []float32) {
	d, m := f16(blk), f16(blk[2:])
	qh := binary.LittleEndian.Uint32(blk[4:])
	for j, q := range blk[8:24] {
		lo := q&0x0F | uint8(qh>>j&1)<<4
		hi := q>>4 | uint8(qh>>(j+16)&1)<<4
		out[j] = float32(lo)*d + m
		out[j+16] = float32(hi)*d + m
	}
}

// decodeQ8_0: d, then 32 int8 values, q·d.
func decodeQ8_0(blk []byte, out []float32) {
	d := f16(blk)
	for j, q := range blk[2:34] {
		out[j] = float32(int8(q)) * d
	}
}

// decodeQ2_K: 16 scale bytes (low nibble scale, high nibble min, one per 16 elements), 64 bytes of
// 2-bit codes, d, dmin. Each half of 128 elements reads 32 code bytes four times (shifts 0, 2, 4,
// 6); each pass gives two sub-blocks of 16 (bytes 0-15, then 16-31): d·sc·q − dmin·m.
func decodeQ2_K(blk []byte, out []float32) {
	scales, qs := blk[0:16], blk[16:80]
	d, dmin := f16(blk[80:]), f16(blk[82:])
	is, y := 0, 0
	for half := range 2 {
		q := qs[32*half : 32*half+32]
		for shift := 0; shift < 8; shift += 2 {
			for sub := range 2 {
				sc := scales[is]
				is++
				dl, ml := d*float32(sc&0x0F), dmin*float32(sc>>4)
				for _, b := range q[16*sub : 16*sub+16] {
					out[y] = dl*float32(b>>shift&3) - ml
					y++
				}
			}
		}
	}
}

// q3KScale returns scale j (of 16) of a Q3_K block's 12 scale bytes, a 6-bit value: the low
// nibbles are bytes 0-7 (low nibble for scales 0-7, high for 8-15), the two high bits come from
// bytes 8-11 (byte 8 + j%4, bits 2·(j/4)).
func q3KScale(scales []byte, j int) int {
	var lo byte
	if j < 8 {
		lo = scales[j] & 0x0F
	} else {
		lo = scales[j-8] >> 4
	}
	return int(lo | (scales[8+j%4]>>(2*(j/4))&3)<<4)
}

// decodeQ3_K: 32 bytes of high bits (hmask), 64 bytes of 2-bit codes, 12 bytes of 6-bit scales,
// d. The codes run as Q2_K's; the high-bit mask advances one bit per pass over 32 elements, and a
// clear high bit subtracts 4: d·(scale−32)·(q − 4·!h).
func decodeQ3_K(blk []byte, out []float32) {
	hmask, qs, scales := blk[0:32], blk[32:96], blk[96:108]
	d := f16(blk[108:])
	is, y := 0, 0
	m := byte(1)
	for half := range 2 {
		q := qs[32*half : 32*half+32]
		for shift := 0; shift < 8; shift += 2 {
			for sub := range 2 {
				dl := d * float32(q3KScale(scales, is)-32)
				is++
				for l := 16 * sub; l < 16*sub+16; l++ {
					v := int(q[l] >> shift & 3)
					if hmask[l]&m == 0 {
						v -= 4
					}
					out[y] = dl * float32(v)
					y++
				}
			}
			m <<= 1
		}
	}
}

// kScaleMin returns d·scale and dmin·min of sub-block j (of 8) of a Q4_K or Q5_K block, the scale
// and min read from its 12 scale bytes as ggml's get_scale_min_k4 does: 6 bits each; j < 4 in the
// low 6 bits of bytes j and j+4, others split between the nibbles of byte j+4 and the top two bits
// of bytes j-4 and j.
func kScaleMin(d, dmin float32, scales []byte, j int) (dj, mj float32) {
	var sc, m byte
	if j < 4 {
		sc, m = scales[j]&63, scales[j+4]&63
	} else {
		sc, m = scales[j+4]&0x0F|(scales[j-4]>>6)<<4, scales[j+4]>>4|(scales[j]>>6)<<4
	}
	return d * float32(sc), dmin * float32(m)
}

// decodeQ4_K: d, dmin, 12 bytes of scales and mins, 128 bytes of nibbles. Each 64 elements read 32
// bytes: the low nibbles with scale/min 2i, then the high nibbles with 2i+1: d·sc·q − dmin·m.
func decodeQ4_K(blk []byte, out []float32) {
	d, dmin := f16(blk), f16(blk[2:])
	scales, qs := blk[4:16], blk[16:144]
	for i := range 4 {
		q := qs[32*i : 32*i+32]
		d1, min1 := kScaleMin(d, dmin, scales, 2*i)
		d2, min2 := kScaleMin(d, dmin, scales, 2*i+1)
		y := out[64*i : 64*i+64]
		for l, b := range q {
			y[l] = d1*float32(b&0x0F) - min1
			y[l+32] = d2*float32(b>>4) - min2
		}
	}
}

// decodeQ5_K: d, dmin, scales as Q4_K, 32 bytes of fifth bits, 128 bytes of nibbles. The nibbles
// run as Q4_K's; element l of the 64-element chunk i takes bit 2i (low nibbles) or 2i+1 (high) of
// fifth-bit byte l as 16.
func decodeQ5_K(blk []byte, out []float32) {
	d, dmin := f16(blk), f16(blk[2:])
	scales, qh, qs := blk[4:16], blk[16:48], blk[48:176]
	for i := range 4 {
		q := qs[32*i : 32*i+32]
		d1, min1 := kScaleMin(d, dmin, scales, 2*i)
		d2, min2 := kScaleMin(d, dmin, scales, 2*i+1)
		y := out[64*i : 64*i+64]
		for l, b := range q {
			lo := b&0x0F | (qh[l]>>(2*i)&1)<<4
			hi := b>>4 | (qh[l]>>(2*i+1)&1)<<4
			y[l] = d1*float32(lo) - min1
			y[l+32] = d2*float32(hi) - min2
		}
	}
}

// decodeQ6_K: 128 bytes of low nibbles (ql), 64 bytes of high 2-bit pairs (qh), 16 int8 scales
// (one per 16 elements), d. Each half of 128 elements reads 64 ql and 32 qh bytes: element l
// (l < 32) of its four quarters takes the low nibble of ql[l], of ql[l+32], the high nibble of
// ql[l], of ql[l+32], with bits 0-1, 2-3, 4-5, 6-7 of qh[l] above: (d·scale)·(q − 32).
func decodeQ6_K(blk []byte, out []float32) {
	ql, qh, sc := blk[0:128], blk[128:192], blk[192:208]
	d := f16(blk[208:])
	for half := range 2 {
		l0, h0, s0 := ql[64*half:64*half+64], qh[32*half:32*half+32], sc[8*half:8*half+8]
		y := out[128*half : 128*half+128]
		for l := range 32 {
			is := l / 16
			h := h0[l]
			q1 := int(l0[l]&0x0F|(h&3)<<4) - 32
			q2 := int(l0[l+32]&0x0F|(h>>2&3)<<4) - 32
			q3 := int(l0[l]>>4|(h>>4&3)<<4) - 32
			q4 := int(l0[l+32]>>4|(h>>6&3)<<4) - 32
			y[l] = d * float32(int8(s0[is])) * float32(q1)
			y[l+32] = d * float32(int8(s0[is+2])) * float32(q2)
			y[l+64] = d * float32(int8(s0[is+4])) * float32(q3)
			y[l+96] = d * float32(int8(s0[is+6])) * float32(q4)
		}
	}
}

// decodeIQ4_NL: d, then nibbles as Q4_0, each a code of iq4nlValues: d·value.
func decodeIQ4_NL(blk []byte, out []float32) {
	d := f16(blk)
	for j, q := range blk[2:18] {
		out[j] = d * float32(iq4nlValues[q&0x0F])
		out[j+16] = d * float32(iq4nlValues[q>>4])
	}
}
