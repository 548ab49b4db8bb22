package qlayers

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
)

const (
	// Scope is the sub-scope Dense creates its variables in, as layers.Dense.
	Scope = "dense"

	// WeightsName is the float kernel variable, (inputDim, outDim), as layers.Dense's.
	WeightsName = "weights"

	// TransposedWeightsName is a float kernel stored transposed, (outDim, inputDim), as PyTorch
	// and GGUF files store a linear weight: a models.Quantizer stores a float kernel so under a
	// Skip rule in OutIn or a Keep rule. Dense and LoRADense do not read it; they refuse a scope
	// that holds it without WeightsName rather than create a fresh kernel beside it.
	TransposedWeightsName = "weights_t"

	// BiasesName is the bias variable, (outDim), as layers.Dense's.
	BiasesName = "biases"

	// ComponentPrefix starts the names of the stored components of a quantized kernel:
	// "weights.q0", "weights.q1", ... in the order of the format's Components().
	ComponentPrefix = WeightsName + ".q"

	// FormatParam is the context parameter, in the layer's scope, that records the format of the
	// stored components, e.g. "nf4/64" (type/block size). QuantizeContext sets it; checkpoints save
	// it with the other parameters.
	FormatParam = "quanta_format"
)

// Dense is a fully connected layer with a quantized kernel, a drop-in for layers.Dense (same scope
// and variable names, so a context trained with layers.Dense is read by Dense and vice versa):
// y = x · W + b over the last axis of x, in scope ctx.In("dense") with the float kernel "weights"
// (inputDim, outDim) and, if useBias, "biases" (outDim).
//
// What W is depends on the graph and on what the context holds:
//   - training (ctx.IsTraining(g)): W is the float kernel through the straight-through estimator —
//     the forward pass uses its quantized-then-materialized value, the gradient reaches the float
//     master weights unchanged (quantization-aware training). With components stored beside the
//     kept float kernel (Options.KeepFloat), the kernel is fake-quantized in the stored format, the
//     one inference uses;
//   - inference, with the components stored by QuantizeContext and no float kernel: W is the
//     implicit array rebuilt from them, and the product runs on the quantized array (package
//     lowering, with cfg.Strategy). The stored format (FormatParam) is authoritative; cfg supplies
//     it only when the parameter is missing (checkpoint loaded with ExcludeAllParams);
//   - inference with the float kernel kept beside stored components (Options.KeepFloat): the
//     float kernel is the source of truth, so training after QuantizeContext is never ignored: it
//     is quantized in the graph (quanta.QuantizeNode, the stored format) and the product runs on
//     that array;
//   - inference with only the float kernel: the fake-quantized forward, the same value training
//     sees, multiplied by lowering.DenseMatMul (quanta's float32 kernel for a few rows where the
//     backend has it).
//
// x must be a float tensor of rank >= 1; the kernel and biases take its dtype. Dense panics if
// cfg is invalid, if x is not accepted, if cfg is binary or ternary and x's last dimension is not a
// multiple of 4 while no components are stored (the format could never store the kernel), if stored
// components do not fit the format and shapes, or in training when QuantizeContext removed the
// float kernel.
func Dense(ctx *context.Context, x *graph.Node, useBias bool, outDim int, cfg quanta.Config) *graph.Node {
	checkDenseArgs("qlayers.Dense", x, outDim, "a float tensor (float32, float64, bfloat16, float16) of rank >= 1", cfg.Validate)
	shape := x.Shape()
	g := x.Graph()
	ctx = ctx.In(Scope)
	kernelShape := shapes.Make(shape.DType, shape.Dim(-1), outDim)

	flat := flattenRows(x)
	var y *graph.Node
	stored := storedComponents(ctx)
	if len(stored) == 0 && (cfg.Type == quanta.Binary || cfg.Type == quanta.Ternary) && shape.Dim(-1)%4 != 0 {
		// Training and the fake-quantized forward would run, but QuantizeContext could never store
		// the kernel in cfg's format: refuse the layer before it is trained.
		panic(errors.Errorf("qlayers.Dense in scope %q: input %s for a %s kernel %s; accepted: an input dimension that is a multiple "+
			"of 4 (binary and ternary kernels store 4 input rows a byte)", ctx.Scope(), shape, formatString(cfg), kernelShape))
	}
	switch {
	case ctx.IsTraining(g):
		if len(stored) > 0 && ctx.GetVariable(WeightsName) == nil {
			panic(errors.Errorf("qlayers.Dense in scope %q: training needs the float kernel %q, but the context holds only "+
				"quantized components (QuantizeContext with KeepFloat false removed it)", ctx.Scope(), WeightsName))
		}
		format := cfg
		if len(stored) > 0 {
			// More QAT after QuantizeContext (KeepFloat): train for the format inference uses.
			format = storedFormat(ctx, cfg)
		}
		y = graph.Dot(flat, fakeQuantize(floatKernel(ctx, g, kernelShape), format))
	case len(stored) > 0 && ctx.GetVariable(WeightsName) != nil:
		// The float kernel was kept (Options.KeepFloat) and may have been trained since: it is the
		// source of truth, quantized in the graph so the product stays fused.
		y = implicitarray.Materialize(implicitarray.MatMul(flat, quanta.QuantizeNode(floatKernel(ctx, g, kernelShape), storedFormat(ctx, cfg))))
	case len(stored) > 0:
		y = quantizedProduct(ctx, flat, stored, kernelShape, cfg)
	default:
		y = lowering.DenseMatMul(flat, fakeQuantize(floatKernel(ctx, g, kernelShape), cfg))
	}
	y = unflattenRows(y, shape)
	if useBias {
		b := ctx.VariableWithShape(BiasesName, biasShape(ctx, shape.DType, outDim)).ValueGraph(g)
		y = graph.Add(y, graph.ExpandLeftToRank(graph.ConvertDType(b, shape.DType), y.Rank()))
	}
	return y
}

