package nf4

import (
	"fmt"
	"math"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/hostdata"
	"github.com/quanta-ml/quanta/internal/qarray"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/sharding"
)

// Format is how an Array stores its codes and block scales.
type Format struct {
	// BlockSize is the number of elements per block (even, positive).
	BlockSize int
	// FlatBlocks: the blocks run over the flattened array (row-major), across rows, as
	// bitsandbytes stores 4-bit weights; packed is (numBlocks, blockSize/2) and the scales
	// (numBlocks). Otherwise (the default) they run along the last axis of each row, each row
	// padded to whole blocks.
	FlatBlocks bool
	// DoubleQuant: the block scales are double-quantized (QLoRA; bitsandbytes'
	// compress_statistics): uint8 codes of DynamicMap in place of the float absmax, plus a float32
	// second-level absmax per NestedBlockSize codes of the flattened codes and a float32 offset.
	DoubleQuant bool
}

// String returns e.g. "nf4/64", "nf4-dq/64" or "nf4-dq/64/flat".
func (f Format) String() string {
	s := "nf4"
	if f.DoubleQuant {
		s += "-dq"
	}
	s += fmt.Sprintf("/%d", f.BlockSize)
	if f.FlatBlocks {
		s += "/flat"
	}
	return s
}

// Validate returns an error for a block size f cannot have for an array of shape: one that is
// not even and positive, or (blocks along the last axis) longer than MaxBlockSize of the last
// axis, or (FlatBlocks) longer than MaxFlatBlockSize and than MaxBlockSize of the array's size.
// ComponentShapes sizes the components by the block size: check it first when it comes from a
// file.
func (f Format) Validate(shape shapes.Shape) error {
	if shape.Rank() == 0 {
		return errors.Errorf("nf4 format %s for %s; accepted: rank >= 1 (blocks run along the last axis)", f, shape)
	}
	if f.FlatBlocks {
		return checkFlatBlockSize(f.BlockSize, shape)
	}
	return checkBlockSize(f.BlockSize, shape)
}

// Format returns the array's storage format.
func (a *Array) Format() Format {
	return Format{BlockSize: a.blockSize, FlatBlocks: a.flat, DoubleQuant: a.doubleQuant}
}

// DoubleQuantized reports whether the block scales are double-quantized (Format.DoubleQuant).
func (a *Array) DoubleQuantized() bool { return a.doubleQuant }

// Component indices of a double-quantized array (after packed and the absmax codes).
const (
	nestedAbsmaxIndex = absmaxIndex + 1 + iota
	offsetIndex
)

// NestedAbsmax is the second-level absmax of a double-quantized array: float32
// (ceil(numScales/NestedBlockSize)). It panics for an array without DoubleQuant.
func (a *Array) NestedAbsmax() implicitarray.Component {
	a.mustBeDoubleQuantized("NestedAbsmax")
	return qarray.Component(&a.Base, nestedAbsmaxIndex)
}

// Offset is the offset of a double-quantized array's scales: a float32 scalar (the mean of the
// absmax before their quantization). It panics for an array without DoubleQuant.
func (a *Array) Offset() implicitarray.Component {
	a.mustBeDoubleQuantized("Offset")
	return qarray.Component(&a.Base, offsetIndex)
}

func (a *Array) mustBeDoubleQuantized(what string) {
	if !a.doubleQuant {
		panic(errors.Errorf("nf4.Array.%s of %s: the array is not double-quantized (Format.DoubleQuant)", what, a))
	}
}

// ComponentShapes returns the shapes of the components of an array of the given logical shape in
// format f (valid for it: Validate), in order: packed, absmax (scaleDType; uint8 codes with DoubleQuant), and with
// DoubleQuant the nested absmax and the offset (float32).
func ComponentShapes(shape shapes.Shape, f Format, scaleDType dtypes.DType) []shapes.Shape {
	var packed, scales shapes.Shape
	if f.FlatBlocks {
		nb := numBlocks(shape.Size(), f.BlockSize)
		packed = shapes.Make(dtypes.Uint8, nb, f.BlockSize/2)
		scales = shapes.Make(scaleDType, nb)
	} else {
		packed = packedShape(shape, f.BlockSize)
		scales = absmaxShape(shape, f.BlockSize, scaleDType)
	}
	if !f.DoubleQuant {
		return []shapes.Shape{packed, scales}
	}
	scales.DType = dtypes.Uint8
	nested := shapes.Make(dtypes.Float32, numBlocks(scales.Size(), NestedBlockSize))
	return []shapes.Shape{packed, scales, nested, shapes.Make(dtypes.Float32)}
}

