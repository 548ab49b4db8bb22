package bnb

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/safetensors"
)

// The state-dict keys of a Linear4bit weight, after the layer's prefix.
const (
	keyWeight         = "weight"
	keyBias           = "bias"
	keyAbsmax         = "weight.absmax"
	keyQuantMap       = "weight.quant_map"
	keyNestedAbsmax   = "weight.nested_absmax"
	keyNestedQuantMap = "weight.nested_quant_map"
	// keyQuantState holds the quant state's JSON as uint8 bytes; bitsandbytes names it after the
	// quant type ("...bitsandbytes__fp4" for FP4, which this package does not read).
	keyQuantState = "weight.quant_state.bitsandbytes__nf4"
)

// QuantState is the JSON part of a Linear4bit weight's quant state (keyQuantState).
type QuantState struct {
	QuantType string `json:"quant_type"`
	BlockSize int    `json:"blocksize"`
	// DType is the torch dtype the weight dequantizes to: "float32", "bfloat16", "float16".
	DType string `json:"dtype"`
	// Shape is the weight's torch shape, [out, in] for a linear layer.
	Shape []int `json:"shape"`
	// The nested fields are set with double quantization (compress_statistics).
	NestedBlockSize int      `json:"nested_blocksize,omitempty"`
	NestedDType     string   `json:"nested_dtype,omitempty"`
	NestedOffset    *float64 `json:"nested_offset,omitempty"`
}

// JSON returns the quant state as bitsandbytes serializes it (Python's json.dumps of its dict:
// keys in bitsandbytes' order, ", " and ": " separators, floats as Python's repr).
func (q QuantState) JSON() []byte {
	var b strings.Builder
	str := func(s string) string { enc, _ := json.Marshal(s); return string(enc) }
	dims := make([]string, len(q.Shape))
	for i, d := range q.Shape {
		dims[i] = strconv.Itoa(d)
	}
	fmt.Fprintf(&b, `{"quant_type": %s, "blocksize": %d, "dtype": %s, "shape": [%s]`, str(q.QuantType), q.BlockSize,
		str(q.DType), strings.Join(dims, ", "))
	if q.NestedOffset != nil {
		fmt.Fprintf(&b, `, "nested_blocksize": %d, "nested_dtype": %s, "nested_offset": %s`, q.NestedBlockSize,
			str(q.NestedDType), pyFloat(*q.NestedOffset))
	}
	b.WriteString("}")
	return []byte(b.String())
}

// Linear4bit is the state of a bitsandbytes Linear4bit layer (NF4): the weight as an nf4.Array of
// the torch shape [out, in] (y = x·Wᵀ + b contracts its last axis, the axis its blocks run along),
// and the bias or nil.
//
// bitsandbytes blocks the flattened weight; when in is a multiple of the block size (or out is 1)
// those are nf4's blocks along the last axis with the same bytes, and the products use every
// Blockwise4 strategy. Otherwise the array keeps bitsandbytes' flattened blocks
// (nf4.Format.FlatBlocks): no re-quantization, the products decode the weight.
type Linear4bit struct {
	Weight *nf4.Array
	Bias   *tensors.Tensor
}

// ReadLinear4bit reads the Linear4bit layer whose state-dict keys start with prefix (e.g. "" for
// a layer saved alone, "model.layers.0.self_attn.q_proj." in a model) from f, as
// bitsandbytes' Params4bit.from_prequantized reads it: the packed codes, absmax (or their codes,
// the nested absmax and the offset), the quant state. The quant map and the nested quant map
// must be NF4's codebook and bitsandbytes' dynamic map. It returns an error, and nothing, for a
// missing key, an FP4 or other quant type, or tensors whose dtypes or sizes do not fit the quant
// state.
func ReadLinear4bit(f *safetensors.File, prefix string) (*Linear4bit, error) {
	return readLayer("bnb.ReadLinear4bit", f, prefix, readLinear4bit)
}

