package nf4

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/parallel"
	"github.com/quanta-ml/quanta/internal/xlafloat"
	"github.com/x448/float16"
)

// DefaultBlockSize is eformer's default block size.
const DefaultBlockSize = 64

// Quantize converts a float tensor (float32, float64, bfloat16 or float16, rank >= 1) to NF4 on
// the host, byte for byte as eformer's ArrayNF4.quantize on XLA CPU: blocks of blockSize elements
// along the last axis (zero-padded internally to a multiple of blockSize), absmax per block in
// t's dtype, each element x mapped to the codebook value nearest to x·r (distance in float32,
// ties to the lower code), two codes per byte, the first in the high nibble. The array's logical
// shape is t's.
//
// r is the reciprocal of absmax + tiny(dtype), with XLA's arithmetic (XLA rewrites eformer's
// x / (absmax + tiny) as this product): for float32 and float64 it is computed and applied in the
// dtype; for bfloat16 it is the float32 reciprocal of the bfloat16 sum and x·r is rounded to
// bfloat16; for float16 the sum, r and x·r are each rounded to float16. float32, bfloat16 and
// float64 subnormals read as zero, and results that would be subnormal are zero (XLA CPU flushes
// them): a block of subnormals has absmax 0 and codes 7. One deliberate difference: for a block
// whose absmax + tiny exceeds 2^126 (float32, bfloat16; 2^1022 for float64) XLA's reciprocal is
// subnormal, so eformer flushes it and codes the whole block as zeros; Quantize uses
// 4 / (absmax + tiny) applied to x / 4 instead, and encodes the block.
//
// blockSize must be even, positive and at most max(the last dimension rounded up to even,
// DefaultBlockSize): a block never needs to be longer than a row, and the default is accepted on
// narrow tensors, where eformer pads it. Inputs holding NaN or ±Inf, scalars and empty tensors are
// rejected. The work is spread over GOMAXPROCS goroutines and writes straight into the result:
// no scratch memory beyond the packed codes and the absmax.
func Quantize(t *tensors.Tensor, blockSize int) (*Array, error) {
	if t == nil {
		return nil, errors.New("nf4.Quantize: nil tensor")
	}
	shape := t.Shape()
	if err := checkQuantizable(shape); err != nil {
		return nil, errors.WithMessage(err, "nf4.Quantize")
	}
	if err := checkBlockSize(blockSize, shape); err != nil {
		return nil, errors.WithMessage(err, "nf4.Quantize")
	}
	packed := tensors.FromShape(packedShape(shape, blockSize))
	absmax := tensors.FromShape(absmaxShape(shape, blockSize, shape.DType))
	var err error
	accessErr := t.ConstFlatData(func(flat any) {
		switch x := flat.(type) {
		case []float32:
			err = quantizeHost(x, shape, blockSize, packed, absmax, f32Arith{})
		case []float64:
			err = quantizeHost(x, shape, blockSize, packed, absmax, f64Arith{})
		case []bfloat16.BFloat16:
			err = quantizeHost(x, shape, blockSize, packed, absmax, bf16Arith{})
		case []float16.Float16:
			err = quantizeHost(x, shape, blockSize, packed, absmax, f16Arith{})
		default:
			err = errors.Errorf("unexpected flat data %T for %s", flat, shape)
		}
	})
	if accessErr != nil {
		return nil, errors.WithMessage(accessErr, "nf4.Quantize: reading the input")
	}
	if err != nil {
		return nil, errors.WithMessage(err, "nf4.Quantize")
	}
	return newHostArray(packed, absmax, shape, blockSize), nil
}

// MustQuantize is Quantize that panics on error.
func MustQuantize(t *tensors.Tensor, blockSize int) *Array {
	a, err := Quantize(t, blockSize)
	if err != nil {
		panic(err)
	}
	return a
}

// MaxBlockSize is the largest block size accepted for a last axis of dim elements:
// max(dim rounded up to even, DefaultBlockSize).
func MaxBlockSize(dim int) int { return max(dim+dim%2, DefaultBlockSize) }

// MaxFlatBlockSize is the largest block size bitsandbytes quantizes with (its kernels' largest).
// FromTensors accepts it, and any even size below, for a FlatBlocks array however few elements
// the array has, as bitsandbytes does (an array smaller than a block is one short block); beyond
// it, MaxBlockSize of the array's size.
const MaxFlatBlockSize = 4096