// FromTensors assembles a host-side Array of logical shape (whose dtype is the materialization
// dtype, a float dtype) in format f from stored components (e.g. read from a checkpoint), in the
// order of ComponentShapes; the absmax may be in any float dtype (uint8 codes with DoubleQuant).
// The array owns the tensors. It returns an error, building nothing, when a component's shape or
// dtype does not fit.
func FromTensors(shape shapes.Shape, f Format, components ...*tensors.Tensor) (*Array, error) {
	if err := checkQuantizable(shape); err != nil {
		return nil, errors.WithMessage(err, "nf4.FromTensors: logical shape")
	}
	if err := f.Validate(shape); err != nil {
		return nil, errors.WithMessage(err, "nf4.FromTensors")
	}
	scaleDType := dtypes.Float32
	if len(components) > absmaxIndex && components[absmaxIndex] != nil && !f.DoubleQuant {
		scaleDType = components[absmaxIndex].DType()
	}
	want := ComponentShapes(shape, f, scaleDType)
	ok := len(components) == len(want) && (f.DoubleQuant || scaleDType.IsFloat() && !scaleDType.IsComplex())
	for i := 0; ok && i < len(want); i++ {
		ok = components[i] != nil && components[i].Shape().Equal(want[i])
	}
	if !ok {
		got := make([]string, len(components))
		for i, c := range components {
			got[i] = "nil"
			if c != nil {
				got[i] = c.Shape().String()
			}
		}
		return nil, errors.Errorf("nf4.FromTensors: components %v for a %s array %s; accepted: %v (the absmax in a float dtype)",
			got, f, shape, want)
	}
	cs := make([]implicitarray.Component, len(components))
	for i, t := range components {
		cs[i] = implicitarray.TensorComponent(t)
	}
	return &Array{Base: qarray.New(typeName, shape, cs...), blockSize: f.BlockSize, flat: f.FlatBlocks, doubleQuant: f.DoubleQuant}, nil
}