// biasShape is the shape of the bias (outDim) of a layer on an input of dtype: in the dtype of a
// float bias the scope holds, which the layer converts to dtype (StoreBase keeps a bias, e.g. a
// bitsandbytes layer's float32 one, in its own dtype).
func biasShape(ctx *context.Context, dtype dtypes.DType, outDim int) shapes.Shape {
	if b := ctx.GetVariable(BiasesName); b != nil && b.Shape().DType.IsFloat() {
		dtype = b.Shape().DType
	}
	return shapes.Make(dtype, outDim)
}

// checkDenseArgs panics, naming op, for a nil x, a configuration that does not validate, an input
// that is not a float tensor of rank >= 1 (the message says accepted) or an outDim < 1.
func checkDenseArgs(op string, x *graph.Node, outDim int, accepted string, validate ...func() error) {
	if x == nil {
		panic(errors.Errorf("%s: nil input", op))
	}
	for _, v := range validate {
		if err := v(); err != nil {
			panic(errors.WithMessagef(err, "%s of %s", op, x.Shape()))
		}
	}
	shape := x.Shape()
	if shape.Rank() < 1 || !shape.DType.IsFloat() {
		panic(errors.Errorf("%s: input %s; accepted: %s", op, shape, accepted))
	}
	if outDim < 1 {
		panic(errors.Errorf("%s: outDim %d for input %s; accepted: a positive dimension", op, outDim, shape))
	}
}

// flattenRows returns x as (rows, inDim), the operand of the layers' products.
func flattenRows(x *graph.Node) *graph.Node {
	if x.Rank() == 2 {
		return x
	}
	return graph.Reshape(x, -1, x.Shape().Dim(-1))
}

// unflattenRows gives a product y (rows, outDim) the leading axes of the input shape back.
func unflattenRows(y *graph.Node, shape shapes.Shape) *graph.Node {
	if shape.Rank() == 2 {
		return y
	}
	return graph.Reshape(y, append(shape.Clone().Dimensions[:shape.Rank()-1], y.Shape().Dim(-1))...)
}

// floatKernel returns the float kernel variable's value (floatKernelVariable).
func floatKernel(ctx *context.Context, g *graph.Graph, shape shapes.Shape) *graph.Node {
	return floatKernelVariable("qlayers.Dense", ctx, shape).ValueGraph(g)
}

