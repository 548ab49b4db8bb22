package int8

import (
	"math"
	"runtime"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/x448/float16"
)

// Code range: XLA's float-to-int8 convert saturates, so eformer's q can never leave [-128, 127];
// quanta saturates the same way (see the package documentation).
const (
	qMin = -128
	qMax = 127
)

// Tiny returns the smallest positive normal number of a float dtype (numpy's finfo.tiny), which
// the scale adds so an all-zero slice gets a non-zero scale.
func Tiny(dtype dtypes.DType) float64 {
	switch dtype {
	case dtypes.Float16:
		return 0x1p-14
	case dtypes.Float64:
		return 0x1p-1022
	}
	return 0x1p-126 // float32 and bfloat16
}

// Quantize quantizes a float tensor (float32, float64, bfloat16 or float16) on the host, in
// parallel: scale = amax(|t|) over axes (kept as size 1) / 127 + Tiny, q = round-half-to-even(t /
// scale), byte for byte as eformer's Array8B.quantize. axes are the quantized axes (negative
// allowed; none means (-1,)). The materialization dtype is t's. It returns an error for an empty
// or non-float tensor, bad axes, and NaN or Inf values (nothing is written then).
func Quantize(t *tensors.Tensor, axes ...int) (*Array, error) {
	return QuantizeAs(t, dtypes.InvalidDType, axes...)
}

// QuantizeAs is Quantize with a materialization dtype (eformer's dtype argument);
// dtypes.InvalidDType means t's dtype. The scale is always in t's dtype.
func QuantizeAs(t *tensors.Tensor, dtype dtypes.DType, axes ...int) (*Array, error) {
	if t == nil {
		return nil, errors.New("int8.Quantize: nil tensor")
	}
	s := t.Shape()
	if !s.DType.IsFloat() || s.DType.IsComplex() {
		return nil, errors.Errorf("int8.Quantize: tensor %s; accepted: float32, float64, bfloat16 or float16", s)
	}
	if dtype == dtypes.InvalidDType {
		dtype = s.DType
	}
	if !dtype.IsFloat() {
		return nil, errors.Errorf("int8.Quantize: materialization dtype %s; accepted: a float dtype", dtype)
	}
	if s.Rank() == 0 || s.Size() == 0 {
		return nil, errors.Errorf("int8.Quantize: tensor %s is empty or a scalar; accepted: rank >= 1 with no zero dimension", s)
	}
	if len(axes) == 0 {
		axes = []int{-1}
	}
	norm, err := normalizeAxes(axes, s.Rank())
	if err != nil {
		return nil, errors.WithMessagef(err, "int8.Quantize of %s", s)
	}
	scaleDims := scaleDimensions(s.Dimensions, norm)
	var q []int8
	var scale *tensors.Tensor
	accessErr := t.ConstFlatData(func(flat any) {
		switch data := flat.(type) {
		case []float32:
			var sc []float32
			q, sc, err = quantizeFlat(data, s.Dimensions, scaleDims, f32Arith)
			scale = newScale(sc, scaleDims, err)
		case []float64:
			var sc []float64
			q, sc, err = quantizeFlat(data, s.Dimensions, scaleDims, f64Arith)
			scale = newScale(sc, scaleDims, err)
		case []bfloat16.BFloat16:
			var sc []bfloat16.BFloat16
			q, sc, err = quantizeFlat(data, s.Dimensions, scaleDims, bf16Arith)
			scale = newScale(sc, scaleDims, err)
		case []float16.Float16:
			var sc []float16.Float16
			q, sc, err = quantizeFlat(data, s.Dimensions, scaleDims, f16Arith)
			scale = newScale(sc, scaleDims, err)
		default:
			err = errors.Errorf("unsupported data %T", flat)
		}
	})
	if err == nil {
		err = accessErr
	}
	if err != nil {
		return nil, errors.WithMessagef(err, "int8.Quantize of %s", s)
	}
	weight := tensors.FromFlatDataAndDimensions(q, s.Dimensions...)
	return newArray(implicitarray.TensorComponent(weight), implicitarray.TensorComponent(scale),
		shapes.Make(dtype, s.Dimensions...), norm), nil
}

// newScale wraps the scale values in a tensor, unless quantizing failed.
func newScale[T dtypes.Supported](values []T, dims []int, err error) *tensors.Tensor {
	if err != nil {
		return nil
	}
	return tensors.FromFlatDataAndDimensions(values, dims...)
}

// MustQuantize is Quantize that panics on error.
func MustQuantize(t *tensors.Tensor, axes ...int) *Array {
	a, err := Quantize(t, axes...)
	if err != nil {
		panic(err)
	}
	return a
}

// scaleDimensions is dims with 1 on the quantized axes.
func scaleDimensions(dims, axes []int) []int {
	out := make([]int, len(dims))
	copy(out, dims)
	for _, a := range axes {
		out[a] = 1
	}
	return out
}

