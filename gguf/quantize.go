package gguf

import (
	"encoding/binary"
	"math"

	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/parallel"
)

// Quantize encodes src, len(src) float32 values, as type t into dst, bit-identical to ggml's
// reference quantizer (quantize_row_*_ref of ggml-quants.c, which llama.cpp's quantize tool runs
// without an importance matrix) called on src as one row. t is one of BlockTypes; len(src) must be
// a multiple of its block size and len(dst) exactly the storage of len(src) elements. Every value
// must be finite. On error nothing is written to dst.
//
// IQ4_NL reuses, for a block whose largest magnitude is below 1e-15, the codes of the previous
// block of the call, as ggml does (its scale is 0, so they decode to zeros); the first block of a
// call gets codes 0 there, where ggml's are whatever its buffer held.
func Quantize(t Type, src []float32, dst []byte) error {
	if !t.IsBlock() {
		return errors.Wrapf(ErrUnsupported, "gguf.Quantize: type %s; accepted: %s", t, blockNames)
	}
	bs, bb := t.BlockSize(), t.BlockBytes()
	if len(src)%bs != 0 || len(dst) != len(src)/bs*bb {
		return errors.Errorf("gguf.Quantize: %d elements into %d bytes of %s; %s needs a multiple of %d elements and %d bytes per block",
			len(src), len(dst), t, t, bs, bb)
	}
	for i, v := range src {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return errors.Errorf("gguf.Quantize: %s: element %d is %v; accepted: finite values", t, i, v)
		}
	}
	// Blocks are quantized independently: the bytes do not depend on the split. IQ4_NL's are not
	// (a block below groupMaxEps takes the codes of the previous block of the call): one goroutine.
	blocks := len(src) / bs
	workers := parallel.Workers(blocks, 256)
	if t == TypeIQ4_NL {
		workers = 1
	}
	parallel.Chunks(blocks, workers, func(from, to int) {
		traits[t].quantize(src[from*bs:to*bs], dst[from*bb:to*bb])
	})
	return nil
}

// The C conversions ggml's quantizers rely on, as GCC compiles them for x86-64 (the reference
// build): a float converted to an integer type truncates toward zero through a 32-bit signed
// conversion, whose result for NaN and out-of-range values is the "integer indefinite"
// -2^31, of which a narrower type keeps the low bits.

// cvtt is the 32-bit truncating conversion.
func cvtt(f float32) int32 {
	if !(f > -2147483904 && f < 2147483648) { // NaN or outside (-2^31 - 1, 2^31) in float32
		return math.MinInt32
	}
	return int32(f)
}

// nearestInt is ggml's nearest_int: the float added to 1.5·2^23, whose low mantissa bits are the
// rounded value (ties to even) for |f| < 2^22. The explicit rounding keeps a product given as f
// from fusing with the addition.
func nearestInt(f float32) int {
	v := float32(f) + 12582912
	return int(math.Float32bits(v)&0x007fffff) - 0x00400000
}

// fp16 converts to IEEE half precision as ggml's reference code does (round to nearest even, an
// overflow to infinity, NaN to 0x7E00 with the sign), through its float32 arithmetic.
func fp16(f float32) uint16 {
	base := float32(float32(float32(math.Abs(float64(f)))*0x1p+112) * 0x1p-110)
	w := math.Float32bits(f)
	shl1 := w + w
	sign := uint16(w >> 16 & 0x8000)
	if shl1 > 0xFF000000 {
		return sign | 0x7E00
	}
	bias := max(shl1&0xFF000000, 0x71000000)
	bits := math.Float32bits(math.Float32frombits(bias>>1+0x07800000) + base)
	return sign | uint16(bits>>13&0x7C00+bits&0x0FFF)
}

// putF16 stores f as a little-endian half at b.
func putF16(b []byte, f float32) { binary.LittleEndian.PutUint16(b, fp16(f)) }

// roundF16 is f rounded through half precision, as ggml reads back the scale it stored.
func roundF16(f float32) float32 {
	var b [2]byte
	putF16(b[:], f)
	return f16(b[:])
}

// minInt8 is ggml's MIN(limit, (int8_t)v) on an int8 conversion.
func minInt8(limit int8, f float32) int8 { return min(limit, int8(cvtt(f))) }

// absMaxSigned returns the value of largest magnitude of x (the first of equal ones) and that
// magnitude.
func absMaxSigned(x []float32) (vmax, amax float32) {
	for _, v := range x {
		if av := float32(math.Abs(float64(v))); amax < av {
			amax, vmax = av, v
		}
	}
	return vmax, amax
}

// minMax returns the smallest and largest value of x.
func minMax(x []float32) (lo, hi float32) {
	lo, hi = math.MaxFloat32, -math.MaxFloat32
	for _, v := range x {
		if v < lo {
			lo = v
		}
		if v > hi {
			hi = v
		}
	}
	return lo, hi
}

// reciprocal is ggml's `d ? 1.0f/d : 0.0f`.
func reciprocal(d float32) float32 {
	if d == 0 {
		return 0
	}
	return 1 / d
}

// packQ4 stores 32 4-bit codes as ggml's blocks hold them: code j in the low nibble of byte j, code
// j+16 in the high nibble.
func packQ4(q *[32]uint8, qs []byte) {
	for j := range 16 {
		qs[j] = q[j] | q[j+16]<<4
	}
}

// packQ5 stores 32 5-bit codes: their low four bits in qs as packQ4 lays them out, their fifth bits
// in qh as a little-endian uint32, bit j for code j.
func packQ5(q *[32]uint8, qs, qh []byte) {
	var h uint32
	for j := range 16 {
		qs[j] = q[j]&0x0F | (q[j+16]&0x0F)<<4
		h |= uint32(q[j]&0x10)>>4<<j | uint32(q[j+16]&0x10)>>4<<(j+16)
	}
	binary.LittleEndian.PutUint32(qh, h)
}

