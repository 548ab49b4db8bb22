package nf4

import (
	"slices"
	"sync"
)

// NestedBlockSize is the number of block scales that share one second-level scale under double
// quantization (bitsandbytes' compress_statistics uses 256).
const NestedBlockSize = 256

// DynamicMap returns the 256 values of the signed 8-bit dynamic quantization map that double
// quantization codes the block scales with, sorted ascending: bitsandbytes' create_dynamic_map()
// (signed, 7 exponent bits, 8 bits in all). For each decade i = 0..6, 2^i fractions: the means of
// neighbouring points of linspace(0.1, 1, 2^i + 1) (float32, as torch builds it) times ±10^(i-6),
// plus 0 and 1. The largest negative value is -0.99375; 1 is the only value of magnitude 1.
func DynamicMap() [256]float32 { return dynamicMapOnce() }

var dynamicMapOnce = sync.OnceValue(func() [256]float32 {
	var values []float32
	for i := range 7 {
		points := linspaceF32(0.1, 1, 1<<i+1)
		scale := float32(pow10(i - 6))
		for j := 0; j+1 < len(points); j++ {
			mean := (points[j] + points[j+1]) / 2
			values = append(values, scale*mean, -scale*mean)
		}
	}
	values = append(values, 0, 1)
	slices.Sort(values)
	var out [256]float32
	copy(out[:], values)
	return out
})

// pow10 returns 10^e as a float64 for -6 <= e <= 0 (Python's 10 ** e).
func pow10(e int) float64 {
	x := 1.0
	for ; e < 0; e++ {
		x /= 10
	}
	return x
}

// linspaceF32 is torch.linspace(start, end, steps, dtype=float32) on CPU: step = (end-start)/(steps-1)
// in float32; the first half counts up from start, the second half down from end, each value
// start + step·i (or end − step·(steps−1−i)) rounded once to float32.
func linspaceF32(start, end float32, steps int) []float32 {
	step := (end - start) / float32(steps-1)
	out := make([]float32, steps)
	for i := range out {
		if i < steps/2 {
			out[i] = float32(float64(start) + float64(step)*float64(i))
		} else {
			out[i] = float32(float64(end) - float64(step)*float64(steps-1-i))
		}
	}
	return out
}

// dynamicLUTSize is the number of bins of [-1, 1] that bitsandbytes' CPU blockwise quantizer
// looks codes up in.
const dynamicLUTSize = 1 << 16

// dynamicLUT maps a bin of [-1, 1] to its code: bin i stands for -1 + 2i/65535 (float32), and its
// code is the number of midpoints between neighbouring map values strictly below that value.
var dynamicLUT = sync.OnceValue(func() []uint8 {
	m := DynamicMap()
	var mid [255]float32
	for i := range mid {
		mid[i] = 0.5 * (m[i] + m[i+1])
	}
	lut := make([]uint8, dynamicLUTSize)
	code := 0
	for i := range lut {
		v := -1 + (2*float32(i))/float32(dynamicLUTSize-1)
		for code < len(mid) && mid[code] < v {
			code++
		}
		lut[i] = uint8(code)
	}
	return lut
})

// quantizeDynamic quantizes values to DynamicMap codes in blocks of blockSize consecutive values
// (the last block may be shorter), as bitsandbytes' native CPU quantize_blockwise: absmax = max|x|
// per block (code 0 for a block of zeros); x·(1/absmax), clamped to [-1, 1], falls into one of
// 65536 bins (truncating (v+1)·0.5·65535 + 0.5, each step rounded to float32), whose precomputed
// code is the nearest map value to the bin's centre.
func quantizeDynamic(values []float32, blockSize int) (codes []uint8, absmax []float32) {
	lut := dynamicLUT()
	nb := (len(values) + blockSize - 1) / blockSize
	codes = make([]uint8, len(values))
	absmax = make([]float32, nb)
	for b := range nb {
		block := values[b*blockSize : min((b+1)*blockSize, len(values))]
		var m float32
		for _, v := range block {
			m = max(m, abs(v))
		}
		absmax[b] = m
		if m == 0 {
			continue // codes 0
		}
		inv := 1 / m
		out := codes[b*blockSize:]
		for i, v := range block {
			x := min(max(float32(v*inv), -1), 1)
			t := float32(float32(float32(x+1)*0.5)*(dynamicLUTSize-1)) + 0.5
			out[i] = lut[uint16(t)]
		}
	}
	return codes, absmax
}