func readLinear4bit(f *safetensors.File, prefix string) (*Linear4bit, error) {
	stateBytes, err := readBytes(f, prefix+keyQuantState, safetensors.U8)
	if err != nil {
		if _, ok := f.Info(prefix + "weight.quant_state.bitsandbytes__fp4"); ok {
			return nil, errors.New("the weight is FP4; accepted: NF4 (quant_type 'nf4')")
		}
		return nil, err
	}
	var qs QuantState
	if err := decodeQuantState(stateBytes, &qs); err != nil {
		return nil, err
	}
	if qs.QuantType != "nf4" {
		return nil, errors.Errorf("quant_type %q; accepted: \"nf4\"", qs.QuantType)
	}
	dtype, ok := dtypeNames[qs.DType]
	if !ok {
		return nil, errors.Errorf("quant state dtype %q; accepted: float32, bfloat16, float16, float64", qs.DType)
	}
	if err := checkShape(qs.Shape); err != nil {
		return nil, errors.WithMessage(err, "quant state")
	}
	// The shape is checked against the packed codes the file holds before anything is sized by it.
	weight, ok := f.Info(prefix + keyWeight)
	if !ok {
		return nil, errors.Wrapf(safetensors.ErrNotFound, "tensor %q", prefix+keyWeight)
	}
	elements, ok := fileio.Elements(qs.Shape, 2*uint64(weight.Bytes))
	if !ok || (elements+1)/2 != uint64(weight.Bytes) {
		return nil, errors.Errorf("quant state shape %v for %s; accepted: a shape whose elements, two codes a byte, "+
			"fill the weight's %d bytes", qs.Shape, weight, weight.Bytes)
	}
	n := int(elements)
	if err := checkBlockSize(qs.BlockSize, n); err != nil {
		return nil, errors.WithMessage(err, "quant state blocksize")
	}
	doubleQuant, err := checkNested(f, prefix, qs)
	if err != nil {
		return nil, err
	}
	shape := shapes.Make(dtype, qs.Shape...)
	nb := (n + qs.BlockSize - 1) / qs.BlockSize
	packed, err := readBytes(f, prefix+keyWeight, safetensors.U8, (n+1)/2, 1)
	if err != nil {
		return nil, err
	}
	if err := checkMap(f, prefix+keyQuantMap, codebookSlice()); err != nil {
		return nil, err
	}
	format := nf4.Format{BlockSize: qs.BlockSize, FlatBlocks: !rowBlocked(qs.Shape, qs.BlockSize), DoubleQuant: doubleQuant}
	want := nf4.ComponentShapes(shape, format, dtypes.Float32)
	packedT := tensors.FromShape(want[0])
	tensors.MustMutableFlatData(packedT, func(dst []uint8) {
		for i := range dst {
			dst[i] = 0x77
		}
		copy(dst, packed)
	})
	components := []*tensors.Tensor{packedT}
	if !format.DoubleQuant {
		absmax, err := readScales(f, prefix+keyAbsmax, nb)
		if err != nil {
			return nil, err
		}
		components = append(components, tensors.FromFlatDataAndDimensions(absmax, want[1].Dimensions...))
	} else {
		codes, err := readBytes(f, prefix+keyAbsmax, safetensors.U8, nb)
		if err != nil {
			return nil, err
		}
		nested, err := readScales(f, prefix+keyNestedAbsmax, want[2].Dim(0))
		if err != nil {
			return nil, err
		}
		dm := nf4.DynamicMap()
		if err := checkMap(f, prefix+keyNestedQuantMap, dm[:]); err != nil {
			return nil, err
		}
		codesT := tensors.FromShape(want[1])
		tensors.MustMutableFlatData(codesT, func(dst []uint8) { copy(dst, codes) })
		components = append(components, codesT, tensors.FromFlatDataAndDimensions(nested, len(nested)),
			tensors.FromScalar(float32(*qs.NestedOffset)))
	}
	w, err := nf4.FromTensors(shape, format, components...)
	if err != nil {
		return nil, err
	}
	l := &Linear4bit{Weight: w}
	if l.Bias, err = readBias(f, prefix, qs.Shape[0]); err != nil {
		return nil, err
	}
	return l, nil
}