// checkBlockSize checks blockSize against shape's last axis (shape is already checked).
func checkBlockSize(blockSize int, shape shapes.Shape) error {
	dim := shape.Dimensions[shape.Rank()-1]
	if blockSize <= 0 || blockSize%2 != 0 || blockSize > MaxBlockSize(dim) {
		return errors.Errorf("block size %d for input %s; accepted: an even number from 2 to %d (two codes per byte; "+
			"a block is at most the last axis of %d rounded up to even, or the default %d)",
			blockSize, shape, MaxBlockSize(dim), dim, DefaultBlockSize)
	}
	return nil
}

// checkFlatBlockSize checks the block size of a FlatBlocks array of shape.
func checkFlatBlockSize(blockSize int, shape shapes.Shape) error {
	limit := max(MaxBlockSize(shape.Size()), MaxFlatBlockSize)
	if blockSize <= 0 || blockSize%2 != 0 || blockSize > limit {
		return errors.Errorf("block size %d for flattened blocks of %s; accepted: an even number from 2 to %d (two codes per "+
			"byte; a block is at most the %d elements rounded up to even, or bitsandbytes' largest, %d)", blockSize, shape, limit,
			shape.Size(), MaxFlatBlockSize)
	}
	return nil
}

func checkQuantizable(shape shapes.Shape) error {
	switch shape.DType {
	case dtypes.Float32, dtypes.Float64, dtypes.BFloat16, dtypes.Float16:
	default:
		return errors.Errorf("input %s has dtype %s; accepted: float32, float64, bfloat16 or float16", shape, shape.DType)
	}
	if shape.Rank() == 0 {
		return errors.Errorf("input %s is a scalar; accepted: rank >= 1 (blocks run along the last axis)", shape)
	}
	if shape.Size() == 0 {
		return errors.Errorf("input %s is empty; accepted: every dimension >= 1", shape)
	}
	return nil
}

// numBlocks is the number of blocks of a last axis of dim elements (zero-padded).
func numBlocks(dim, blockSize int) int { return (dim + blockSize - 1) / blockSize }

// packedShape and absmaxShape are the component shapes for a logical shape.
func packedShape(logical shapes.Shape, blockSize int) shapes.Shape {
	dims := append([]int(nil), logical.Dimensions[:logical.Rank()-1]...)
	dims = append(dims, numBlocks(logical.Dimensions[logical.Rank()-1], blockSize), blockSize/2)
	return shapes.Make(dtypes.Uint8, dims...)
}

func absmaxShape(logical shapes.Shape, blockSize int, dtype dtypes.DType) shapes.Shape {
	dims := append([]int(nil), logical.Dimensions[:logical.Rank()-1]...)
	dims = append(dims, numBlocks(logical.Dimensions[logical.Rank()-1], blockSize))
	return shapes.Make(dtype, dims...)
}

// arith is XLA CPU's arithmetic of one input dtype E, with intermediate type F (float32, or
// float64 for float64 inputs); see Quantize for the rules. Products are converted explicitly to F
// so that the compiler never fuses them with a following addition.
type arith[E any, F float32 | float64] interface {
	// load is the value XLA computes with: exact, or zero for a subnormal it flushes.
	load(E) F
	// store converts a loaded magnitude back to E (exact).
	store(F) E
	// reciprocal returns the block's factor r for an absmax amax, and the pre-scale applied to x
	// first (1, or 1/4 for the huge blocks of the deliberate difference).
	reciprocal(amax F) (r, pre F)
	// normalize is x·pre·r as XLA stores it (rounded to E's precision, flushed).
	normalize(x, r, pre F) F
}

// hugeF32 and hugeF64: absmax + tiny above them has a subnormal reciprocal.
const (
	hugeF32 = 0x1p126
	hugeF64 = 0x1p1022
)

// reciprocal returns 1/d with the pre-scale 1, or for d above huge, whose reciprocal is subnormal,
// 1/(d/4) with the pre-scale 1/4.
func reciprocal[F float32 | float64](d, huge F) (r, pre F) {
	if d > huge {
		return 1 / (d * 0.25), 0.25
	}
	return 1 / d, 1
}

type f32Arith struct{}

func (f32Arith) load(x float32) float32  { return xlafloat.FlushF32(x) }
func (f32Arith) store(x float32) float32 { return x }
func (f32Arith) reciprocal(amax float32) (float32, float32) {
	return reciprocal(amax+xlafloat.TinyF32, hugeF32)
}
func (f32Arith) normalize(x, r, pre float32) float32 {
	return xlafloat.FlushF32(float32(xlafloat.FlushF32(float32(x*pre)) * r))
}

type f64Arith struct{}

func (f64Arith) load(x float64) float64  { return xlafloat.FlushF64(x) }
func (f64Arith) store(x float64) float64 { return x }
func (f64Arith) reciprocal(amax float64) (float64, float64) {
	return reciprocal(amax+xlafloat.TinyF64, hugeF64)
}
func (f64Arith) normalize(x, r, pre float64) float64 {
	return xlafloat.FlushF64(float64(xlafloat.FlushF64(float64(x*pre)) * r))
}

