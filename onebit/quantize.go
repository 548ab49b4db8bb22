package onebit

import (
	"math"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
)

// Option configures Pack, PackBits and the Quantize functions.
type Option func(*config)

type config struct {
	dtype     dtypes.DType
	scaled    bool
	scaleAxes []int
	bitNet    bool
}

// WithDType sets the materialization dtype. Defaults: the input's dtype for Pack and PackBits and
// for scaled quantization (float32 if the input is an integer tensor); int8 for unscaled
// QuantizeBinary/QuantizeTernary, as eformer's quantize.
func WithDType(dtype dtypes.DType) Option { return func(c *config) { c.dtype = dtype } }

// WithScale keeps a float32 scale = mean(|x|) over the given axes (negative accepted; none means
// all axes, one scale per tensor), stored with dimension 1 on those axes. For a weight of shape
// (K, N) used as x @ W, WithScale(0) gives one scale per output channel (XNOR-Net / BitNet
// absmean). With BitNet it sets the axes the BitNet scale is computed over. Not accepted by Pack.
func WithScale(axes ...int) Option {
	return func(c *config) {
		c.scaled = true
		c.scaleAxes = slices.Clone(axes)
	}
}

// BitNet selects the BitNet b1.58 ternary rule for QuantizeTernary: scale = mean(|x|) (per tensor,
// or over the axes of WithScale), values = clip(round(x / scale), -1, 1), rounding half to even;
// a zero scale gives zeros. The array keeps the scale.
func BitNet() Option { return func(c *config) { c.bitNet = true } }

type rule int

const (
	rulePack rule = iota
	ruleBinary
	ruleTernary
)

// Pack packs t, which must hold only -1, 0 and +1 (any numeric dtype), into an Array:
// eformer's Array1B.quantize, validated. Its first dimension must be a multiple of 4. The array
// materializes to t's dtype unless WithDType says otherwise.
func Pack(t *tensors.Tensor, opts ...Option) (*Array, error) {
	c, err := quantize("onebit.Pack", TwoBit, rulePack, t, opts)
	if err != nil {
		return nil, err
	}
	return &Array{c}, nil
}

// MustPack is Pack that panics on error.
func MustPack(t *tensors.Tensor, opts ...Option) *Array { return must(Pack(t, opts...)) }

// PackBits packs t, which must hold only -1 and +1, into a BitArray (8 values a byte). Its first
// dimension must be a multiple of 8.
func PackBits(t *tensors.Tensor, opts ...Option) (*BitArray, error) {
	c, err := quantize("onebit.PackBits", OneBit, rulePack, t, opts)
	if err != nil {
		return nil, err
	}
	return &BitArray{c}, nil
}

// MustPackBits is PackBits that panics on error.
func MustPackBits(t *tensors.Tensor, opts ...Option) *BitArray { return must(PackBits(t, opts...)) }

// QuantizeBinary quantizes t to sign(x) with zeros mapped to +1 (eformer's BINARY rule) and packs
// it into an Array (2 bits a value, eformer's bytes). Unscaled it materializes as int8 -1/+1, as
// eformer; WithScale keeps the absmean scale. A NaN is an error.
func QuantizeBinary(t *tensors.Tensor, opts ...Option) (*Array, error) {
	c, err := quantize("onebit.QuantizeBinary", TwoBit, ruleBinary, t, opts)
	if err != nil {
		return nil, err
	}
	return &Array{c}, nil
}

// MustQuantizeBinary is QuantizeBinary that panics on error.
func MustQuantizeBinary(t *tensors.Tensor, opts ...Option) *Array {
	return must(QuantizeBinary(t, opts...))
}

// QuantizeBinaryBits is QuantizeBinary into a BitArray (1 bit a value).
func QuantizeBinaryBits(t *tensors.Tensor, opts ...Option) (*BitArray, error) {
	c, err := quantize("onebit.QuantizeBinaryBits", OneBit, ruleBinary, t, opts)
	if err != nil {
		return nil, err
	}
	return &BitArray{c}, nil
}

// MustQuantizeBinaryBits is QuantizeBinaryBits that panics on error.
func MustQuantizeBinaryBits(t *tensors.Tensor, opts ...Option) *BitArray {
	return must(QuantizeBinaryBits(t, opts...))
}

// QuantizeTernary quantizes t to {-1, 0, +1} and packs it into an Array. The default rule is
// eformer's TERNARY: threshold = 0.5 * std(x) over all elements (population std, computed in
// float64), +1 where x > threshold, -1 where x < -threshold, else 0 (ties go to 0); unscaled, it
// materializes as int8. BitNet selects the BitNet b1.58 rule; WithScale keeps an absmean scale.
// A NaN is an error.
func QuantizeTernary(t *tensors.Tensor, opts ...Option) (*Array, error) {
	c, err := quantize("onebit.QuantizeTernary", TwoBit, ruleTernary, t, opts)
	if err != nil {
		return nil, err
	}
	return &Array{c}, nil
}

