package nf4

import "math"

// codebook holds the 16 NF4 values of QLoRA (eformer's get_nf4), indexed by the 4-bit code.
var codebook = [16]float32{
	-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
	-0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
	0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
	0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
}

// Codebook returns the 16 NF4 values, indexed by the 4-bit code, sorted ascending.
func Codebook() [16]float32 { return codebook }

// maxCodeGap returns the largest gap between neighbouring codebook values (between codes 14 and
// 15). Half of it times a block's absmax bounds the round-trip error of every element of the block.
func maxCodeGap() float64 {
	gap := 0.0
	for i := 1; i < len(codebook); i++ {
		gap = math.Max(gap, float64(codebook[i])-float64(codebook[i-1]))
	}
	return gap
}
