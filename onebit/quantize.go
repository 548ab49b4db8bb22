package onebit

import (
	"math"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/hostdata"
	"github.com/quanta-ml/quanta/internal/parallel"
	"github.com/quanta-ml/quanta/internal/qarray"
	"github.com/quanta-ml/quanta/internal/xlafloat"
	"github.com/x448/float16"
)

// Options configures Pack, PackBits and the Quantize functions; nil, or the zero value, is the
// default of every field.
type Options struct {
	// DType is the materialization dtype. Zero (the default): the input's dtype for Pack and
	// PackBits and for scaled quantization (float32 if the input is an integer tensor); int8 for
	// unscaled QuantizeBinary/QuantizeTernary, as eformer's quantize.
	DType dtypes.DType
	// Scale keeps a float32 scale = mean(|x|) over ScaleAxes (negative accepted; none means all
	// axes, one scale per tensor), stored with dimension 1 on those axes. For a weight of shape
	// (K, N) used as x @ W, ScaleAxes {0} gives one scale per output channel (XNOR-Net / BitNet
	// absmean). With BitNet, ScaleAxes are the axes the BitNet scale is computed over. Not
	// accepted by Pack.
	Scale     bool
	ScaleAxes []int
	// BitNet selects the BitNet b1.58 ternary rule for QuantizeTernary: scale = mean(|x|) (per
	// tensor, or over ScaleAxes), values = clip(round(x / scale), -1, 1), rounding half to even; a
	// zero scale gives zeros. The array keeps the scale.
	BitNet bool
}

// config is opts with its defaults (nil is the zero Options).
func config(opts *Options) Options {
	if opts == nil {
		return Options{}
	}
	c := *opts
	c.ScaleAxes = slices.Clone(opts.ScaleAxes)
	return c
}

type rule int

const (
	rulePack rule = iota
	ruleBinary
	ruleTernary
)

// Pack packs t, which must hold only -1, 0 and +1 (any numeric dtype), into an Array:
// eformer's Array1B.quantize, validated. Its first dimension must be a multiple of 4. The array
// materializes to t's dtype unless WithDType says otherwise.
func Pack(t *tensors.Tensor, opts *Options) (*Array, error) {
	return quantizeAs(asArray, "onebit.Pack", TwoBit, rulePack, t, opts)
}

// MustPack is Pack that panics on error.
func MustPack(t *tensors.Tensor, opts *Options) *Array { return must(Pack(t, opts)) }

// PackBits packs t, which must hold only -1 and +1, into a BitArray (8 values a byte). Its first
// dimension must be a multiple of 8.
func PackBits(t *tensors.Tensor, opts *Options) (*BitArray, error) {
	return quantizeAs(asBitArray, "onebit.PackBits", OneBit, rulePack, t, opts)
}

// MustPackBits is PackBits that panics on error.
func MustPackBits(t *tensors.Tensor, opts *Options) *BitArray { return must(PackBits(t, opts)) }

// QuantizeBinary quantizes t to sign(x) with zeros mapped to +1 (eformer's BINARY rule) and packs
// it into an Array (2 bits a value, eformer's bytes). float32 and bfloat16 subnormals count as
// zero (XLA CPU reads them so: a negative subnormal gives +1). Unscaled it materializes as int8
// -1/+1, as eformer; Options.Scale keeps the absmean scale. NaN and ±Inf are errors.
func QuantizeBinary(t *tensors.Tensor, opts *Options) (*Array, error) {
	return quantizeAs(asArray, "onebit.QuantizeBinary", TwoBit, ruleBinary, t, opts)
}

// MustQuantizeBinary is QuantizeBinary that panics on error.
func MustQuantizeBinary(t *tensors.Tensor, opts *Options) *Array {
	return must(QuantizeBinary(t, opts))
}

// QuantizeBinaryBits is QuantizeBinary into a BitArray (1 bit a value).
func QuantizeBinaryBits(t *tensors.Tensor, opts *Options) (*BitArray, error) {
	return quantizeAs(asBitArray, "onebit.QuantizeBinaryBits", OneBit, ruleBinary, t, opts)
}

