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
	"github.com/quanta-ml/quanta/internal/qarray"
	"github.com/quanta-ml/quanta/internal/xlafloat"
	"github.com/x448/float16"
)

// Code range: XLA's float-to-int8 convert saturates, so eformer's q can never leave [-128, 127];
// quanta saturates the same way (see the package documentation).
const (
	qMin = -128
	qMax = 127
)

// tiny returns the smallest positive normal number of a float dtype (numpy's finfo.tiny), which
// the scale adds so an all-zero slice gets a non-zero scale.
func tiny(dtype dtypes.DType) float64 {
	switch dtype {
	case dtypes.Float16:
		return 0x1p-14
	case dtypes.Float64:
		return 0x1p-1022
	}
	return 0x1p-126 // float32 and bfloat16
}

// Quantize quantizes a float tensor (float32, float64, bfloat16 or float16) on the host, in
// parallel: scale = amax(|t|) over axes (kept as size 1) / 127 + tiny, q = round-half-to-even(t /
// scale), byte for byte as eformer's Array8B.quantize on XLA CPU (see the package documentation
// for XLA's arithmetic, which Quantize follows). axes are the quantized axes (negative allowed;
// none means (-1,)). The materialization dtype is t's. It returns an error for an empty or
// non-float tensor, bad axes, and NaN or Inf values (nothing is written then). It writes the
// codes straight into the result: its scratch memory is a few values per scale element.
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
	norm, err := qarray.NormalizeAxes(axes, s.Rank())
	if err != nil {
		return nil, errors.WithMessagef(err, "int8.Quantize of %s", s)
	}
	scaleDims := scaleDimensions(s.Dimensions, norm)
	weight := tensors.FromShape(shapes.Make(dtypes.Int8, s.Dimensions...))
	var scale *tensors.Tensor
	var writeErr error
	accessErr := t.ConstFlatData(func(flat any) {
		writeErr = weight.MutableFlatData(func(w any) {
			q := w.([]int8)
			switch data := flat.(type) {
			case []float32:
				scale, err = quantizeFlat(data, q, s.Dimensions, scaleDims, f32Arith)
			case []float64:
				scale, err = quantizeFlat(data, q, s.Dimensions, scaleDims, f64Arith)
			case []bfloat16.BFloat16:
				scale, err = quantizeFlat(data, q, s.Dimensions, scaleDims, bf16Arith)
			case []float16.Float16:
				scale, err = quantizeFlat(data, q, s.Dimensions, scaleDims, f16Arith)
			default:
				err = errors.Errorf("unsupported data %T", flat)
			}
		})
	})
	for _, e := range []error{accessErr, writeErr} {
		if err == nil {
			err = e
		}
	}
	if err != nil {
		return nil, errors.WithMessagef(err, "int8.Quantize of %s", s)
	}
	return newArray(implicitarray.TensorComponent(weight), implicitarray.TensorComponent(scale),
		shapes.Make(dtype, s.Dimensions...), norm), nil
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

// arith is XLA CPU's arithmetic of one dtype T, computed in float64 for float64 and in float32
// otherwise (held in float64s here), rounded and flushed after each operation as XLA stores it.
type arith[T any] struct {
	// load is the value XLA computes with: exact, or zero for a subnormal it flushes.
	load func(T) float64
	// store converts a value of T's precision to T (exact).
	store func(float64) T
	// scale computes amax/127 + tiny in T; multiply says whether the division by 127 is a
	// multiplication by its reciprocal (more than one scale element, see scaleRule).
	scale func(amax float64, multiply bool) float64
	// recip is 1/scale as XLA multiplies by it (rounded to T for float16).
	recip func(scale float64) float64
	// product is x·recip, and quotient x/scale, rounded to T.
	product, quotient func(x, y float64) float64
}

