package bnb

import (
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/safetensors"
)

// The state-dict keys of a Linear8bitLt layer, after the layer's prefix (besides keyWeight and
// keyBias).
const (
	KeySCB          = "SCB"
	keyWeightFormat = "weight_format"
)

// inv127 is bitsandbytes' 1/127 (int8_vectorwise_dequant multiplies by it), in float32.
const inv127 = float32(7.874015718698502e-3)

// Linear8bitLt is the state of a bitsandbytes Linear8bitLt layer saved without float weights
// (has_fp16_weights=False): the int8 weight [out, in] as an int8.Array with one float32 scale per
// output row, SCB/127 (shape (out, 1)), the SCB as stored (float32 [out], the rows' absmax), and
// the bias or nil.
//
// The array materializes codes × (SCB·(1/127)), one rounding, where bitsandbytes computes
// (codes × SCB) × (1/127), two: the values agree to a float32 rounding or two. SCB is kept so
// that Tensors writes back the bytes that were read.
type Linear8bitLt struct {
	Weight *qint8.Array
	SCB    *tensors.Tensor
	Bias   *tensors.Tensor
}

// ReadLinear8bitLt reads the Linear8bitLt layer whose state-dict keys start with prefix from f:
// weight (int8 [out, in]), SCB (float32 [out]), weight_format (uint8 scalar, 0 = row-major; the
// only format accepted) and the optional bias. It returns an error, and nothing, for a missing
// key or tensors whose dtypes or shapes do not fit.
func ReadLinear8bitLt(f *safetensors.File, prefix string) (*Linear8bitLt, error) {
	return readLayer("bnb.ReadLinear8bitLt", f, prefix, readLinear8bitLt)
}

func readLinear8bitLt(f *safetensors.File, prefix string) (*Linear8bitLt, error) {
	info, ok := f.Info(prefix + keyWeight)
	if !ok {
		return nil, errors.Wrapf(safetensors.ErrNotFound, "tensor %q", prefix+keyWeight)
	}
	if info.DType != safetensors.I8 || len(info.Shape) != 2 || info.Shape[0] == 0 || info.Shape[1] == 0 {
		return nil, errors.Errorf("weight %s; accepted: I8 [out, in]", info)
	}
	out := info.Shape[0]
	if format, err := readBytes(f, prefix+keyWeightFormat, safetensors.U8); err != nil {
		return nil, err
	} else if len(format) != 1 || format[0] != 0 {
		return nil, errors.Errorf("weight_format %v; accepted: the scalar 0 (row-major)", format)
	}
	scb, err := readScales(f, prefix+KeySCB, out)
	if err != nil {
		return nil, err
	}
	weight, err := f.ReadTensor(prefix + keyWeight)
	if err != nil {
		return nil, err
	}
	scale := make([]float32, out)
	for i, s := range scb {
		scale[i] = s * inv127
	}
	w, err := qint8.New(implicitarray.TensorComponent(weight), implicitarray.TensorComponent(
		tensors.FromFlatDataAndDimensions(scale, out, 1)), dtypes.Float32, -1)
	if err != nil {
		return nil, err
	}
	l := &Linear8bitLt{Weight: w, SCB: tensors.FromFlatDataAndDimensions(scb, out)}
	if l.Bias, err = readBias(f, prefix, out); err != nil {
		return nil, err
	}
	return l, nil
}

// NewLinear8bitLt returns the bitsandbytes state of an int8.Array [out, in] quantized per output
// row (axis -1, as int8.Quantize does by default): SCB = scale·127 in float32, one for each row
// (a scale [1, 1] is repeated). bias may be nil, else a float vector of out elements.
func NewLinear8bitLt(w *qint8.Array, bias *tensors.Tensor) (*Linear8bitLt, error) {
	if w == nil {
		return nil, errors.New("bnb.NewLinear8bitLt: nil weight")
	}
	if w.IsDeleted() {
		return nil, errors.Wrapf(implicitarray.ErrDeleted, "bnb.NewLinear8bitLt: weight %s", w)
	}
	shape := w.Shape()
	if shape.Rank() != 2 || !slices.Equal(w.Axes(), []int{1}) {
		return nil, errors.Errorf("bnb.NewLinear8bitLt: %s; accepted: a rank-2 [out, in] array quantized along its last axis", w)
	}
	if err := checkBias(bias, shape.Dim(0)); err != nil {
		return nil, errors.WithMessagef(err, "bnb.NewLinear8bitLt: weight %s", w)
	}
	scale := w.Scale()
	if !scale.IsTensor() {
		return nil, errors.Errorf("bnb.NewLinear8bitLt: %s holds graph nodes; accepted: a host array", w)
	}
	values, err := float32Values(scale.Tensor())
	if err != nil {
		return nil, errors.WithMessage(err, "bnb.NewLinear8bitLt")
	}
	scb := make([]float32, shape.Dim(0)) // the scale is [out, 1], or [1, 1]: one for every row
	for i := range scb {
		scb[i] = values[i%len(values)] * 127
	}
	return &Linear8bitLt{Weight: w, SCB: tensors.FromFlatDataAndDimensions(scb, len(scb)), Bias: bias}, nil
}

// Tensors returns the layer's state dict as bitsandbytes' Linear8bitLt.state_dict() holds it,
// under prefix: weight (int8 [out, in]), SCB (float32 [out]), weight_format (uint8 0), bias.
func (l *Linear8bitLt) Tensors(prefix string) ([]safetensors.Tensor, error) {
	if l.Weight == nil || l.SCB == nil {
		return nil, errors.New("bnb.Linear8bitLt.Tensors: no weight or no SCB")
	}
	if l.Weight.IsDeleted() {
		return nil, errors.Wrapf(implicitarray.ErrDeleted, "bnb.Linear8bitLt.Tensors: weight %s", l.Weight)
	}
	if l.Weight.Shape().Rank() != 2 || !slices.Equal(l.Weight.Axes(), []int{1}) {
		return nil, errors.Errorf("bnb.Linear8bitLt.Tensors: %s; accepted: a rank-2 [out, in] array quantized along its last axis",
			l.Weight)
	}
	weight := l.Weight.Weight()
	if !weight.IsTensor() {
		return nil, errors.Errorf("bnb.Linear8bitLt.Tensors: %s holds graph nodes; accepted: a host array", l.Weight)
	}
	w, err := safetensors.FromTensor(prefix+keyWeight, weight.Tensor())
	if err != nil {
		return nil, err
	}
	scb, err := float32Values(l.SCB)
	if err != nil || len(scb) != l.Weight.Shape().Dim(0) {
		return nil, errors.Errorf("bnb.Linear8bitLt.Tensors: SCB %s for weight %s; accepted: float32 [out]", l.SCB.Shape(), l.Weight)
	}
	if err := checkBias(l.Bias, l.Weight.Shape().Dim(0)); err != nil {
		return nil, errors.WithMessagef(err, "bnb.Linear8bitLt.Tensors: weight %s", l.Weight)
	}
	list := []safetensors.Tensor{w, float32Tensor(prefix+KeySCB, scb),
		{Name: prefix + keyWeightFormat, DType: safetensors.U8, Shape: []int{}, Data: []byte{0}}}
	return appendBias(list, prefix, l.Bias)
}