// MustQuantizeBinaryBits is QuantizeBinaryBits that panics on error.
func MustQuantizeBinaryBits(t *tensors.Tensor, opts *Options) *BitArray {
	return must(QuantizeBinaryBits(t, opts))
}

// QuantizeTernary quantizes t to {-1, 0, +1} and packs it into an Array. The default rule is
// eformer's TERNARY: threshold = 0.5 * std(x) over all elements (population std), +1 where
// x > threshold, -1 where x < -threshold, else 0 (ties go to 0); unscaled, it materializes as
// int8. The threshold is computed as eformer's XLA computes it, in t's dtype: the variance
// (exact, from float64 sums) rounded to float32 and then to t's dtype, its square root rounded to
// the dtype, halved; float32 and bfloat16 subnormals count as zero (integer tensors use the
// float32 rules, float64 ones 0.5·sqrt(variance) in float64). Two deliberate differences: where
// the variance overflows the dtype (float16 with std above 256, for instance) eformer's threshold
// is +Inf and every value 0, quanta rounds the square root of the float64 variance instead; and
// eformer's float32 variance carries the rounding of XLA's float32 sums (their order depends on
// the shape and the CPU), so an element within that error of the threshold may fall on the other
// side. Options.BitNet selects the BitNet b1.58 rule; Options.Scale keeps an absmean scale. NaN and ±Inf are
// errors.
func QuantizeTernary(t *tensors.Tensor, opts *Options) (*Array, error) {
	return quantizeAs(asArray, "onebit.QuantizeTernary", TwoBit, ruleTernary, t, opts)
}

