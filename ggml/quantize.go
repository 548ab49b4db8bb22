package ggml

import (
	"io"
	"math"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/hostdata"
)

// Quantize stores t, a float tensor whose last axis is a multiple of typ's block size, in block
// type typ, with the bytes of ggml's reference quantizer (gguf.Quantize on the values as float32,
// all rows in one call). The array materializes in t's dtype. It returns an error, and builds
// nothing, for a type that is not a block type, a non-float, scalar or empty tensor, a last axis
// that is not a multiple of the block size, or a NaN or infinite value (float64 values beyond
// float32's range included: they would quantize as infinities).
func Quantize(t *tensors.Tensor, typ gguf.Type) (*Array, error) {
	if t == nil {
		return nil, errors.New("ggml.Quantize: nil tensor")
	}
	shape := t.Shape()
	if err := checkDims(typ, shape.Dimensions); err != nil {
		return nil, errors.WithMessagef(err, "ggml.Quantize(%s)", shape)
	}
	values, ok := hostdata.Float32s(t)
	if !ok {
		return nil, errors.Errorf("ggml.Quantize: input %s has dtype %s; accepted: float32, float64, bfloat16 or float16", shape, shape.DType)
	}
	if err := checkFloat32Range(t, values); err != nil {
		return nil, errors.WithMessagef(err, "ggml.Quantize(%s)", shape)
	}
	blocks := tensors.FromShape(BlocksShape(typ, shape.Dimensions...))
	var err error
	if accessErr := blocks.MutableBytes(func(data []byte) { err = gguf.Quantize(typ, values, data) }); accessErr != nil {
		err = accessErr
	}
	if err != nil {
		_ = blocks.FinalizeAll()
		return nil, errors.WithMessagef(err, "ggml.Quantize(%s)", shape)
	}
	return newArray(implicitarray.TensorComponent(blocks), typ, shape), nil
}

// MustQuantize is Quantize that panics on error.
func MustQuantize(t *tensors.Tensor, typ gguf.Type) *Array {
	a, err := Quantize(t, typ)
	if err != nil {
		panic(err)
	}
	return a
}

// FromBytes returns the array of block type typ with logical dimensions dims (row-major, the last
// a multiple of the block size) stored in data, which must hold exactly its blocks (as a GGUF file
// stores a tensor whose GGML dims are dims reversed). The bytes are copied; the array
// materializes in float32.
func FromBytes(typ gguf.Type, dims []int, data []byte) (*Array, error) {
	if err := checkDims(typ, dims); err != nil {
		return nil, errors.WithMessage(err, "ggml.FromBytes")
	}
	// The size is computed without overflow, and checked against the bytes given before anything
	// is allocated.
	elements := 1
	for _, d := range dims {
		if d > math.MaxInt/typ.BlockBytes()/elements {
			return nil, errors.Errorf("ggml.FromBytes: %s %v has more elements than an int counts; accepted: %d bytes of blocks",
				typ, dims, len(data))
		}
		elements *= d
	}
	if need := elements / typ.BlockSize() * typ.BlockBytes(); len(data) != need {
		return nil, errors.Errorf("ggml.FromBytes: %d bytes for %s %v; accepted: %d bytes (%d per %d elements)",
			len(data), typ, dims, need, typ.BlockBytes(), typ.BlockSize())
	}
	shape := BlocksShape(typ, dims...)
	blocks := tensors.FromShape(shape)
	if err := blocks.MutableBytes(func(b []byte) { copy(b, data) }); err != nil {
		return nil, errors.WithMessage(err, "ggml.FromBytes")
	}
	return newArray(implicitarray.TensorComponent(blocks), typ, shapes.Make(dtypes.Float32, dims...)), nil
}

