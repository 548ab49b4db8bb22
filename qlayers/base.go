package qlayers

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/qarray"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
)

// KernelLayoutParam is the context parameter, in a layer's "dense" scope, that records how its
// kernel (float or quantized) is laid out: absent or "in_out" for Dense's (inputDim, outDim),
// "out_in" for torch's (outDim, inputDim) (a Linear's weight, as bitsandbytes stores it; the
// product contracts its last axis, y = x·Wᵀ). StoreBase sets it; LoRADense and MergeLoRA read it.
const KernelLayoutParam = "quanta_kernel_layout"

// KernelLayout is how a stored kernel is laid out.
type KernelLayout int

const (
	// InOut is Dense's kernel (inputDim, outDim): y = x·W.
	InOut KernelLayout = iota
	// OutIn is torch's Linear weight (outDim, inputDim): y = x·Wᵀ.
	OutIn
)

// String returns "in_out" or "out_in", the KernelLayoutParam values ("KernelLayout(N)" for
// another value, which no function accepts).
func (l KernelLayout) String() string {
	switch l {
	case InOut:
		return "in_out"
	case OutIn:
		return "out_in"
	}
	return fmt.Sprintf("KernelLayout(%d)", int(l))
}

// kernelLayout reads KernelLayoutParam in ctx's scope (the "dense" scope) for the graph-building
// functions: it panics with storedLayout's error.
func kernelLayout(ctx *context.Context) KernelLayout {
	l, err := storedLayout(ctx)
	if err != nil {
		panic(err)
	}
	return l
}

// storedLayout reads KernelLayoutParam in ctx's scope (the "dense" scope); a value other than
// "in_out" and "out_in" (e.g. from an edited checkpoint) is an error naming the parameter.
func storedLayout(ctx *context.Context) (KernelLayout, error) {
	if v, found := ctx.GetParam(KernelLayoutParam); found {
		if s, _ := v.(string); s == OutIn.String() {
			return OutIn, nil
		}
		if s, _ := v.(string); s != InOut.String() {
			return InOut, errors.Errorf("qlayers: parameter %s=%v in scope %q; accepted: %q or %q", KernelLayoutParam, v,
				ctx.Scope(), InOut, OutIn)
		}
	}
	return InOut, nil
}

// kernelShape is the logical shape of a kernel in layout l.
func (l KernelLayout) kernelShape(dtype shapes.Shape, inDim, outDim int) shapes.Shape {
	if l == OutIn {
		return shapes.Make(dtype.DType, outDim, inDim)
	}
	return shapes.Make(dtype.DType, inDim, outDim)
}

// contract returns x·W for a dense or quantized kernel w in layout l (x is (rows, inDim)).
func (l KernelLayout) contract(x *graph.Node, w implicitarray.Value) *graph.Node {
	axis := 0
	if l == OutIn {
		axis = 1
	}
	return implicitarray.Materialize(implicitarray.DotGeneral(x, []int{1}, nil, w, []int{axis}, nil))
}

// contractTransposed returns dy·Wᵀ for the kernel w in layout l (dy is (rows, outDim)): the
// gradient of contract with respect to x.
func (l KernelLayout) contractTransposed(dy *graph.Node, w implicitarray.Value) *graph.Node {
	axis := 1
	if l == OutIn {
		axis = 0
	}
	return implicitarray.Materialize(implicitarray.DotGeneral(dy, []int{1}, nil, w, []int{axis}, nil))
}

// baseTemplate returns a host-side template array for a kernel of shape in the stored format
// text (FormatParam), with strategy: the formats of formatString, plus the FlatBlocks NF4 formats
// of nf4.Format.String ("nf4/64/flat", "nf4-dq/64/flat") that StoreBase writes for bitsandbytes
// weights.
func baseTemplate(shape shapes.Shape, text string, strategy lowering.Strategy) (implicitarray.Array, error) {
	if rest, ok := strings.CutSuffix(text, "/flat"); ok {
		typeName, bs, _ := strings.Cut(rest, "/")
		blockSize, err := strconv.Atoi(bs)
		if (typeName != "nf4" && typeName != "nf4-dq") || err != nil {
			return nil, errors.Errorf("qlayers: parameter %s=%q is not a format; accepted: \"nf4/BLOCKSIZE/flat\", "+
				"\"nf4-dq/BLOCKSIZE/flat\" or a format QuantizeContext writes", FormatParam, text)
		}
		f := nf4.Format{BlockSize: blockSize, FlatBlocks: true, DoubleQuant: typeName == "nf4-dq"}
		if err := f.Validate(shape); err != nil { // before the template's components are sized by it
			return nil, errors.WithMessagef(err, "qlayers: parameter %s=%q", FormatParam, text)
		}
		return nf4Template(shape, f, shape.DType, strategy)
	}
	cfg, err := parseFormat(text)
	if err != nil {
		return nil, errors.WithMessagef(err, "qlayers: parameter %s=%q is not a format", FormatParam, text)
	}
	cfg.Strategy = strategy
	return template(shape, cfg)
}