// arith is the arithmetic of one dtype, emulating XLA: bfloat16 and float16 are computed in
// float32 and rounded to the dtype after each operation.
type arith[T any] struct {
	toF64   func(T) float64
	fromF64 func(float64) T // exact for the values passed (already representable)
	// scale computes amax/127 + tiny in the dtype.
	scale func(amax float64) float64
	// ratio computes x/scale in the dtype.
	ratio func(x, scale float64) float64
}

var (
	f32Arith = arith[float32]{
		toF64:   func(x float32) float64 { return float64(x) },
		fromF64: func(x float64) float32 { return float32(x) },
		scale: func(amax float64) float64 {
			return float64(flushF32(float32(amax)*recip127) + float32(0x1p-126))
		},
		ratio: func(x, s float64) float64 { return float64(flushF32(float32(x)) / float32(s)) },
	}
	f64Arith = arith[float64]{
		toF64:   func(x float64) float64 { return x },
		fromF64: func(x float64) float64 { return x },
		scale:   func(amax float64) float64 { return flushF64(amax*(1.0/127)) + 0x1p-1022 },
		ratio:   func(x, s float64) float64 { return flushF64(x) / s },
	}
	bf16Arith = arith[bfloat16.BFloat16]{
		toF64:   func(x bfloat16.BFloat16) float64 { return float64(x.Float32()) },
		fromF64: func(x float64) bfloat16.BFloat16 { return bfloat16.FromFloat32(float32(x)) },
		scale: func(amax float64) float64 {
			r := roundBF16(flushF32(float32(amax) * recip127))
			return float64(roundBF16(r + float32(0x1p-126)))
		},
		ratio: func(x, s float64) float64 { return float64(roundBF16(flushF32(float32(x)) / float32(s))) },
	}
	f16Arith = arith[float16.Float16]{
		toF64:   func(x float16.Float16) float64 { return float64(x.Float32()) },
		fromF64: func(x float64) float16.Float16 { return float16.Fromfloat32(float32(x)) },
		scale: func(amax float64) float64 {
			r := roundF16(flushF32(float32(amax) * recip127))
			return float64(roundF16(r + float32(0x1p-14)))
		},
		// XLA computes a float16 division as a multiplication by the reciprocal rounded to float16.
		ratio: func(x, s float64) float64 { return float64(roundF16(flushF32(float32(x)) * roundF16(1/float32(s)))) },
	}
)

// recip127 is 1/127 rounded to float32: XLA rewrites the division by the constant 127 as a
// multiplication by its reciprocal, so eformer's scales are amax * recip127 (up to an ulp away
// from amax / 127).
const recip127 = float32(1.0 / 127)

// flushF32 flushes a float32 subnormal to zero, as XLA CPU does (eformer's scale of a slice with
// amax below 127 * 2^-126 is exactly tiny).
func flushF32(x float32) float32 {
	if math.Abs(float64(x)) < 0x1p-126 {
		return 0
	}
	return x
}

// flushF64 is flushF32 for float64.
func flushF64(x float64) float64 {
	if math.Abs(x) < 0x1p-1022 {
		return 0
	}
	return x
}

// RoundToBFloat16 rounds a float32 to the nearest bfloat16, ties to even (as XLA converts;
// bfloat16.FromFloat32 truncates instead).
func RoundToBFloat16(x float32) bfloat16.BFloat16 {
	b := math.Float32bits(x)
	if x != x { // NaN: keep it a quiet NaN
		return bfloat16.BFloat16(b>>16 | 0x40)
	}
	b += 0x7fff + (b>>16)&1
	return bfloat16.BFloat16(b >> 16)
}

func roundBF16(x float32) float32 { return RoundToBFloat16(x).Float32() }

func roundF16(x float32) float32 { return float16.Fromfloat32(x).Float32() }

// quantizeFlat quantizes row-major data of dimensions dims with a scale of dimensions scaleDims,
// in parallel over contiguous ranges of elements.
func quantizeFlat[T any](data []T, dims, scaleDims []int, ar arith[T]) ([]int8, []T, error) {
	n := len(data)
	scaleSize := 1
	for _, d := range scaleDims {
		scaleSize *= d
	}
	workers := min(runtime.GOMAXPROCS(0), max(1, n/(1<<16)))
	chunk := (n + workers - 1) / workers

	// Pass 1: amax per scale element; each worker keeps its own maxima, merged after.
	partial := make([][]float64, workers)
	bad := make([]int, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			amax := make([]float64, scaleSize)
			bad[w] = -1
			walk(dims, scaleDims, w*chunk, min(n, (w+1)*chunk), func(i, si int) {
				v := math.Abs(ar.toF64(data[i]))
				if math.IsNaN(v) || math.IsInf(v, 0) {
					if bad[w] < 0 {
						bad[w] = i
					}
					return
				}
				if v > amax[si] {
					amax[si] = v
				}
			})
			partial[w] = amax
		}()
	}
	wg.Wait()
	for _, i := range bad {
		if i >= 0 {
			return nil, nil, errors.Errorf("element #%d is %v; accepted: finite values", i, ar.toF64(data[i]))
		}
	}
	scales := make([]float64, scaleSize)
	scaleT := make([]T, scaleSize)
	for si := range scaleSize {
		amax := 0.0
		for _, p := range partial {
			amax = max(amax, p[si])
		}
		scales[si] = ar.scale(amax)
		scaleT[si] = ar.fromF64(scales[si])
	}

	// Pass 2: the codes.
	q := make([]int8, n)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			walk(dims, scaleDims, w*chunk, min(n, (w+1)*chunk), func(i, si int) {
				r := math.RoundToEven(ar.ratio(ar.toF64(data[i]), scales[si]))
				q[i] = int8(min(max(r, qMin), qMax))
			})
		}()
	}
	wg.Wait()
	return q, scaleT, nil
}

