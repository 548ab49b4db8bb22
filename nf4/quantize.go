package nf4

import (
	"math"
	"runtime"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/x448/float16"
)

// DefaultBlockSize is eformer's default block size.
const DefaultBlockSize = 64

// Quantize converts a float tensor (float32, float64, bfloat16 or float16, rank >= 1) to NF4 on
// the host, byte for byte as eformer's ArrayNF4.quantize: blocks of blockSize elements along the
// last axis (zero-padded internally to a multiple of blockSize), absmax per block in t's dtype,
// each element mapped to the nearest codebook value of x / (absmax + tiny(dtype)) (ties to the
// lower code), two codes per byte, the first in the high nibble. The array's logical shape is t's.
//
// blockSize must be even and positive. Inputs holding NaN or ±Inf are rejected. The work is
// spread over GOMAXPROCS goroutines.
func Quantize(t *tensors.Tensor, blockSize int) (*Array, error) {
	if t == nil {
		return nil, errors.New("nf4.Quantize: nil tensor")
	}
	if err := checkBlockSize(blockSize); err != nil {
		return nil, errors.WithMessage(err, "nf4.Quantize")
	}
	shape := t.Shape()
	if err := checkQuantizable(shape); err != nil {
		return nil, errors.WithMessage(err, "nf4.Quantize")
	}
	var packed, absmax *tensors.Tensor
	var err error
	accessErr := t.ConstFlatData(func(flat any) {
		switch x := flat.(type) {
		case []float32:
			packed, absmax, err = quantizeHost(x, shape, blockSize, f32Arith{})
		case []float64:
			packed, absmax, err = quantizeHost(x, shape, blockSize, f64Arith{})
		case []bfloat16.BFloat16:
			packed, absmax, err = quantizeHost(x, shape, blockSize, bf16Arith{})
		case []float16.Float16:
			packed, absmax, err = quantizeHost(x, shape, blockSize, f16Arith{})
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

func checkBlockSize(blockSize int) error {
	if blockSize <= 0 || blockSize%2 != 0 {
		return errors.Errorf("block size %d; accepted: an even positive number (two codes per byte), e.g. %d",
			blockSize, DefaultBlockSize)
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

// arith emulates eformer's arithmetic in one input dtype E, with intermediate type F (float32, or
// float64 for float64 inputs): values of E convert exactly to F, and each op of E is computed in F
// and rounded to E, as XLA computes bfloat16 and float16 ops.
type arith[E any, F float32 | float64] interface {
	toF(E) F
	round(F) F // rounds to E's precision (identity for float32 and float64)
	tiny() F   // smallest normal number of E
}

type f32Arith struct{}

func (f32Arith) toF(x float32) float32   { return x }
func (f32Arith) round(x float32) float32 { return x }
func (f32Arith) tiny() float32           { return 0x1p-126 }

type f64Arith struct{}

func (f64Arith) toF(x float64) float64   { return x }
func (f64Arith) round(x float64) float64 { return x }
func (f64Arith) tiny() float64           { return 0x1p-1022 }

type bf16Arith struct{}

func (bf16Arith) toF(x bfloat16.BFloat16) float32 { return x.Float32() }
func (bf16Arith) round(x float32) float32         { return roundBF16(x) }
func (bf16Arith) tiny() float32                   { return 0x1p-126 }

type f16Arith struct{}

func (f16Arith) toF(x float16.Float16) float32 { return x.Float32() }
func (f16Arith) round(x float32) float32       { return float16.Fromfloat32(x).Float32() }
func (f16Arith) tiny() float32                 { return 0x1p-14 }

// roundBF16 rounds a float32 to bfloat16 precision, to nearest with ties to even (as XLA converts;
// bfloat16.FromFloat32 truncates). Inputs are finite here.
func roundBF16(x float32) float32 {
	b := math.Float32bits(x)
	b += 0x7fff + (b>>16)&1
	return math.Float32frombits(b &^ 0xffff)
}

// quantizeHost quantizes flat data of shape into packed codes and absmax in E.
func quantizeHost[E any, F float32 | float64, A arith[E, F]](flat []E, shape shapes.Shape, blockSize int, ar A) (
	packed, absmax *tensors.Tensor, err error) {
	for i, x := range flat {
		if f := float64(ar.toF(x)); math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, nil, errors.Errorf("input %s holds %v at flat index %d; accepted: finite values only", shape, f, i)
		}
	}
	dim := shape.Dimensions[shape.Rank()-1]
	nb := numBlocks(dim, blockSize)
	rows := shape.Size() / dim
	codes := make([]uint8, rows*nb*blockSize/2)
	scales := make([]E, rows*nb)

	// cb holds the codebook in F: distances are computed in float32 (float64 for float64 inputs,
	// as JAX promotes float64 - float32 to float64).
	var cb [16]F
	for i, c := range codebook {
		cb[i] = F(c)
	}
	quantizeBlocks := func(from, to int) {
		for b := from; b < to; b++ {
			row, col := b/nb, (b%nb)*blockSize
			src := flat[row*dim+col : row*dim+min(col+blockSize, dim)]
			var amax F
			maxAt := -1
			for i, x := range src {
				if v := abs(ar.toF(x)); v > amax || maxAt < 0 {
					amax, maxAt = v, i
				}
			}
			scales[b] = absE(src[maxAt])
			denom := ar.round(amax + ar.tiny())
			dst := codes[b*blockSize/2 : (b+1)*blockSize/2]
			for j := range dst {
				var hi, lo uint8 = 7, 7 // padding: 0 normalizes to 0, code 7
				if 2*j < len(src) {
					hi = nearest(ar.round(ar.toF(src[2*j])/denom), &cb)
				}
				if 2*j+1 < len(src) {
					lo = nearest(ar.round(ar.toF(src[2*j+1])/denom), &cb)
				}
				dst[j] = hi<<4 | lo
			}
		}
	}
	parallel(rows*nb, quantizeBlocks)

	packed = tensors.FromShape(packedShape(shape, blockSize))
	tensors.MustMutableFlatData(packed, func(p []uint8) { copy(p, codes) })
	absmax = tensors.FromShape(absmaxShape(shape, blockSize, shape.DType))
	absmax.MustMutableFlatData(func(a any) { copy(a.([]E), scales) })
	return packed, absmax, nil
}

func abs[F float32 | float64](x F) F {
	if x < 0 {
		return -x
	}
	return x
}

// absE clears the sign bit of x (exact |x| in E; every E here is a sign-magnitude float).
func absE[E any](x E) E {
	switch v := any(x).(type) {
	case float32:
		return any(math.Float32frombits(math.Float32bits(v) &^ (1 << 31))).(E)
	case float64:
		return any(math.Abs(v)).(E)
	case bfloat16.BFloat16:
		return any(v &^ 0x8000).(E)
	case float16.Float16:
		return any(v &^ 0x8000).(E)
	}
	panic(errors.Errorf("nf4: unexpected element type %T", x))
}

// nearest returns the index of the codebook value nearest to v, the lower index on ties
// (eformer's argmin of |v - codebook[i]|).
func nearest[F float32 | float64](v F, cb *[16]F) uint8 {
	best, bestDist := 0, abs(v-cb[0])
	for i := 1; i < 16; i++ {
		if d := abs(v - cb[i]); d < bestDist {
			best, bestDist = i, d
		}
	}
	return uint8(best)
}

// parallel runs fn over [0, n) split in contiguous chunks across GOMAXPROCS goroutines.
func parallel(n int, fn func(from, to int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 || n < 64 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for from := 0; from < n; from += chunk {
		wg.Add(1)
		go func(from, to int) {
			defer wg.Done()
			fn(from, to)
		}(from, min(from+chunk, n))
	}
	wg.Wait()
}
