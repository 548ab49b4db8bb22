package bnb

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/hostdata"
	"github.com/quanta-ml/quanta/nf4"
)

// minAbsmax is the float32 of 1e-38 (a subnormal): the floor bitsandbytes clamps absmax to
// before taking its reciprocal.
const minAbsmax = float32(1e-38)

// Quantize4bit quantizes t as bitsandbytes 0.50.2's quantize_4bit(t, blocksize=blockSize,
// compress_statistics=compressStatistics, quant_type="nf4") does on CPU, byte for byte:
//
//  1. t's values in float32, flattened row-major; blocks of blockSize consecutive values across
//     rows, the last one shorter when the size is not a multiple;
//  2. absmax = max|x| per block (float32; the short last block's is clamped to 1e-38);
//     scaled = clamp(x·(1/max(absmax, 1e-38)), -1, 1), the short last block divided instead;
//  3. code = the number of midpoints (c[i]+c[i+1])/2 of the NF4 codebook strictly below the
//     scaled value (torch.bucketize: a value on a midpoint takes the lower code);
//  4. two codes a byte, the first in the high nibble (an odd size pads one code 7, zero);
//  5. with compressStatistics, the absmax double-quantized (nf4.DoubleQuantize).
//
// The result has t's shape and dtype (its materialization dtype) and float32 absmax. Its blocks
// run along the last axis (nf4's default, the fast products) when the last dimension is a
// multiple of blockSize or there is one row, where the bytes are the same; otherwise over the
// flattened array (nf4.Format.FlatBlocks). This rule differs from nf4.Quantize (eformer's:
// x/(absmax+tiny), nearest code) in rare rounding cases only.
//
// It returns an error for a nil or empty tensor, a non-float dtype, NaN or ±Inf values, or a
// block size that is not even, from 2 to 4096 (nf4.MaxFlatBlockSize, bitsandbytes' largest, accepted
// for any tensor: a tensor smaller than a block is one short block) or the tensor's size rounded up
// to even when larger.
func Quantize4bit(t *tensors.Tensor, blockSize int, compressStatistics bool) (*nf4.Array, error) {
	if t == nil {
		return nil, errors.New("bnb.Quantize4bit: nil tensor")
	}
	shape := t.Shape()
	if shape.Rank() == 0 || shape.Size() == 0 {
		return nil, errors.Errorf("bnb.Quantize4bit: input %s; accepted: rank >= 1, every dimension >= 1", shape)
	}
	if err := checkBlockSize(blockSize, shape.Size()); err != nil {
		return nil, errors.WithMessagef(err, "bnb.Quantize4bit: input %s", shape)
	}
	values, err := float32Values(t)
	if err != nil {
		return nil, errors.WithMessage(err, "bnb.Quantize4bit")
	}
	for i, v := range values {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, errors.Errorf("bnb.Quantize4bit: input %s holds %v at flat index %d; accepted: finite values", shape, v, i)
		}
	}
	format := nf4.Format{BlockSize: blockSize, FlatBlocks: !rowBlocked(shape.Dimensions, blockSize)}
	packed, absmax := quantize4bit(values, blockSize)
	want := nf4.ComponentShapes(shape, format, dtypes.Float32)
	packedT := tensors.FromShape(want[0])
	tensors.MustMutableFlatData(packedT, func(dst []uint8) {
		for i := range dst {
			dst[i] = 0x77 // padding: code 7 (zero)
		}
		copy(dst, packed)
	})
	a, err := nf4.FromTensors(shape, format, packedT, tensors.FromFlatDataAndDimensions(absmax, want[1].Dimensions...))
	if err != nil {
		return nil, errors.WithMessage(err, "bnb.Quantize4bit")
	}
	if !compressStatistics {
		return a, nil
	}
	defer a.Delete()
	dq, err := nf4.DoubleQuantize(a)
	return dq, errors.WithMessage(err, "bnb.Quantize4bit")
}

// MustQuantize4bit is Quantize4bit that panics on error.
func MustQuantize4bit(t *tensors.Tensor, blockSize int, compressStatistics bool) *nf4.Array {
	a, err := Quantize4bit(t, blockSize, compressStatistics)
	if err != nil {
		panic(err)
	}
	return a
}

// checkBlockSize checks a block size for a weight of n elements: bitsandbytes blocks the flattened
// weight, so nf4's bound for flattened blocks applies (an even size up to nf4.MaxFlatBlockSize,
// 4096, bitsandbytes' largest, or up to n rounded up to even beyond it).
func checkBlockSize(blockSize, n int) error {
	return nf4.Format{BlockSize: blockSize, FlatBlocks: true}.Validate(shapes.Make(dtypes.Float32, n))
}

// rowBlocked reports whether bitsandbytes' flattened blocks of a tensor of dims are nf4's
// blocks along the last axis, with the same bytes: the last dimension is a multiple of the block
// size, or there is only one row and the block is no longer than nf4 allows along it.
func rowBlocked(dims []int, blockSize int) bool {
	rows := 1
	for _, d := range dims[:len(dims)-1] {
		rows *= d
	}
	last := dims[len(dims)-1]
	return (rows == 1 && blockSize <= nf4.MaxBlockSize(last)) || last%blockSize == 0
}

// quantize4bit returns bitsandbytes' packed NF4 codes ((n+1)/2 bytes) and float32 absmax of the
// flattened values.
func quantize4bit(values []float32, blockSize int) (packed []uint8, absmax []float32) {
	cb := nf4.Codebook()
	var bounds [15]float32
	for i := range bounds {
		bounds[i] = (cb[i] + cb[i+1]) / 2
	}
	n := len(values)
	nb := (n + blockSize - 1) / blockSize
	absmax = make([]float32, nb)
	codes := make([]uint8, n+n%2)
	if n%2 == 1 {
		codes[n] = bucketize(0, &bounds)
	}
	for b := range nb {
		block := values[b*blockSize : min((b+1)*blockSize, n)]
		var m float32
		for _, v := range block {
			m = max(m, float32(math.Abs(float64(v))))
		}
		out := codes[b*blockSize:]
		if len(block) == blockSize {
			absmax[b] = m
			r := 1 / max(m, minAbsmax)
			for i, v := range block {
				out[i] = bucketize(min(max(v*r, -1), 1), &bounds)
			}
			continue
		}
		m = max(m, minAbsmax)
		absmax[b] = m
		for i, v := range block {
			out[i] = bucketize(min(max(v/m, -1), 1), &bounds)
		}
	}
	packed = make([]uint8, len(codes)/2)
	for i := range packed {
		packed[i] = codes[2*i]<<4 | codes[2*i+1]
	}
	return packed, absmax
}

// bucketize returns the number of bounds strictly below v (torch.bucketize, right=False).
func bucketize(v float32, bounds *[15]float32) uint8 {
	code := uint8(0)
	for _, b := range bounds {
		if b < v {
			code++
		}
	}
	return code
}

// float32Values returns a float tensor's values in float32 (torch's .float()).
func float32Values(t *tensors.Tensor) ([]float32, error) {
	out, ok := hostdata.Float32s(t)
	if !ok {
		return nil, errors.Errorf("input %s; accepted: float32, bfloat16, float16 or float64", t.Shape())
	}
	return out, nil
}

// checkShape is shared by the readers: a torch shape of at least one dimension, all positive.
func checkShape(dims []int) error {
	if len(dims) == 0 {
		return errors.New("shape []; accepted: at least one dimension")
	}
	for _, d := range dims {
		if d <= 0 {
			return errors.Errorf("shape %v; accepted: positive dimensions", dims)
		}
	}
	return nil
}