// MustQuantizeTernary is QuantizeTernary that panics on error.
func MustQuantizeTernary(t *tensors.Tensor, opts ...Option) *Array {
	return must(QuantizeTernary(t, opts...))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func quantize(what string, l Layout, r rule, t *tensors.Tensor, opts []Option) (core, error) {
	var cfg config
	for _, opt := range opts {
		opt(&cfg)
	}
	if t == nil {
		return core{}, errors.Errorf("%s: nil tensor", what)
	}
	dims := t.Shape().Dimensions
	if err := l.checkPackable(what, dims); err != nil {
		return core{}, err
	}
	switch {
	case r == rulePack && (cfg.scaled || cfg.bitNet):
		return core{}, errors.Errorf("%s: WithScale and BitNet apply to QuantizeBinary/QuantizeTernary; Pack stores the values as given", what)
	case r == ruleBinary && cfg.bitNet:
		return core{}, errors.Errorf("%s: BitNet is a ternary rule; accepted with QuantizeTernary", what)
	}
	scaled := cfg.scaled || cfg.bitNet
	var scaleAxes []int
	if scaled {
		var err error
		if scaleAxes, err = normalizeAxes(cfg.scaleAxes, len(dims)); err != nil {
			return core{}, errors.WithMessagef(err, "%s: WithScale", what)
		}
	}
	dtype := cfg.dtype
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
	x, err := float64s(t)
	if err != nil {
		return core{}, errors.WithMessage(err, what)
	}
	if r != rulePack {
		if err := checkNotNaN(what, x, dims); err != nil {
			return core{}, err
		}
	}
	var scale []float64
	if scaled {
		scale = absMean(x, dims, scaleAxes)
	}
	values := make([]int8, len(x))
	switch {
	case r == rulePack:
		for i, v := range x {
			if !l.valid(v) {
				return core{}, badValueError(what, l, v, i, dims)
			}
			values[i] = int8(v)
		}
	case r == ruleBinary:
		for i, v := range x {
			values[i] = 1
			if v < 0 {
				values[i] = -1
			}
		}
	case cfg.bitNet:
		idx := scaleIndexer(dims, scaleAxes)
		for i, v := range x {
			if s := scale[idx(i)]; s > 0 {
				values[i] = int8(max(-1, min(1, math.RoundToEven(v/s))))
			}
		}
	default:
		threshold := 0.5 * populationStd(x)
		for i, v := range x {
			switch {
			case v > threshold:
				values[i] = 1
			case v < -threshold:
				values[i] = -1
			}
		}
	}
	packed := implicitarray.TensorComponent(tensors.FromFlatDataAndDimensions(l.packValues(values, dims), l.packedDims(dims)...))
	var scaleComp implicitarray.Component
	if scaled {
		scaleDims := slices.Clone(dims)
		for _, a := range scaleAxes {
			scaleDims[a] = 1
		}
		s32 := make([]float32, len(scale))
		for i, v := range scale {
			s32[i] = float32(v)
		}
		scaleComp = implicitarray.TensorComponent(tensors.FromFlatDataAndDimensions(s32, scaleDims...))
	} else {
		scaleAxes = nil
	}
	c := newCore(l, shapes.Make(dtype, dims...), packed, scaleComp, scaleAxes)
	return c, nil
}

// normalizeAxes maps axes into [0, rank), sorted; none means all axes.
func normalizeAxes(axes []int, rank int) ([]int, error) {
	if len(axes) == 0 {
		all := make([]int, rank)
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	out := make([]int, 0, len(axes))
	for _, a := range axes {
		n := a
		if n < 0 {
			n += rank
		}
		if n < 0 || n >= rank {
			return nil, errors.Errorf("axis %d out of range for rank %d; accepted: -%d..%d", a, rank, rank, rank-1)
		}
		if slices.Contains(out, n) {
			return nil, errors.Errorf("axes %v repeat axis %d", axes, n)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
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

// absMean is mean(|x|) over axes, keepdims, flat.
func absMean(x []float64, dims, axes []int) []float64 {
	n := 1
	for _, a := range axes {
		n *= dims[a]
	}
	out := make([]float64, len(x)/n)
	idx := scaleIndexer(dims, axes)
	for i, v := range x {
		out[idx(i)] += math.Abs(v)
	}
	for i := range out {
		out[i] /= float64(n)
	}
	return out
}

func populationStd(x []float64) float64 {
	var mean float64
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	var ss float64
	for _, v := range x {
		ss += (v - mean) * (v - mean)
	}
	return math.Sqrt(ss / float64(len(x)))
}