// MustQuantizeTernary is QuantizeTernary that panics on error.
func MustQuantizeTernary(t *tensors.Tensor, opts *Options) *Array {
	return must(QuantizeTernary(t, opts))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// quantizeAs is quantize into the array type of packing l: asArray (TwoBit) or asBitArray (OneBit).
func quantizeAs[A any](as func(core) A, what string, l Packing, r rule, t *tensors.Tensor, opts *Options) (A, error) {
	c, err := quantize(what, l, r, t, opts)
	if err != nil {
		var none A
		return none, err
	}
	return as(c), nil
}

func asArray(c core) *Array       { return &Array{c} }
func asBitArray(c core) *BitArray { return &BitArray{c} }

func quantize(what string, l Packing, r rule, t *tensors.Tensor, opts *Options) (core, error) {
	cfg := config(opts)
	if t == nil {
		return core{}, errors.Errorf("%s: nil tensor", what)
	}
	dims := t.Shape().Dimensions
	if err := l.checkPackable(what, dims); err != nil {
		return core{}, err
	}
	switch {
	case r == rulePack && (cfg.Scale || cfg.BitNet):
		return core{}, errors.Errorf("%s: Options.Scale and BitNet apply to QuantizeBinary/QuantizeTernary; Pack stores the values as given", what)
	case r == ruleBinary && cfg.BitNet:
		return core{}, errors.Errorf("%s: BitNet is a ternary rule; accepted with QuantizeTernary", what)
	}
	scaled := cfg.Scale || cfg.BitNet
	var scaleAxes []int
	if scaled {
		var err error
		if scaleAxes, err = normalizeAxes(cfg.ScaleAxes, len(dims)); err != nil {
			return core{}, errors.WithMessagef(err, "%s: Options.ScaleAxes", what)
		}
	}
	dtype := cfg.DType
	if dtype == dtypes.InvalidDType {
		switch {
		case r == rulePack:
			dtype = t.DType()
		case scaled && t.DType().IsFloat():
			dtype = t.DType()
		case scaled:
			dtype = dtypes.Float32
		default:
			dtype = dtypes.Int8
		}
	}
	if err := checkDType(what, dtype, scaled); err != nil {
		return core{}, err
	}
	job := &quantizeJob{what: what, packing: l, rule: r, bitNet: cfg.BitNet, dims: dims, dtype: t.DType(),
		scaled: scaled, scaleAxes: scaleAxes}
	packed := tensors.FromShape(shapes.Make(dtypes.Uint8, l.packedDims(dims)...))
	var err, writeErr error
	accessErr := t.ConstFlatData(func(flat any) {
		writeErr = packed.MutableFlatData(func(p any) {
			job.packed = p.([]uint8)
			err = dispatch(flat, job)
		})
	})
	for _, e := range []error{err, writeErr, accessErr} {
		if e != nil {
			return core{}, e
		}
	}
	var scaleComp implicitarray.Component
	if !scaled {
		scaleAxes = nil
	} else {
		scaleDims := slices.Clone(dims)
		for _, a := range scaleAxes {
			scaleDims[a] = 1
		}
		s32 := make([]float32, len(job.scale))
		for i, v := range job.scale {
			s32[i] = float32(v)
		}
		scaleComp = implicitarray.TensorComponent(tensors.FromFlatDataAndDimensions(s32, scaleDims...))
	}
	c := newCore(l, shapes.Make(dtype, dims...), implicitarray.TensorComponent(packed), scaleComp, scaleAxes)
	return c, nil
}

// quantizeJob is one host quantization: its parameters, and the packed bytes it writes.
type quantizeJob struct {
	what      string
	packing   Packing
	rule      rule
	bitNet    bool
	dims      []int
	dtype     dtypes.DType // the input's
	scaled    bool
	scaleAxes []int
	packed    []uint8
	scale     []float64 // mean |x| over scaleAxes, keepdims, flat
}

// dispatch runs the job on the input's flat data, read in place: no copy of the input.
func dispatch(flat any, job *quantizeJob) error {
	switch s := flat.(type) {
	case []float32:
		return run(s, widen[float32], job)
	case []float64:
		return run(s, widen[float64], job)
	case []bfloat16.BFloat16:
		return run(s, func(v bfloat16.BFloat16) float64 { return float64(v.Float32()) }, job)
	case []float16.Float16:
		return run(s, func(v float16.Float16) float64 { return float64(v.Float32()) }, job)
	case []int8:
		return run(s, widen[int8], job)
	case []int16:
		return run(s, widen[int16], job)
	case []int32:
		return run(s, widen[int32], job)
	case []int64:
		return run(s, widen[int64], job)
	case []uint8:
		return run(s, widen[uint8], job)
	case []uint16:
		return run(s, widen[uint16], job)
	case []uint32:
		return run(s, widen[uint32], job)
	case []uint64:
		return run(s, widen[uint64], job)
	}
	return errors.Errorf("%s: tensor of dtype %s; accepted: float or integer dtypes", job.what, job.dtype)
}

// widen is the float64 of a value of a built-in number type (exact but for 64-bit integers
// beyond 2^53, which round).
func widen[E int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64 | float32 | float64](v E) float64 {
	return float64(v)
}

// run validates, computes the statistics the rule needs (streaming over the input) and packs
// the values straight into job.packed.
func run[E any](flat []E, toF64 func(E) float64, job *quantizeJob) error {
	// load is the value the rule sees: float32 and bfloat16 subnormals read as zero, as XLA CPU
	// reads them (Pack stores the values as given).
	load := toF64
	if job.rule != rulePack && xlafloat.FlushesInputs(job.dtype) {
		if job.dtype == dtypes.Float64 {
			load = func(v E) float64 { return xlafloat.FlushF64(toF64(v)) }
		} else {
			load = func(v E) float64 { return float64(xlafloat.FlushF32(float32(toF64(v)))) }
		}
	}
	for i, e := range flat {
		v := toF64(e)
		switch {
		case job.rule == rulePack:
			if !job.packing.valid(v) {
				return badValueError(job.what, job.packing, v, i, job.dims)
			}
		case math.IsNaN(v) || math.IsInf(v, 0):
			return errors.Errorf("%s: %v at index %v of shape %v; accepted: finite values", job.what, v, hostdata.Unflatten(i, job.dims), job.dims)
		}
	}
	var scaleOf func(i int) int
	if job.scaled {
		scaleOf = scaleIndexer(job.dims, job.scaleAxes)
		job.scale = absMean(flat, load, job.dims, job.scaleAxes, scaleOf)
	}
	var value func(i int, v float64) int8
	switch {
	case job.rule == rulePack:
		value = func(_ int, v float64) int8 { return int8(v) }
	case job.rule == ruleBinary:
		value = func(_ int, v float64) int8 {
			if v < 0 {
				return -1
			}
			return 1
		}
	case job.bitNet:
		value = func(i int, v float64) int8 {
			if s := job.scale[scaleOf(i)]; s > 0 {
				return int8(max(-1, min(1, math.RoundToEven(v/s))))
			}
			return 0
		}
	default:
		threshold := TernaryThreshold(job.dtype, variance(flat, load))
		value = func(_ int, v float64) int8 {
			switch {
			case v > threshold:
				return 1
			case v < -threshold:
				return -1
			}
			return 0
		}
	}
	// Byte k of the packed array holds the values at flat indices g·stride + k, one per group g.
	groups := job.packing.ValuesPerByte()
	stride := len(flat) / groups
	bits := job.packing.bitsPerValue()
	// One goroutine per 2^14 bytes, GOMAXPROCS at most.
	n := len(job.packed)
	parallel.Chunks(n, parallel.Workers(n, 1<<14), func(from, to int) {
		for k := from; k < to; k++ {
			var b uint8
			for g := range groups {
				i := g*stride + k
				b |= job.packing.code(value(i, load(flat[i]))) << (bits * g)
			}
			job.packed[k] = b
		}
	})
	return nil
}

// variance returns the population variance of the loaded values, from float64 sums (two passes
// over the input).
func variance[E any](flat []E, load func(E) float64) float64 {
	var mean, sum float64
	for _, e := range flat {
		mean += load(e)
	}
	mean /= float64(len(flat))
	for _, e := range flat {
		d := load(e) - mean
		sum += d * d
	}
	return sum / float64(len(flat))
}

// TernaryThreshold returns eformer's ternary threshold 0.5·std for an input of dtype whose
// population variance is variance (exact or from float64 sums), as XLA CPU computes it in the
// dtype: for float32 (and integer dtypes) the variance rounded to float32, its float32 square
// root, halved; for bfloat16 and float16 the variance rounded to float32 then to the dtype, its
// square root rounded to the dtype, halved in the dtype; float64: 0.5·sqrt(variance). Where the
// variance overflows the dtype (eformer's threshold is then +Inf), the square root of the float64
// variance, rounded to the dtype, is used instead (see QuantizeTernary).
func TernaryThreshold(dtype dtypes.DType, variance float64) float64 {
	if dtype == dtypes.Float64 {
		return 0.5 * math.Sqrt(variance)
	}
	e := dtype
	if e != dtypes.BFloat16 && e != dtypes.Float16 {
		e = dtypes.Float32
	}
	v := xlafloat.Round(float32(variance), e)
	std := xlafloat.Round(float32(math.Sqrt(float64(v))), e)
	if math.IsInf(float64(v), 1) {
		std = xlafloat.Round(float32(math.Sqrt(variance)), e)
	}
	return float64(xlafloat.Round(0.5*std, e))
}

// normalizeAxes maps the scale axes into [0, rank), sorted; none means all axes.
func normalizeAxes(axes []int, rank int) ([]int, error) {
	if len(axes) == 0 {
		all := make([]int, rank)
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	out, err := qarray.NormalizeAxes(axes, rank)
	slices.Sort(out)
	return out, err
}

// scaleIndexer maps a flat index of dims to the flat index of the keepdims scale over axes.
func scaleIndexer(dims, axes []int) func(int) int {
	reduced := make([]bool, len(dims))
	for _, a := range axes {
		reduced[a] = true
	}
	return func(flat int) int {
		idx, stride := 0, 1
		for i := len(dims) - 1; i >= 0; i-- {
			coord := flat % dims[i]
			flat /= dims[i]
			if !reduced[i] {
				idx += coord * stride
				stride *= dims[i]
			}
		}
		return idx
	}
}

// absMean is mean(|x|) over axes, keepdims, flat (streaming over the input).
func absMean[E any](flat []E, load func(E) float64, dims, axes []int, scaleOf func(int) int) []float64 {
	n := 1
	for _, a := range axes {
		n *= dims[a]
	}
	out := make([]float64, len(flat)/n)
	for i, e := range flat {
		out[scaleOf(i)] += math.Abs(load(e))
	}
	for i := range out {
		out[i] /= float64(n)
	}
	return out
}