var (
	f32Arith = arith[float32]{
		load:  func(x float32) float64 { return float64(xlafloat.FlushF32(x)) },
		store: func(x float64) float32 { return float32(x) },
		scale: func(amax float64, multiply bool) float64 {
			a := float32(amax)
			t := a / 127
			if multiply {
				t = float32(a * recip127)
			}
			return float64(xlafloat.FlushF32(float32(xlafloat.FlushF32(t) + xlafloat.TinyF32)))
		},
		recip:    func(s float64) float64 { return float64(xlafloat.FlushF32(1 / float32(s))) },
		product:  func(x, r float64) float64 { return float64(xlafloat.FlushF32(float32(float32(x) * float32(r)))) },
		quotient: func(x, s float64) float64 { return float64(xlafloat.FlushF32(float32(x) / float32(s))) },
	}
	f64Arith = arith[float64]{
		load:  func(x float64) float64 { return xlafloat.FlushF64(x) },
		store: func(x float64) float64 { return x },
		// float64 (not an eformer dtype: JAX runs without 64-bit floats by default) always
		// multiplies by 1/127, as a graph does with its constant.
		scale: func(amax float64, _ bool) float64 {
			t := float64(amax * (1.0 / 127))
			return xlafloat.FlushF64(float64(xlafloat.FlushF64(t) + xlafloat.TinyF64))
		},
		recip:    func(s float64) float64 { return xlafloat.FlushF64(1 / s) },
		product:  func(x, r float64) float64 { return xlafloat.FlushF64(float64(x * r)) },
		quotient: func(x, s float64) float64 { return xlafloat.FlushF64(x / s) },
	}
	bf16Arith = arith[bfloat16.BFloat16]{
		load:  func(x bfloat16.BFloat16) float64 { return float64(xlafloat.FlushF32(x.Float32())) },
		store: func(x float64) bfloat16.BFloat16 { return bfloat16.FromFloat32(float32(x)) },
		scale: func(amax float64, multiply bool) float64 {
			a := float32(amax)
			t := a / 127
			if multiply {
				t = float32(a * recip127)
			}
			t = xlafloat.Round(t, dtypes.BFloat16)
			return float64(xlafloat.Round(float32(t+xlafloat.TinyF32), dtypes.BFloat16))
		},
		// The reciprocal of a bfloat16 scale stays float32 (XLA computes bfloat16 in float32).
		recip: func(s float64) float64 { return float64(xlafloat.FlushF32(1 / float32(s))) },
		product: func(x, r float64) float64 {
			return float64(xlafloat.Round(float32(float32(x)*float32(r)), dtypes.BFloat16))
		},
		quotient: func(x, s float64) float64 {
			return float64(xlafloat.Round(float32(x)/float32(s), dtypes.BFloat16))
		},
	}
	f16Arith = arith[float16.Float16]{
		load:  func(x float16.Float16) float64 { return float64(x.Float32()) },
		store: func(x float64) float16.Float16 { return float16.Fromfloat32(float32(x)) },
		scale: func(amax float64, multiply bool) float64 {
			a := float32(amax)
			t := xlafloat.RoundF16(a / 127)
			if multiply {
				t = xlafloat.RoundF16(float32(a * recip127F16))
			}
			return float64(xlafloat.RoundF16(float32(t + xlafloat.TinyF16)))
		},
		recip:    func(s float64) float64 { return float64(xlafloat.RoundF16(1 / float32(s))) },
		product:  func(x, r float64) float64 { return float64(xlafloat.RoundF16(float32(float32(x) * float32(r)))) },
		quotient: func(x, s float64) float64 { return float64(xlafloat.RoundF16(float32(x) / float32(s))) },
	}
)

// recip127 is 1/127 rounded to float32 and recip127F16 rounded to float16: where XLA rewrites a
// division by a broadcast 127 as a multiplication by its reciprocal, computed in the dtype.
var (
	recip127    = float32(1.0 / 127)
	recip127F16 = xlafloat.RoundF16(1.0 / 127)
)