// floatKernelVariable returns the float kernel variable WeightsName, creating it (with the
// context's initializer) if needed, as layers.Dense. It panics, naming op, when the scope holds
// the kernel transposed (TransposedWeightsName) instead: a fresh kernel would silently take its
// place.
func floatKernelVariable(op string, ctx *context.Context, shape shapes.Shape) *context.Variable {
	if t := ctx.GetVariable(TransposedWeightsName); t != nil && ctx.GetVariable(WeightsName) == nil {
		panic(errors.Errorf("%s in scope %q: the float kernel is stored transposed, %s %s (a models.Quantizer's Skip rule in OutIn, or its Keep rule); "+
			"accepted: %s (inputDim, outDim), as layers.Dense and a Skip rule in InOut store it", op, ctx.Scope(), TransposedWeightsName, t.Shape(), WeightsName))
	}
	return ctx.VariableWithShape(WeightsName, shape)
}

// storedComponents returns the quantized-kernel component variables of ctx's scope, in order.
func storedComponents(ctx *context.Context) []*context.Variable {
	return componentVariables(ctx, componentName)
}

// componentVariables returns the variables name(0), name(1), ... of ctx's scope, up to the first
// missing one: the components of a quantized array, in order.
func componentVariables(ctx *context.Context, name func(i int) string) []*context.Variable {
	var vars []*context.Variable
	for i := 0; ; i++ {
		v := ctx.GetVariable(name(i))
		if v == nil {
			return vars
		}
		vars = append(vars, v)
	}
}

func componentName(i int) string { return ComponentPrefix + strconv.Itoa(i) }

// quantizedProduct rebuilds the implicit kernel from the stored components and multiplies x by it.
// A kernel stored in torch's layout (KernelLayoutParam "out_in", e.g. by StoreBase) is contracted
// on its last axis.
func quantizedProduct(ctx *context.Context, x *graph.Node, stored []*context.Variable, kernelShape shapes.Shape, cfg quanta.Config) *graph.Node {
	layout := kernelLayout(ctx)
	kernelShape = layout.kernelShape(kernelShape, kernelShape.Dim(0), kernelShape.Dim(1))
	return layout.contract(x, storedArray(ctx, x.Graph(), stored, kernelShape, cfg))
}

// storedArray rebuilds the implicit kernel of logical shape kernelShape from the stored components,
// as graph nodes of g, with cfg's strategy. The stored format (FormatParam) is authoritative; cfg
// supplies it only when the parameter is missing.
func storedArray(ctx *context.Context, g *graph.Graph, stored []*context.Variable, kernelShape shapes.Shape, cfg quanta.Config) implicitarray.Array {
	format := formatString(cfg)
	if s, found := ctx.GetParam(FormatParam); found {
		text, ok := s.(string)
		if !ok {
			panic(errors.Errorf("qlayers.Dense in scope %q: parameter %s=%v is not a format; accepted: the form \"nf4/64\" "+
				"that QuantizeContext writes", ctx.Scope(), FormatParam, s))
		}
		format = text
	}
	return arrayFromVariables(ctx, g, "qlayers.Dense", "kernel", stored, kernelShape, format, cfg.Strategy)
}

// arrayFromVariables rebuilds the implicit array of logical shape in format (FormatParam's form)
// from its stored component variables, as nodes of g, with strategy s: each variable must have
// its component's shape (panics name op, the scope and what the array is), an NF4 absmax or an
// int8 scale in any float dtype, and is made non-trainable.
func arrayFromVariables(ctx *context.Context, g *graph.Graph, op, what string, stored []*context.Variable, shape shapes.Shape,
	format string, s lowering.Strategy) implicitarray.Array {
	tmpl, err := baseTemplate(shape, format, s)
	if err != nil {
		panic(errors.WithMessagef(err, "%s in scope %q: %s %s", op, ctx.Scope(), what, shape))
	}
	// An NF4 absmax or int8 scale stored in another float dtype than the kernel's (a bitsandbytes
	// layer's float32 absmax or SCB/127 under a bfloat16 model) is kept as it is, as a
	// double-quantized absmax decodes to float32: the product computes code × scale in that dtype
	// and gives the kernel's dtype.
	if len(stored) == 2 {
		if dt := stored[1].Shape().DType; dt != shape.DType && dt.IsFloat() {
			switch a := tmpl.(type) {
			case *nf4.Array:
				if !a.Format().DoubleQuant {
					tmpl, err = nf4Template(shape, a.Format(), dt, s)
				}
			case *qint8.Array:
				tmpl, err = int8Template(a, dt)
			}
			if err != nil {
				panic(errors.WithMessagef(err, "%s in scope %q: %s %s", op, ctx.Scope(), what, shape))
			}
		}
	}
	want := tmpl.Components()
	if len(want) != len(stored) {
		panic(errors.Errorf("%s in scope %q: %d stored components for a %s %s %s; accepted: %d (%s)",
			op, ctx.Scope(), len(stored), format, what, shape, len(want), describeComponents(want)))
	}
	nodes := make([]implicitarray.Component, len(stored))
	for i, v := range stored {
		if !v.Shape().Equal(want[i].Shape()) {
			panic(errors.Errorf("%s in scope %q: component %q is %s; a %s %s %s needs %s (%s)",
				op, ctx.Scope(), v.Name(), v.Shape(), format, what, shape, want[i].Shape(), describeComponents(want)))
		}
		// Deleting an array Base returned finalizes these very tensors: name that here, where
		// GoMLX would only say, while feeding the parameters, that a tensor shape is invalid.
		if v.ShardingSpec() == nil && v.HasValue() {
			if t, err := v.Value(); err == nil && !t.Ok() {
				panic(errors.Wrapf(implicitarray.ErrDeleted, "%s in scope %q: stored %s (finalized with an array qlayers.Base returned)",
					op, ctx.Scope(), v.Name()))
			}
		}
		// Components loaded from a checkpoint into a fresh context come back trainable; an
		// optimizer must never see these integer arrays.
		v.SetTrainable(false)
		nodes[i] = implicitarray.NodeComponent(v.ValueGraph(g))
	}
	// The template carries the strategy.
	return tmpl.WithComponents(nodes)
}