type bf16Arith struct{}

func (bf16Arith) load(x bfloat16.BFloat16) float32 { return xlafloat.FlushF32(x.Float32()) }
func (bf16Arith) store(x float32) bfloat16.BFloat16 {
	return bfloat16.BFloat16(math.Float32bits(x) >> 16) // exact: x is a bfloat16 value
}
func (bf16Arith) reciprocal(amax float32) (float32, float32) {
	return reciprocal(xlafloat.RoundBF16(amax+xlafloat.TinyF32), hugeF32)
}
func (bf16Arith) normalize(x, r, pre float32) float32 {
	return xlafloat.RoundBF16(f32Arith{}.normalize(x, r, pre))
}

type f16Arith struct{}

func (f16Arith) load(x float16.Float16) float32  { return x.Float32() }
func (f16Arith) store(x float32) float16.Float16 { return float16.Fromfloat32(x) } // exact
func (f16Arith) reciprocal(amax float32) (float32, float32) {
	return xlafloat.RoundF16(1 / xlafloat.RoundF16(amax+xlafloat.TinyF16)), 1
}
func (f16Arith) normalize(x, r, _ float32) float32 { return xlafloat.RoundF16(float32(x * r)) }

// quantizeHost quantizes flat data of shape into the packed codes and absmax tensors.
func quantizeHost[E any, F float32 | float64, A arith[E, F]](flat []E, shape shapes.Shape, blockSize int,
	packed, absmax *tensors.Tensor, ar A) error {
	for i, x := range flat {
		if f := float64(ar.load(x)); math.IsNaN(f) || math.IsInf(f, 0) {
			return errors.Errorf("input %s holds %v at flat index %d; accepted: finite values only", shape, f, i)
		}
	}
	dim := shape.Dimensions[shape.Rank()-1]
	nb := numBlocks(dim, blockSize)
	rows := shape.Size() / dim

	// cb holds the codebook in F: distances are computed in float32 (float64 for float64 inputs,
	// as JAX promotes float64 - float32 to float64).
	var cb [16]F
	for i, c := range codebook {
		cb[i] = F(c)
	}
	var accessErr error
	accessErr = packed.MutableFlatData(func(p any) {
		codes := p.([]uint8)
		accessErr = absmax.MutableFlatData(func(a any) {
			scales := a.([]E)
			parallel.Chunks(rows*nb, parallel.Workers(rows*nb, 64), func(from, to int) {
				for b := from; b < to; b++ {
					row, col := b/nb, (b%nb)*blockSize
					src := flat[row*dim+col : row*dim+min(col+blockSize, dim)]
					var amax F
					for _, x := range src {
						amax = max(amax, abs(ar.load(x)))
					}
					scales[b] = ar.store(amax)
					r, pre := ar.reciprocal(amax)
					dst := codes[b*blockSize/2 : (b+1)*blockSize/2]
					for j := range dst {
						var hi, lo uint8 = 7, 7 // padding: 0 normalizes to 0, code 7
						if 2*j < len(src) {
							hi = nearest(ar.normalize(ar.load(src[2*j]), r, pre), &cb)
						}
						if 2*j+1 < len(src) {
							lo = nearest(ar.normalize(ar.load(src[2*j+1]), r, pre), &cb)
						}
						dst[j] = hi<<4 | lo
					}
				}
			})
		})
	})
	return accessErr
}

func abs[F float32 | float64](x F) F {
	if x < 0 {
		return -x
	}
	return x
}

// nearest returns the index of the codebook value nearest to v, the lower index on ties
// (eformer's argmin of |v - codebook[i]|). The codebook increases, so the nearest value is one of
// the two around v: a value further on the same side is at least the smallest gap (0.0796)
// further, far more than the distances' rounding, so it can neither win nor tie. The comparisons
// are taken from sign bits, without branches, which random weights would mispredict.
func nearest[F float32 | float64](v F, cb *[16]F) uint8 {
	i := 0 // the last index with cb[i] <= v (0 below the first), by bisection
	for step := 8; step > 0; step /= 2 {
		i += step * (1 - below(v, cb[i+step]))
	}
	j := min(i+1, 15)
	i += below(abs(v-cb[j]), abs(v-cb[i])) * (j - i)
	return uint8(i)
}

// below returns 1 if a < b, else 0, for finite a and b: the sign of a - b, which rounding keeps
// (and which is +0 where a == b).
func below[F float32 | float64](a, b F) int {
	return int(math.Float64bits(float64(a-b)) >> 63)
}