// scaleRule is where XLA divides and where it multiplies by a reciprocal: it rewrites a division
// by a broadcast operand as a multiplication by the broadcast reciprocal, and a broadcast that
// adds no element is no broadcast. So amax/127 is a product by 1/127 unless the scale has a
// single element, and x/scale is a product by 1/scale unless the scale has as many elements as
// x (every quantized axis of size 1).
func scaleRule(size, scaleSize int) (scaleByProduct, codesByProduct bool) {
	return scaleSize > 1, scaleSize < size
}

// quantizeFlat quantizes row-major data of dimensions dims into q with a scale of dimensions
// scaleDims, in parallel over contiguous ranges of elements, and returns the scale tensor.
func quantizeFlat[T dtypes.Supported](data []T, q []int8, dims, scaleDims []int, ar arith[T]) (*tensors.Tensor, error) {
	n := len(data)
	scaleSize := 1
	for _, d := range scaleDims {
		scaleSize *= d
	}
	scaleByProduct, codesByProduct := scaleRule(n, scaleSize)
	workers := min(runtime.GOMAXPROCS(0), max(1, n/(1<<16)))
	chunk := (n + workers - 1) / workers

	// Pass 1: amax per scale element; each worker keeps its own maxima, merged after. When the
	// scale is not much smaller than x, one worker does it, so the maxima stay one array.
	workers1, chunk1 := workers, chunk
	if scaleSize > n/(8*workers) {
		workers1, chunk1 = 1, n
	}
	partial := make([][]float64, workers1)
	bad := make([]int, workers1)
	var wg sync.WaitGroup
	for w := range workers1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			amax := make([]float64, scaleSize)
			bad[w] = -1
			walk(dims, scaleDims, w*chunk1, min(n, (w+1)*chunk1), func(i, si, run, step int) {
				for ; run > 0; i, si, run = i+1, si+step, run-1 {
					v := math.Abs(ar.load(data[i]))
					if math.IsNaN(v) || math.IsInf(v, 0) {
						if bad[w] < 0 {
							bad[w] = i
						}
						continue
					}
					if v > amax[si] {
						amax[si] = v
					}
				}
			})
			partial[w] = amax
		}()
	}
	wg.Wait()
	for _, i := range bad {
		if i >= 0 {
			return nil, errors.Errorf("element #%d is %v; accepted: finite values", i, ar.load(data[i]))
		}
	}
	scales := partial[0]
	scaleT := make([]T, scaleSize)
	for si := range scaleSize {
		amax := 0.0
		for _, p := range partial {
			amax = max(amax, p[si])
		}
		scales[si] = ar.scale(amax, scaleByProduct)
		scaleT[si] = ar.store(scales[si])
	}
	if codesByProduct {
		for si, s := range scales {
			scales[si] = ar.recip(s)
		}
	}

	// Pass 2: the codes.
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			walk(dims, scaleDims, w*chunk, min(n, (w+1)*chunk), func(i, si, run, step int) {
				op := ar.quotient
				if codesByProduct {
					op = ar.product
				}
				for ; run > 0; i, si, run = i+1, si+step, run-1 {
					q[i] = int8(min(max(math.RoundToEven(op(ar.load(data[i]), scales[si])), qMin), qMax))
				}
			})
		}()
	}
	wg.Wait()
	return tensors.FromFlatDataAndDimensions(scaleT, scaleDims...), nil
}