// DoubleQuantize returns a host-side array with a's codes and its absmax double-quantized, byte
// for byte as bitsandbytes' quantize_4bit(..., compress_statistics=True) does on CPU given the
// same absmax: the absmax in float32 (exact for float32, bfloat16 and float16 absmax), offset =
// their mean (torch's float32 mean on one thread), absmax − offset quantized with DynamicMap in
// blocks of NestedBlockSize consecutive absmax of the flattened absmax, across rows (see
// quantizeDynamic). a is left as it is (the result holds a copy of its packed codes). The result
// keeps a's mesh, replicated (the only spec it takes).
//
// It returns an error for an array that is already double-quantized, holds graph nodes, or was
// deleted.
func DoubleQuantize(a *Array) (*Array, error) {
	if a == nil {
		return nil, errors.New("nf4.DoubleQuantize: nil array")
	}
	if a.IsDeleted() {
		return nil, errors.Wrapf(implicitarray.ErrDeleted, "nf4.DoubleQuantize of %s", a)
	}
	if a.doubleQuant {
		return nil, errors.Errorf("nf4.DoubleQuantize of %s: already double-quantized", a)
	}
	packed, absmax := a.Packed(), a.Absmax()
	if !packed.IsTensor() || !absmax.IsTensor() {
		return nil, errors.Errorf("nf4.DoubleQuantize of %s: components are graph nodes; accepted: a host array (in a graph use "+
			"DoubleQuantizeNode)", a)
	}
	values, ok := hostdata.Float32s(absmax.Tensor())
	if !ok {
		return nil, errors.Errorf("nf4.DoubleQuantize of %s: absmax %s; accepted: a float dtype", a, absmax.Shape())
	}
	offset := torchMeanF32(values)
	centred := make([]float32, len(values))
	for i, v := range values {
		centred[i] = v - offset
	}
	codes, nested := quantizeDynamic(centred, NestedBlockSize)
	finite := !math.IsInf(float64(offset), 0) && !math.IsNaN(float64(offset))
	for _, v := range nested {
		finite = finite && !math.IsInf(float64(v), 0) && !math.IsNaN(float64(v))
	}
	if !finite {
		// The float32 mean of the absmax (torch's, as bitsandbytes takes it) overflows: every
		// decoded absmax would be NaN, and the whole array would materialize as NaN.
		return nil, errors.Errorf("nf4.DoubleQuantize of %s: the mean of the %d absmax (largest %g) overflows float32 "+
			"(offset %g); accepted: absmax whose float32 sum is finite (or no double quantization)", a, len(values),
			slices.Max(values), offset)
	}
	f := a.Format()
	f.DoubleQuant = true
	want := ComponentShapes(a.Shape(), f, dtypes.Float32)
	packedCopy := tensors.FromShape(want[packedIndex])
	tensors.MustMutableFlatData(packedCopy, func(dst []uint8) {
		packed.Tensor().MustConstFlatData(func(src any) { copy(dst, src.([]uint8)) })
	})
	codesT := tensors.FromShape(want[absmaxIndex])
	tensors.MustMutableFlatData(codesT, func(dst []uint8) { copy(dst, codes) })
	out, err := FromTensors(a.Shape(), f, packedCopy, codesT, tensors.FromFlatDataAndDimensions(nested, len(nested)),
		tensors.FromScalar(offset))
	if err != nil {
		return nil, err
	}
	// A double-quantized array takes only a replicated spec (its nested scales run across rows).
	return out.WithStrategy(a.Strategy()).withPlacement(qarray.ReplicatedPlacement(&a.Base)), nil
}

// MustDoubleQuantize is DoubleQuantize that panics on error.
func MustDoubleQuantize(a *Array) *Array {
	out, err := DoubleQuantize(a)
	if err != nil {
		panic(err)
	}
	return out
}

// DoubleQuantizeNode is DoubleQuantize inside a graph, for arrays with node components (e.g.
// from QuantizeNode): the same rule, except that the offset is XLA's float32 mean, whose last bits
// may differ from torch's. The result keeps a's mesh, replicated (the only spec it takes). It
// panics for an array already double-quantized or with host tensors.
func DoubleQuantizeNode(a *Array) *Array {
	if a == nil {
		panic(errors.New("nf4.DoubleQuantizeNode: nil array"))
	}
	if a.doubleQuant {
		panic(errors.Errorf("nf4.DoubleQuantizeNode of %s: already double-quantized", a))
	}
	packed, absmax := a.Packed(), a.Absmax()
	if !packed.IsNode() || !absmax.IsNode() {
		panic(errors.Errorf("nf4.DoubleQuantizeNode of %s: components are host tensors; accepted: graph nodes (on the host use "+
			"DoubleQuantize)", a))
	}
	scales := graph.ConvertDType(absmax.Node(), dtypes.Float32)
	g := scales.Graph()
	dims := scales.Shape().Dimensions
	n := scales.Shape().Size()
	flat := graph.Reshape(scales, n)
	offset := graph.ReduceAllMean(flat)
	centred := graph.Sub(flat, offset)
	nb := numBlocks(n, NestedBlockSize)
	if pad := nb*NestedBlockSize - n; pad > 0 {
		centred = graph.Concatenate([]*graph.Node{centred, graph.Zeros(g, shapes.Make(dtypes.Float32, pad))}, 0)
	}
	blocks := graph.Reshape(centred, nb, NestedBlockSize)
	nested := graph.ReduceMax(graph.Abs(blocks), -1) // (nb)
	zero := graph.Equal(nested, graph.ScalarZero(g, dtypes.Float32))
	inv := graph.Div(graph.OnesLike(nested), graph.Where(zero, graph.OnesLike(nested), nested))
	x := graph.ClipScalar(graph.Mul(blocks, graph.InsertAxes(inv, -1)), -1, 1)
	scalar := func(v float64) *graph.Node { return graph.Scalar(g, dtypes.Float32, v) }
	bin := graph.Add(graph.Mul(graph.Mul(graph.Add(x, scalar(1)), scalar(0.5)), scalar(dynamicLUTSize-1)), scalar(0.5))
	idx := graph.Reshape(graph.ConvertDType(bin, dtypes.Int32), nb*NestedBlockSize, 1)
	codes := graph.Gather(graph.Const(g, dynamicLUT()), idx) // (nb·256)
	codes = graph.Where(graph.Reshape(graph.BroadcastToDims(graph.InsertAxes(zero, -1), nb, NestedBlockSize), nb*NestedBlockSize),
		graph.ZerosLike(codes), codes)
	codes = graph.Reshape(graph.SliceAxis(codes, 0, graph.AxisRange(0, n)), dims...)
	base := qarray.New(typeName, a.Shape(), implicitarray.NodeComponent(packed.Node()), implicitarray.NodeComponent(codes),
		implicitarray.NodeComponent(nested), implicitarray.NodeComponent(offset))
	// A double-quantized array takes only a replicated spec (its nested scales run across rows).
	base = qarray.WithPlacement(qarray.WithStrategy(base, a.Strategy()), qarray.ReplicatedPlacement(&a.Base))
	return &Array{Base: base, blockSize: a.blockSize, flat: a.flat, doubleQuant: true}
}