// nf4Template returns a host-side template NF4 array of logical shape in format f (valid for
// shape) with its absmax in scaleDType (ignored with DoubleQuant), with strategy; cached as
// template's arrays.
func nf4Template(shape shapes.Shape, f nf4.Format, scaleDType dtypes.DType, strategy lowering.Strategy) (implicitarray.Array, error) {
	return cachedTemplate(fmt.Sprintf("%s %s absmax=%s strategy=%s", shape, f, scaleDType, strategy), func() (implicitarray.Array, error) {
		var comps []*tensors.Tensor
		for _, s := range nf4.ComponentShapes(shape, f, scaleDType) {
			comps = append(comps, tensors.FromShape(s))
		}
		a, err := nf4.FromTensors(shape, f, comps...)
		if err != nil {
			return nil, err
		}
		return a.WithStrategy(strategy), nil
	})
}

// int8Template returns the int8 template tmpl (host components) with its scale in scaleDType,
// materializing in tmpl's dtype, with tmpl's strategy; cached as template's arrays.
func int8Template(tmpl *qint8.Array, scaleDType dtypes.DType) (implicitarray.Array, error) {
	key := fmt.Sprintf("%s int8 axes=%v scale=%s strategy=%s", tmpl.Shape(), tmpl.Axes(), scaleDType, tmpl.Strategy())
	return cachedTemplate(key, func() (implicitarray.Array, error) {
		scale := tensors.FromShape(shapes.Make(scaleDType, tmpl.Scale().Shape().Dimensions...))
		a, err := qint8.New(tmpl.Weight(), implicitarray.TensorComponent(scale), tmpl.DType(), tmpl.Axes()...)
		if err != nil {
			return nil, err
		}
		return a.WithStrategy(tmpl.Strategy()), nil
	})
}

// arrayFormat returns the FormatParam text of a quantized array StoreBase accepts: an NF4 array
// (any nf4.Format) or an int8 array quantized along its last axis.
func arrayFormat(w implicitarray.Array) (string, error) {
	switch a := w.(type) {
	case *nf4.Array:
		return a.Format().String(), nil
	case *qint8.Array:
		if slices.Equal(a.Axes(), []int{a.Shape().Rank() - 1}) {
			return "int8", nil
		}
	}
	return "", errors.Errorf("array %s; accepted: an *nf4.Array, or an *int8.Array quantized along its last axis", w)
}

// StoreBase stores a quantized kernel w, and its bias when not nil, as the frozen base of the
// layer whose scope is scope (the scope LoRADense or Dense is called in; the variables go to its
// "dense" sub-scope): the components as "weights.q0", ... (non-trainable), the format in
// FormatParam and the layout in KernelLayoutParam. With layout OutIn, w is torch's (outDim,
// inputDim), e.g. a bitsandbytes Linear4bit weight as bnb.ReadLinear4bit returns it, kept as it
// is (no re-quantization, FlatBlocks included); LoRADense then computes x·Wᵀ. The context's
// variables hold w's component tensors themselves (a base is large: no copy is made), as GoMLX
// variables hold the tensors they are given: Delete w, or finalize its tensors, only with the
// context.
//
// w must be a host array: an *nf4.Array or an *int8.Array quantized along its last axis. It
// returns an error, storing nothing, for a nil context, another array, a deleted one (wrapping
// implicitarray.ErrDeleted), a layout other than InOut and OutIn, a kernel that is not rank 2, a
// bias whose size is not outDim, or a scope that already holds a kernel.
func StoreBase(ctx *context.Context, scope string, w implicitarray.Array, bias *tensors.Tensor, layout KernelLayout) error {
	if ctx == nil {
		return errors.New("qlayers.StoreBase: nil context")
	}
	if w == nil {
		return errors.New("qlayers.StoreBase: nil array")
	}
	if qarray.Deleted(w) {
		return errors.Wrapf(implicitarray.ErrDeleted, "qlayers.StoreBase(%q): array %s", scope, w)
	}
	if layout != InOut && layout != OutIn {
		return errors.Errorf("qlayers.StoreBase(%q): layout %s; accepted: InOut or OutIn", scope, layout)
	}
	format, err := arrayFormat(w)
	if err != nil {
		return errors.WithMessagef(err, "qlayers.StoreBase(%q)", scope)
	}
	shape := w.Shape()
	if shape.Rank() != 2 {
		return errors.Errorf("qlayers.StoreBase(%q): kernel %s; accepted: rank 2", scope, shape)
	}
	outDim := shape.Dim(1)
	if layout == OutIn {
		outDim = shape.Dim(0)
	}
	if bias != nil && (bias.Shape().Rank() != 1 || bias.Shape().Dim(0) != outDim || !bias.DType().IsFloat()) {
		return errors.Errorf("qlayers.StoreBase(%q): bias %s for kernel %s (%s); accepted: a float vector of %d", scope,
			bias.Shape(), shape, layout, outDim)
	}
	comps := w.Components()
	for _, c := range comps {
		if !c.IsTensor() {
			return errors.Errorf("qlayers.StoreBase(%q): %s holds graph nodes; accepted: a host array", scope, w)
		}
	}
	dense := ctx.InAbsPath(scope).In(Scope).Checked(false)
	if dense.GetVariable(WeightsName) != nil || len(storedComponents(dense)) > 0 {
		return errors.Errorf("qlayers.StoreBase(%q): the scope already holds a kernel; accepted: a scope without one", scope)
	}
	for i, c := range comps {
		dense.VariableWithValue(componentName(i), c.Tensor()).SetTrainable(false)
	}
	if bias != nil {
		dense.VariableWithValue(BiasesName, bias).SetTrainable(false)
	}
	dense.SetParam(FormatParam, format)
	dense.SetParam(KernelLayoutParam, layout.String())
	return nil
}