// torchMeanF32 is torch's float32 mean of a contiguous 1-D tensor on one CPU thread, bit for bit:
// ATen's cascade_sum divided by n in float32. With n >= 8 the sum runs on 8-lane vectors: four
// vector accumulators interleaved, folded into a four-level cascade whose level size grows with n,
// the leftover vectors added to the first accumulator and the accumulators summed; then the
// scalar tail and the eight lanes are added in order. With n < 8 the same cascade runs on
// scalars. torch splits sums of 32768 values or more across threads, which changes the last bits;
// this is the one-thread result.
func torchMeanF32(values []float32) float32 {
	const lanes = 8
	n := len(values)
	if n == 0 {
		return 0
	}
	var sum float32
	if n < lanes {
		sum = cascadeRowSum(values, 1)[0]
	} else {
		numVecs := n / lanes
		partial := cascadeRowSum(values[:numVecs*lanes], lanes)
		for _, v := range values[numVecs*lanes:] {
			sum += v
		}
		for _, v := range partial {
			sum += v
		}
	}
	return (0 + sum) / float32(n)
}

// cascadeRowSum is ATen's row_sum over the len(values)/lanes consecutive vectors of lanes values
// (lane-wise float32 sums): four interleaved accumulators (multi_row_sum over rows of four
// vectors), the leftover vectors added to the first, then the four folded in order.
func cascadeRowSum(values []float32, lanes int) []float32 {
	const ilp, levels = 4, 4
	numVecs := len(values) / lanes
	add := func(acc []float32, v int) {
		for l, x := range values[v*lanes : (v+1)*lanes] {
			acc[l] += x
		}
	}
	addTo := func(acc, b []float32) {
		for l := range acc {
			acc[l] += b[l]
		}
	}
	rows := numVecs / ilp
	levelPower := max(4, ceilLog2(rows)/levels)
	levelStep := 1 << levelPower
	levelMask := levelStep - 1
	var acc [levels][ilp][]float32
	for j := range acc {
		for k := range acc[j] {
			acc[j][k] = make([]float32, lanes)
		}
	}
	i := 0
	for i+levelStep <= rows {
		for range levelStep {
			for k := range ilp {
				add(acc[0][k], i*ilp+k)
			}
			i++
		}
		for j := 1; j < levels; j++ {
			for k := range ilp {
				addTo(acc[j][k], acc[j-1][k])
				clear(acc[j-1][k])
			}
			if i&(levelMask<<(j*levelPower)) != 0 {
				break
			}
		}
	}
	for ; i < rows; i++ {
		for k := range ilp {
			add(acc[0][k], i*ilp+k)
		}
	}
	for j := 1; j < levels; j++ {
		for k := range ilp {
			addTo(acc[0][k], acc[j][k])
		}
	}
	partial := acc[0]
	for v := rows * ilp; v < numVecs; v++ {
		add(partial[0], v)
	}
	for k := 1; k < ilp; k++ {
		addTo(partial[0], partial[k])
	}
	return partial[0]
}

// ceilLog2 is ATen's CeilLog2: 1 for x <= 2, else the number of bits of x-1.
func ceilLog2(x int) int {
	if x <= 2 {
		return 1
	}
	bits := 0
	for v := x - 1; v > 0; v >>= 1 {
		bits++
	}
	return bits
}