// walk visits the flat indices i in [from, to) of a row-major array of dimensions dims, with si
// the flat index of the matching element of a (broadcastable) array of dimensions scaleDims, a
// run along the last axis at a time: fn(i, si, run, step) stands for the elements i .. i+run-1,
// whose scale indices go si, si+step, ...
func walk(dims, scaleDims []int, from, to int, fn func(i, si, run, step int)) {
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
		fn(i, si, run, sStride[last])
		i += run
		si += run * sStride[last]
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

// QuantizeNode quantizes x inside its graph with the arithmetic of the host-side Quantize (XLA
// CPU's, see the package documentation), so it gives Quantize's bytes on every backend; the
// result materializes as x's dtype. axes as Quantize (none: (-1,)). Unlike the host Quantize it
// cannot reject NaN or Inf values: a slice holding one gets a NaN or Inf scale and meaningless
// codes. It panics on a non-float or empty x, or bad axes.
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
	norm, err := qarray.NormalizeAxes(axes, s.Rank())
	if err != nil {
		panic(errors.WithMessagef(err, "int8.QuantizeNode of %s", s))
	}
	g := x.Graph()
	dt := s.DType
	compute := dtypes.Float32
	if dt == dtypes.Float64 {
		compute = dtypes.Float64
	}
	scalar := func(v float64) *graph.Node { return graph.Scalar(g, compute, v) }
	// round stores a result of an operation in dt (rounded and flushed), for values below 2^hi.
	round := func(n *graph.Node, lo, hi int) *graph.Node {
		switch dt {
		case dtypes.BFloat16:
			return xlafloat.RoundNode(xlafloat.FlushNode(n), xlafloat.BF16, lo, hi)
		case dtypes.Float16:
			return xlafloat.RoundNode(n, xlafloat.F16, max(lo, xlafloat.F16.MinExp), min(hi, xlafloat.F16.MaxExp))
		}
		return xlafloat.FlushNode(n)
	}
	full := func(n *graph.Node) *graph.Node { return round(n, xlafloat.BF16.MinExp, xlafloat.BF16.MaxExp) }

	v := graph.ConvertDType(x, compute)
	if xlafloat.FlushesInputs(dt) {
		v = xlafloat.FlushNode(v)
	}
	amax := graph.ReduceAndKeep(graph.Abs(v), graph.ReduceMax, norm...)
	scaleByProduct, codesByProduct := scaleRule(s.Size(), amax.Shape().Size())
	var t *graph.Node
	switch {
	case dt == dtypes.Float64:
		t = xlafloat.FlushNode(graph.Mul(amax, scalar(1.0/127)))
	case scaleByProduct && dt == dtypes.Float16:
		t = full(graph.Mul(amax, scalar(float64(recip127F16))))
	case scaleByProduct:
		t = full(graph.Mul(amax, scalar(float64(recip127))))
	default:
		// The exact quotient, computed in float64 so that no compiler turns the division by the
		// constant 127 into a product: rounded to float32 it is the correctly rounded quotient.
		t = full(graph.ConvertDType(graph.Div(graph.ConvertDType(amax, dtypes.Float64),
			graph.Scalar(g, dtypes.Float64, 127)), dtypes.Float32))
	}
	tiny := xlafloat.TinyF32
	switch dt {
	case dtypes.Float16:
		tiny = xlafloat.TinyF16
	case dtypes.Float64:
		tiny = xlafloat.TinyF64
	}
	scale := full(graph.Add(t, scalar(tiny)))
	var ratio *graph.Node
	if codesByProduct {
		r := graph.Reciprocal(scale)
		if dt == dtypes.Float16 {
			r = full(r)
		} else {
			r = xlafloat.FlushNode(r)
		}
		ratio = graph.Mul(v, graph.BroadcastToDims(r, s.Dimensions...))
	} else {
		ratio = graph.Div(v, scale) // same dimensions: no broadcast
	}
	// |ratio| < 2^8; below 1/2 every value rounds to 0, so its precision there does not matter.
	r := xlafloat.RoundHalfEvenNode(round(ratio, -1, 7))
	q := graph.ConvertDType(graph.ClipScalar(r, qMin, qMax), dtypes.Int8)
	return newArray(implicitarray.NodeComponent(q), implicitarray.NodeComponent(graph.ConvertDType(scale, dt)),
		shapes.Make(dtype, s.Dimensions...), norm)
}