// quantStateKeys are the keys of a quant state's JSON, as bitsandbytes writes them.
var quantStateKeys = []string{"quant_type", "blocksize", "dtype", "shape", "nested_blocksize", "nested_dtype", "nested_offset"}

// decodeQuantState decodes a quant state's JSON into qs. A key other than quantStateKeys, which
// bitsandbytes' QuantState.from_dict refuses, is an error naming it (encoding/json would ignore
// it, or match it to a field case-insensitively).
func decodeQuantState(data []byte, qs *QuantState) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return errors.Wrapf(safetensors.ErrCorrupt, "quant state %q is not JSON: %v", data, err)
	}
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		if !slices.Contains(quantStateKeys, key) {
			return errors.Wrapf(safetensors.ErrCorrupt, "quant state key %q; accepted: %s", key, strings.Join(quantStateKeys, ", "))
		}
	}
	if err := json.Unmarshal(data, qs); err != nil {
		return errors.Wrapf(safetensors.ErrCorrupt, "quant state %q: %v", data, err)
	}
	return nil
}

// checkNested reports whether the quant state says the absmax are double-quantized: its three
// nested fields are all set, to bitsandbytes' values, or none is (and the file has no nested
// absmax).
func checkNested(f *safetensors.File, prefix string, qs QuantState) (bool, error) {
	_, hasNestedAbsmax := f.Info(prefix + keyNestedAbsmax)
	if qs.NestedOffset == nil && qs.NestedBlockSize == 0 && qs.NestedDType == "" && !hasNestedAbsmax {
		return false, nil
	}
	if qs.NestedOffset == nil {
		return false, errors.Errorf("quant state %s has no nested_offset, but the weight is double-quantized (nested_blocksize "+
			"%d, nested_dtype %q, tensor %q present: %v); accepted: nested_blocksize, nested_dtype and nested_offset together, "+
			"with the nested absmax", qs.JSON(), qs.NestedBlockSize, qs.NestedDType, prefix+keyNestedAbsmax, hasNestedAbsmax)
	}
	if qs.NestedBlockSize != nf4.NestedBlockSize || qs.NestedDType != "float32" {
		return false, errors.Errorf("quant state nested_blocksize %d, nested_dtype %q; accepted: %d, \"float32\"",
			qs.NestedBlockSize, qs.NestedDType, nf4.NestedBlockSize)
	}
	// The offset is a float32 (bitsandbytes' tensor, and the array's component): a finite float64
	// beyond float32's range would become ±Inf.
	if o := *qs.NestedOffset; math.IsNaN(o) || math.IsInf(float64(float32(o)), 0) {
		return false, errors.Errorf("quant state nested_offset %v; accepted: a finite float32", o)
	}
	return true, nil
}

// Tensors returns the layer's state dict as bitsandbytes' Linear4bit.state_dict() holds it, under
// prefix: weight (uint8 [(n+1)/2, 1]), absmax (float32, or uint8 codes with nested_absmax,
// nested_quant_map and the offset in the quant state), quant_map, the quant state JSON, bias.
// Written with WriteFile, a layer read by ReadLinear4bit gives back the file bitsandbytes saved.
//
// The weight must be a host array whose blocks are bitsandbytes' (nf4.Format.FlatBlocks, or
// blocks along the last axis of a weight whose last dimension is a multiple of the block size, or
// of one row); other NF4 arrays must be re-quantized (bnb.Quantize4bit of the dense weight), as
// must one with float64 absmax that float32, bitsandbytes' absmax dtype, does not hold exactly.
func (l *Linear4bit) Tensors(prefix string) ([]safetensors.Tensor, error) {
	out, err := l.tensors(prefix)
	return out, errors.WithMessagef(err, "bnb.Linear4bit.Tensors(prefix %q)", prefix)
}