// walk calls fn(i, si) for the flat indices i in [from, to) of a row-major array of dimensions
// dims, with si the flat index of the matching element of a (broadcastable) array of dimensions
// scaleDims.
func walk(dims, scaleDims []int, from, to int, fn func(i, si int)) {
	if from >= to {
		return
	}
	rank := len(dims)
	// sStride[a]: the step of si when coordinate a grows by one (0 on broadcast axes).
	sStride := make([]int, rank)
	stride := 1
	for a := rank - 1; a >= 0; a-- {
		if scaleDims[a] != 1 {
			sStride[a] = stride
		}
		stride *= scaleDims[a]
	}
	coord := make([]int, rank)
	si := 0
	rest := from
	for a := rank - 1; a >= 0; a-- {
		coord[a] = rest % dims[a]
		rest /= dims[a]
		si += coord[a] * sStride[a]
	}
	last := rank - 1
	for i := from; i < to; {
		// Run along the last axis without carries.
		run := min(dims[last]-coord[last], to-i)
		step := sStride[last]
		for range run {
			fn(i, si)
			i++
			si += step
		}
		coord[last] += run
		// Carry.
		for a := last; a > 0 && coord[a] == dims[a]; a-- {
			si -= coord[a] * sStride[a]
			coord[a] = 0
			coord[a-1]++
			si += sStride[a-1]
		}
	}
}

// QuantizeNode quantizes x inside its graph, with the arithmetic of Quantize done by the graph's
// backend in x's dtype; the result materializes as x's dtype. axes as Quantize (none: (-1,)).
// Unlike the host Quantize it cannot reject NaN or Inf values: a slice holding one gets a NaN or
// Inf scale and meaningless codes. It panics on a non-float x or bad axes.
func QuantizeNode(x *graph.Node, axes ...int) *Array {
	return quantizeNodeAs(x, x.DType(), axes...)
}

func quantizeNodeAs(x *graph.Node, dtype dtypes.DType, axes ...int) *Array {
	s := x.Shape()
	if !s.DType.IsFloat() || s.DType.IsComplex() || s.Rank() == 0 || s.Size() == 0 {
		panic(errors.Errorf("int8.QuantizeNode of %s; accepted: a non-empty float array of rank >= 1", s))
	}
	if len(axes) == 0 {
		axes = []int{-1}
	}
	norm, err := normalizeAxes(axes, s.Rank())
	if err != nil {
		panic(errors.WithMessagef(err, "int8.QuantizeNode of %s", s))
	}
	// The arithmetic of the host Quantize: float32 for the half types, rounded after each op.
	g := x.Graph()
	compute := s.DType
	if s.DType == dtypes.BFloat16 || s.DType == dtypes.Float16 {
		compute = dtypes.Float32
	}
	round := func(n *graph.Node) *graph.Node { return graph.ConvertDType(n, s.DType) }
	up := func(n *graph.Node) *graph.Node { return graph.ConvertDType(n, compute) }
	amax := graph.ReduceAndKeep(graph.Abs(x), graph.ReduceMax, norm...)
	scale := round(graph.Mul(up(amax), graph.Scalar(g, compute, float64(recip127))))
	if s.DType == dtypes.Float64 {
		scale = graph.Mul(amax, graph.Scalar(g, compute, 1.0/127))
	}
	scale = round(graph.Add(up(scale), graph.Scalar(g, compute, Tiny(s.DType))))
	wide := graph.BroadcastToDims(up(scale), s.Dimensions...)
	var ratio *graph.Node
	if s.DType == dtypes.Float16 {
		ratio = graph.Mul(up(x), up(round(graph.Reciprocal(wide))))
	} else {
		ratio = graph.Div(up(x), wide)
	}
	r := graph.Round(round(ratio))
	q := graph.ConvertDType(graph.ClipScalar(r, qMin, qMax), dtypes.Int8)
	return newArray(implicitarray.NodeComponent(q), implicitarray.NodeComponent(scale),
		shapes.Make(dtype, s.Dimensions...), norm)
}