// Read returns the tensor called name of a GGUF file as an array of its own block type, reading
// its bytes straight into the array's storage: the shape is the tensor's row-major Shape, the
// materialization dtype float32. A tensor of another type (F32, F16, ...) is an error wrapping
// gguf.ErrUnsupported: read it with File.ReadFloat32. A block whose scale is NaN or infinite is an
// error wrapping gguf.ErrCorrupt (gguf.CheckScales), as File.DecodeInto reports it.
func Read(f *gguf.File, name string) (*Array, error) {
	info, ok := f.Tensor(name)
	if !ok {
		return nil, errors.Wrapf(gguf.ErrNotFound, "ggml.Read: tensor %q", name)
	}
	if !info.Type.IsBlock() {
		return nil, errors.Wrapf(gguf.ErrUnsupported, "ggml.Read: tensor %s; accepted: a block type (%v); read others with "+
			"File.ReadFloat32", info, gguf.BlockTypes())
	}
	dims := info.Shape()
	if err := checkDims(info.Type, dims); err != nil {
		return nil, errors.WithMessagef(err, "ggml.Read: tensor %s", info)
	}
	shape := BlocksShape(info.Type, dims...)
	if int64(shape.Size()) != info.Bytes {
		return nil, errors.Errorf("ggml.Read: tensor %s holds %d bytes; its dims need %d", info, info.Bytes, shape.Size())
	}
	r, err := f.TensorReader(name) // checks that the reader holds the tensor before it is allocated
	if err != nil {
		return nil, errors.WithMessage(err, "ggml.Read")
	}
	blocks := tensors.FromShape(shape)
	if accessErr := blocks.MutableBytes(func(b []byte) { _, err = io.ReadFull(r, b) }); accessErr != nil {
		err = accessErr
	}
	if err != nil {
		_ = blocks.FinalizeAll()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) { // the file was cut after it was opened
			return nil, errors.Wrapf(gguf.ErrCorrupt, "ggml.Read: tensor %s: reading %d bytes: %v", info, info.Bytes, err)
		}
		return nil, errors.WithMessagef(err, "ggml.Read: tensor %s: reading %d bytes", info, info.Bytes)
	}
	if accessErr := blocks.ConstBytes(func(b []byte) { err = gguf.CheckScales(info.Type, b) }); accessErr != nil {
		err = accessErr
	}
	if err != nil {
		_ = blocks.FinalizeAll()
		return nil, errors.WithMessagef(err, "ggml.Read: tensor %s", info)
	}
	return newArray(implicitarray.TensorComponent(blocks), info.Type, shapes.Make(dtypes.Float32, dims...)), nil
}

// checkFloat32Range returns an error naming the first finite float64 value of t that rounds to an
// infinity in values (t as float32): gguf.Quantize would report it as an infinite input.
func checkFloat32Range(t *tensors.Tensor, values []float32) error {
	if t.DType() != dtypes.Float64 {
		return nil
	}
	var err error
	if accessErr := t.ConstFlatData(func(flat any) {
		for i, v := range flat.([]float64) {
			if math.IsInf(float64(values[i]), 0) && !math.IsInf(v, 0) {
				err = errors.Errorf("element %d is %g, beyond float32's range; accepted: finite values of magnitude up to %g",
					i, v, math.MaxFloat32)
				return
			}
		}
	}); accessErr != nil {
		return accessErr
	}
	return err
}

// checkDims checks a block type and logical dimensions: rank >= 1, positive sizes, the last a
// multiple of the block size.
func checkDims(typ gguf.Type, dims []int) error {
	if !typ.IsBlock() {
		return errors.Errorf("type %s; accepted: a block type (%v)", typ, gguf.BlockTypes())
	}
	if len(dims) == 0 || slices.ContainsFunc(dims, func(d int) bool { return d <= 0 }) {
		return errors.Errorf("dimensions %v; accepted: rank >= 1, every dimension positive", dims)
	}
	if last := dims[len(dims)-1]; last%typ.BlockSize() != 0 {
		return errors.Errorf("last dimension %d is not a multiple of the %s block size %d; accepted: whole blocks per row",
			last, typ, typ.BlockSize())
	}
	return nil
}