func (l *Linear4bit) tensors(prefix string) ([]safetensors.Tensor, error) {
	w := l.Weight
	if w == nil {
		return nil, errors.New("no weight")
	}
	if w.IsDeleted() {
		return nil, errors.Wrapf(implicitarray.ErrDeleted, "weight %s", w)
	}
	shape, f := w.Shape(), w.Format()
	if !f.FlatBlocks && !rowBlocked(shape.Dimensions, f.BlockSize) {
		return nil, errors.Errorf("weight %s: blocks along rows of %d elements, padded per row, are not bitsandbytes' "+
			"flattened blocks; accepted: a last dimension that is a multiple of the block size, or FlatBlocks (re-quantize the "+
			"dense weight with bnb.Quantize4bit)", w, shape.Dim(-1))
	}
	components := w.Components()
	for _, c := range components {
		if !c.IsTensor() {
			return nil, errors.Errorf("weight %s holds graph nodes; accepted: a host array", w)
		}
	}
	dtypeStr, err := dtypeName(shape.DType)
	if err != nil {
		return nil, err
	}
	if err := checkBias(l.Bias, shape.Dim(0)); err != nil {
		return nil, err
	}
	n := shape.Size()
	var packed []byte
	components[0].Tensor().MustConstFlatData(func(flat any) { packed = slices.Clone(flat.([]uint8)[:(n+1)/2]) })
	qs := QuantState{QuantType: "nf4", BlockSize: f.BlockSize, DType: dtypeStr, Shape: slices.Clone(shape.Dimensions)}
	list := []safetensors.Tensor{{Name: prefix + keyWeight, DType: safetensors.U8, Shape: []int{(n + 1) / 2, 1}, Data: packed}}
	cb := codebookSlice()
	list = append(list, float32Tensor(prefix+keyQuantMap, cb))
	nb := (n + f.BlockSize - 1) / f.BlockSize
	if !f.DoubleQuant {
		absmax, err := float32Values(components[1].Tensor())
		if err != nil {
			return nil, err
		}
		if components[1].Tensor().DType() == dtypes.Float64 {
			for i, v := range tensors.MustCopyFlatData[float64](components[1].Tensor()) {
				if float64(absmax[i]) != v {
					return nil, errors.Errorf("weight %s: absmax %v of block %d is not a float32; accepted: absmax that float32 "+
						"holds exactly, as bitsandbytes stores them (re-quantize the dense weight with bnb.Quantize4bit)", w, v, i)
				}
			}
		}
		list = append(list, float32Tensor(prefix+keyAbsmax, absmax))
	} else {
		codes := tensors.MustCopyFlatData[uint8](components[1].Tensor())
		list = append(list, safetensors.Tensor{Name: prefix + keyAbsmax, DType: safetensors.U8, Shape: []int{nb}, Data: codes})
		list = append(list, float32Tensor(prefix+keyNestedAbsmax, tensors.MustCopyFlatData[float32](components[2].Tensor())))
		dm := nf4.DynamicMap()
		list = append(list, float32Tensor(prefix+keyNestedQuantMap, dm[:]))
		offset := float64(tensors.MustCopyFlatData[float32](components[3].Tensor())[0])
		qs.NestedBlockSize, qs.NestedDType, qs.NestedOffset = nf4.NestedBlockSize, "float32", &offset
	}
	state := qs.JSON()
	list = append(list, safetensors.Tensor{Name: prefix + keyQuantState, DType: safetensors.U8, Shape: []int{len(state)}, Data: state})
	return appendBias(list, prefix, l.Bias)
}

// codebookSlice is nf4.Codebook as a slice.
func codebookSlice() []float32 {
	cb := nf4.Codebook()
	return cb[:]
}