// Base returns the stored quantized kernel of the layer whose scope is scope (as StoreBase or
// QuantizeContext stored it), of inDim inputs and outDim outputs, as a host array in its layout
// (float32 materialization dtype, or the kernel's for NF4's absmax and int8's scale stored in
// another float dtype): for exporting a base, e.g. with package bnb after MergeLoRA re-quantized
// it. The array's components are the context's variable tensors themselves (no copy of a large
// base): Deleting it finalizes the stored kernel too. It returns an error for a nil context, if
// the scope holds no quantized kernel, or if its components do not fit the recorded format and
// dimensions.
func Base(ctx *context.Context, scope string, inDim, outDim int) (implicitarray.Array, KernelLayout, error) {
	if ctx == nil {
		return nil, InOut, errors.New("qlayers.Base: nil context")
	}
	if inDim < 1 || outDim < 1 {
		return nil, InOut, errors.Errorf("qlayers.Base(%q): dimensions %d, %d; accepted: positive", scope, inDim, outDim)
	}
	dense := ctx.InAbsPath(scope).In(Scope).Checked(false)
	stored := storedComponents(dense)
	if len(stored) == 0 {
		return nil, InOut, errors.Errorf("qlayers.Base(%q): no quantized kernel (%s0, ...) in scope %q", scope, ComponentPrefix,
			dense.Scope())
	}
	layout, err := storedLayout(dense)
	if err != nil {
		return nil, InOut, errors.WithMessagef(err, "qlayers.Base(%q)", scope)
	}
	text, _ := dense.GetParam(FormatParam)
	format, ok := text.(string)
	if !ok {
		return nil, InOut, errors.Errorf("qlayers.Base(%q): parameter %s=%v is not a format", scope, FormatParam, text)
	}
	values := make([]implicitarray.Component, len(stored))
	for i, v := range stored {
		t, err := v.Value()
		if err != nil {
			return nil, InOut, errors.WithMessagef(err, "qlayers.Base(%q): reading %s", scope, v.Name())
		}
		if !t.Ok() { // an array Base returned was deleted, and with it the stored kernel
			return nil, InOut, errors.Wrapf(implicitarray.ErrDeleted, "qlayers.Base(%q): stored %s", scope, v.Name())
		}
		values[i] = implicitarray.TensorComponent(t)
	}
	// float32, or the dtype of a kernel whose scales are stored in it (NF4's absmax, int8's scale).
	var shape shapes.Shape
	var want []implicitarray.Component
	for _, dtype := range []dtypes.DType{dtypes.Float32, floatDType(values)} {
		shape = layout.kernelShape(shapes.Make(dtype), inDim, outDim)
		tmpl, err := baseTemplate(shape, format, lowering.Auto)
		if err != nil {
			return nil, InOut, errors.WithMessagef(err, "qlayers.Base(%q)", scope)
		}
		if want = tmpl.Components(); componentsFit(values, want) {
			return tmpl.WithComponents(values), layout, nil
		}
	}
	return nil, InOut, errors.Errorf("qlayers.Base(%q): components %s do not fit a %s kernel %s (%s)", scope,
		describeComponents(values), format, shape, describeComponents(want))
}

// floatDType is the dtype of the first float component of cs, float32 if none is.
func floatDType(cs []implicitarray.Component) dtypes.DType {
	for _, c := range cs {
		if c.Shape().DType.IsFloat() {
			return c.Shape().DType
		}
	}
	return dtypes.Float32
}

// componentsFit reports whether the components cs have the shapes of want.
func componentsFit(cs, want []implicitarray.Component) bool {
	return slices.EqualFunc(cs, want, func(c, w implicitarray.Component) bool { return c.Shape().Equal(w.Shape()) })
}