// codes0 sets q to the codes of a Q4_0 (n = 8) or Q5_0 (n = 16) block x and returns its scale:
// d = (the value of largest magnitude)/-n; q = min(2n-1, trunc(x/d + n + 0.5)).
func codes0(x []float32, q *[32]uint8, n float32) (d float32) {
	vmax, _ := absMaxSigned(x)
	d = vmax / -n
	id := reciprocal(d)
	limit, offset := int8(2*n-1), n+0.5
	for j, v := range x {
		q[j] = uint8(minInt8(limit, float32(v*id)+offset))
	}
	return d
}

// codes1 sets q to the codes of a Q4_1 (levels = 15) or Q5_1 (levels = 31) block x and returns
// its scale and minimum: d = (max-min)/levels, m = min; q = min(limit, trunc((x-min)/d + 0.5)).
// ggml clamps Q4_1's codes (limit 15) and not Q5_1's (limit 127, which no int8 exceeds).
func codes1(x []float32, q *[32]uint8, levels float32, limit int8) (d, m float32) {
	lo, hi := minMax(x)
	d = (hi - lo) / levels
	id := reciprocal(d)
	for j, v := range x {
		q[j] = uint8(minInt8(limit, float32((v-lo)*id)+0.5))
	}
	return d, lo
}

// quantizeQ4_0: codes0 with n = 8; d, then the codes as packQ4 lays them out.
func quantizeQ4_0(src []float32, dst []byte) {
	var q [32]uint8
	for b := range len(src) / 32 {
		x, blk := src[32*b:32*b+32], dst[18*b:18*b+18]
		putF16(blk, codes0(x, &q, 8))
		packQ4(&q, blk[2:18])
	}
}

// quantizeQ4_1: codes1 with levels 15 (clamped to 15); d, m, then the codes as packQ4 lays them
// out.
func quantizeQ4_1(src []float32, dst []byte) {
	var q [32]uint8
	for b := range len(src) / 32 {
		x, blk := src[32*b:32*b+32], dst[20*b:20*b+20]
		d, m := codes1(x, &q, 15, 15)
		putF16(blk, d)
		putF16(blk[2:], m)
		packQ4(&q, blk[4:20])
	}
}

// quantizeQ5_0: codes0 with n = 16; d, then the codes as packQ5 lays them out.
func quantizeQ5_0(src []float32, dst []byte) {
	var q [32]uint8
	for b := range len(src) / 32 {
		x, blk := src[32*b:32*b+32], dst[22*b:22*b+22]
		putF16(blk, codes0(x, &q, 16))
		packQ5(&q, blk[6:22], blk[2:6])
	}
}

// quantizeQ5_1: codes1 with levels 31 (unclamped); d, m, then the codes as packQ5 lays them out.
func quantizeQ5_1(src []float32, dst []byte) {
	var q [32]uint8
	for b := range len(src) / 32 {
		x, blk := src[32*b:32*b+32], dst[24*b:24*b+24]
		d, m := codes1(x, &q, 31, math.MaxInt8)
		putF16(blk, d)
		putF16(blk[2:], m)
		packQ5(&q, blk[8:24], blk[4:8])
	}
}

// quantizeQ8_0: d = max|x|/127; q = round(x/d), halves away from zero.
func quantizeQ8_0(src []float32, dst []byte) {
	for b := range len(src) / 32 {
		x, blk := src[32*b:32*b+32], dst[34*b:34*b+34]
		var amax float32
		for _, v := range x {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		id := reciprocal(d)
		putF16(blk, d)
		for j, v := range x {
			blk[2+j] = uint8(cvtt(float32(math.Round(float64(v * id)))))
		}
	}
}

// bestIndexIQ4NL is ggml's best_index_int8 over iq4nlValues: the index of the value nearest to x
// (the upper one on a tie), by bisection.
func bestIndexIQ4NL(x float32) int {
	vals := &iq4nlValues
	if x <= float32(vals[0]) {
		return 0
	}
	if x >= float32(vals[15]) {
		return 15
	}
	lo, hi := 0, 15
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if x < float32(vals[mid]) {
			hi = mid
		} else {
			lo = mid
		}
	}
	if x-float32(vals[hi-1]) < float32(vals[hi])-x {
		return hi - 1
	}
	return hi
}

// groupMaxEps is ggml's GROUP_MAX_EPS: a group whose largest magnitude is below it is all zero.
const groupMaxEps float32 = 1e-15

// quantizeIQ4_NL is ggml's IQ4_NL reference quantizer: codes of iq4nlValues nearest to x/d with
// d = max/-127, then d refitted by weighted least squares (weights x²). The codes of a block below
// groupMaxEps are the previous block's (see Quantize).
func quantizeIQ4_NL(src []float32, dst []byte) {
	var L [32]uint8
	for b := range len(src) / 32 {
		x, blk := src[32*b:32*b+32], dst[18*b:18*b+18]
		var d float32
		if vmax, amax := absMaxSigned(x); amax >= groupMaxEps {
			id := 1 / (vmax / float32(iq4nlValues[0]))
			var sumqx, sumq2 float32
			for j, v := range x {
				l := bestIndexIQ4NL(id * v)
				L[j] = uint8(l)
				q := float32(iq4nlValues[l])
				w := float32(v * v)
				sumqx += float32(float32(w*q) * v)
				sumq2 += float32(float32(w*q) * q)
			}
			if sumq2 > 0 {
				d = sumqx / sumq2
			}
		}
		putF16(blk, d)
		packQ4(&L, blk[2:18])
	}
}