// storedFormat is the format recorded in the scope's FormatParam, with cfg's strategy; cfg when
// the parameter is missing.
func storedFormat(ctx *context.Context, cfg quanta.Config) quanta.Config {
	s, found := ctx.GetParam(FormatParam)
	if !found {
		return cfg
	}
	text, ok := s.(string)
	format, err := parseFormat(text)
	if !ok || err != nil {
		panic(errors.Errorf("qlayers.Dense in scope %q: parameter %s=%v is not a format; accepted: the form \"nf4/64\" "+
			"that QuantizeContext writes", ctx.Scope(), FormatParam, s))
	}
	format.Strategy = cfg.Strategy
	return format
}

func describeComponents(cs []implicitarray.Component) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = componentName(i) + " " + c.Shape().String()
	}
	return strings.Join(parts, ", ")
}

// formatString is the FormatParam value for cfg: "nf4/BLOCKSIZE", "nf4-dq/BLOCKSIZE", "int8", "binary",
// "binary/scaled", "ternary", "ternary/scaled" or "ternary/bitnet".
func formatString(cfg quanta.Config) string {
	switch {
	case cfg.Type == quanta.NF4 && cfg.DoubleQuant:
		return fmt.Sprintf("nf4-dq/%d", cfg.EffectiveBlockSize())
	case cfg.Type == quanta.NF4:
		return fmt.Sprintf("nf4/%d", cfg.EffectiveBlockSize())
	case cfg.Type == quanta.Ternary && cfg.BitNet:
		return "ternary/bitnet"
	case (cfg.Type == quanta.Binary || cfg.Type == quanta.Ternary) && cfg.Scaled:
		return cfg.Type.String() + "/scaled"
	}
	return cfg.Type.String()
}

// parseFormat reads a FormatParam value.
func parseFormat(s string) (quanta.Config, error) {
	typeName, detail, _ := strings.Cut(s, "/")
	doubleQuant := typeName == "nf4-dq"
	if doubleQuant {
		typeName = "nf4"
	}
	t, err := quanta.ParseType(typeName)
	if err != nil {
		return quanta.Config{}, err
	}
	cfg := quanta.Config{Type: t, Scaled: detail == "scaled", BitNet: detail == "bitnet", DoubleQuant: doubleQuant}
	if t == quanta.NF4 {
		if cfg.BlockSize, err = strconv.Atoi(detail); err != nil {
			return quanta.Config{}, errors.Errorf("qlayers: format %q: block size %q is not an integer", s, detail)
		}
	}
	if formatString(cfg) != s {
		return quanta.Config{}, errors.Errorf("qlayers: format %q; accepted: \"nf4/BLOCKSIZE\", \"nf4-dq/BLOCKSIZE\", \"int8\", \"binary\", "+
			"\"binary/scaled\", \"ternary\", \"ternary/scaled\", \"ternary/bitnet\"", s)
	}
	return cfg, cfg.Validate()
}