// float32Tensor is a float32 vector to write.
func float32Tensor(name string, values []float32) safetensors.Tensor {
	data := make([]byte, 4*len(values))
	for i, v := range values {
		bits := math.Float32bits(v)
		data[4*i], data[4*i+1], data[4*i+2], data[4*i+3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
	}
	return safetensors.Tensor{Name: name, DType: safetensors.F32, Shape: []int{len(values)}, Data: data}
}

// readBytes reads a tensor of dtype (one byte an element) and, when dims are given, that shape.
func readBytes(f *safetensors.File, name string, dtype safetensors.DType, dims ...int) ([]byte, error) {
	info, ok := f.Info(name)
	if !ok {
		return nil, errors.Wrapf(safetensors.ErrNotFound, "tensor %q", name)
	}
	if info.DType != dtype || (dims != nil && !slices.Equal(info.Shape, dims)) {
		want := fmt.Sprintf("%s%v", dtype, dims)
		if dims == nil {
			want = string(dtype)
		}
		return nil, errors.Errorf("tensor %s; accepted: %s", info, want)
	}
	return f.ReadBytes(name)
}

// readFloat32s reads a float32 vector of n elements.
func readFloat32s(f *safetensors.File, name string, n int) ([]float32, error) {
	data, err := readBytes(f, name, safetensors.F32, n)
	if err != nil {
		return nil, err
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(uint32(data[4*i]) | uint32(data[4*i+1])<<8 | uint32(data[4*i+2])<<16 | uint32(data[4*i+3])<<24)
	}
	return out, nil
}

// readScales reads a float32 vector of n absolute maxima (absmax, nested absmax, SCB): each must
// be finite and not negative, as bitsandbytes computes them, or the weight would decode to NaN,
// infinities or flipped signs.
func readScales(f *safetensors.File, name string, n int) ([]float32, error) {
	values, err := readFloat32s(f, name, n)
	if err != nil {
		return nil, err
	}
	for i, v := range values {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || v < 0 {
			return nil, errors.Wrapf(safetensors.ErrCorrupt, "tensor %q holds %v at index %d; accepted: finite absolute maxima (>= 0)",
				name, v, i)
		}
	}
	return values, nil
}

// checkMap requires the float32 map called name to hold exactly want.
func checkMap(f *safetensors.File, name string, want []float32) error {
	got, err := readFloat32s(f, name, len(want))
	if err != nil {
		return err
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return errors.Errorf("tensor %q differs from the expected map at %d (%v, want %v); accepted: bitsandbytes' NF4 and "+
				"dynamic maps", name, i, got[i], want[i])
		}
	}
	return nil
}

// readBias reads prefix+"bias" if present: a float vector of out elements.
func readBias(f *safetensors.File, prefix string, out int) (*tensors.Tensor, error) {
	info, ok := f.Info(prefix + keyBias)
	if !ok {
		return nil, nil
	}
	if dt, ok := info.DType.GoMLX(); !ok || !dt.IsFloat() || !slices.Equal(info.Shape, []int{out}) {
		return nil, errors.Errorf("bias %s; accepted: a float vector of %d (out features)", info, out)
	}
	return f.ReadTensor(prefix + keyBias)
}

// readLayer runs a layer's reader, its errors naming op and prefix.
func readLayer[L any](op string, f *safetensors.File, prefix string, read func(*safetensors.File, string) (*L, error)) (*L, error) {
	l, err := read(f, prefix)
	return l, errors.WithMessagef(err, "%s(prefix %q)", op, prefix)
}

// checkBias accepts what a layer of out features writes and reads back as its bias: nil, or a
// float vector of out elements.
func checkBias(bias *tensors.Tensor, out int) error {
	if bias == nil {
		return nil
	}
	if s := bias.Shape(); s.Rank() != 1 || s.Dim(0) != out || !s.DType.IsFloat() {
		return errors.Errorf("bias %s; accepted: nil or a float vector of %d (out features)", s, out)
	}
	return nil
}

// appendBias appends the bias, when there is one, to a layer's tensors.
func appendBias(list []safetensors.Tensor, prefix string, bias *tensors.Tensor) ([]safetensors.Tensor, error) {
	if bias == nil {
		return list, nil
	}
	b, err := safetensors.FromTensor(prefix+keyBias, bias)
	if err != nil {
		return nil, err
	}
	return append(list, b), nil
}