// nestedScales returns the lowering view of a double-quantized array's scales.
func (a *Array) nestedScales() lowering.NestedScales {
	return lowering.NestedScales{Codes: qarray.Node(&a.Base, absmaxIndex), Absmax: qarray.Node(&a.Base, nestedAbsmaxIndex),
		Offset: qarray.Node(&a.Base, offsetIndex), Map: DynamicMap(), BlockSize: NestedBlockSize}
}

// storedLayout is Layout for the FlatBlocks and DoubleQuant formats.
func (a *Array) storedLayout() lowering.Layout {
	packed := qarray.Node(&a.Base, packedIndex)
	if a.flat {
		w := lowering.FlatBlockwise4{Packed: packed, Codebook: codebook, Dims: slices.Clone(a.Shape().Dimensions)}
		if a.doubleQuant {
			nested := a.nestedScales()
			w.Nested = &nested
		} else {
			w.Scales = qarray.Node(&a.Base, absmaxIndex)
		}
		return w
	}
	return lowering.Blockwise4DQ{Packed: packed, Scales: a.nestedScales(), Codebook: codebook, Dim: a.Shape().Dim(-1)}
}

// withStoredComponents is WithComponents for the FlatBlocks and DoubleQuant formats.
func (a *Array) withStoredComponents(components []implicitarray.Component) implicitarray.Array {
	qarray.CheckComponents(&a.Base, components, qarray.ComponentShapes(&a.Base)...)
	return a.with(qarray.WithComponents(a.Base, nil, components...))
}

// storedComponentSpecs is ComponentSpecs for the FlatBlocks and DoubleQuant formats: their
// scales (or second-level scales) run across rows, so only a replicated array is accepted.
func (a *Array) storedComponentSpecs(m *sharding.Mesh, logical sharding.PartitionSpec) ([]sharding.PartitionSpec, error) {
	n, err := sharding.NumShards(m, logical, a.Shape().Rank())
	if err != nil {
		return nil, errors.WithMessage(err, "nf4.Array.ComponentSpecs")
	}
	for axis, shards := range n {
		if shards > 1 {
			return nil, errors.Errorf("nf4.Array.ComponentSpecs: %s with spec %s shards axis %d; accepted: a replicated spec "+
				"(a %s array's scales run across rows)", a, logical, axis, a.Format())
		}
	}
	return make([]sharding.PartitionSpec, len(a.Components())), nil
}

// formatMetadata and formatDescription add the non-default format fields to Metadata and String.
func (a *Array) formatMetadata() string {
	return word(a.flat, " flatBlocks") + word(a.doubleQuant, " doubleQuant")
}

func (a *Array) formatDescription() string {
	return word(a.doubleQuant, " double-quantized") + word(a.flat, " flat")
}

// word returns w if set, else "".
func word(set bool, w string) string {
	if set {
		return w
	}
	return ""
}
