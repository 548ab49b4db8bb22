package qlayers

import (
	"math"
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/quanta-ml/quanta/lowering"
)

// The variables and parameters of LoRA adapters, in a layer's "dense" scope.
const (
	// LoRAAName is the adapter A, (inputDim, rank), trainable, initialized uniform in
	// ±1/√inputDim (PEFT's Kaiming-uniform default for lora_A).
	LoRAAName = "lora_a"
	// LoRABName is the adapter B, (rank, outDim), trainable, initialized to zero: a fresh adapter
	// leaves the layer's output unchanged.
	LoRABName = "lora_b"
	// LoRAScaleParam records α/r (LoRA.Scale()), the factor of the adapters' product (float64).
	LoRAScaleParam = "quanta_lora_scale"
	// LoRADropoutParam records the dropout of the adapters' input (LoRA.Dropout, float64), which
	// SaveAdapters writes as lora_dropout; LoadAdapters sets it, and LoRADense in a training graph
	// (in one that does not train, only for new adapters or where none is recorded).
	LoRADropoutParam = "quanta_lora_dropout"
	// LoRAMergedParam is true while MergeLoRA's dense merge is in place: the float kernel
	// "weights" holds W + (α/r)·A·B, and LoRADense uses it alone.
	LoRAMergedParam = "quanta_lora_merged"
)

// LoRA configures the low-rank adapters of LoRADense (Hu et al., 2021; QLoRA when the base is
// NF4).
type LoRA struct {
	// Rank is r, the inner dimension of the adapters, from 1 to 2^31 − 1 (LoadAdapters' bound on
	// a file's r).
	Rank int
	// Alpha scales the adapters' product by Alpha/Rank (PEFT's lora_alpha); 0 means Rank.
	Alpha float64
	// RSLoRA scales by Alpha/√Rank instead (PEFT's use_rslora, rank-stabilized LoRA), the scale
	// LoadAdapters records for such an adapter file.
	RSLoRA bool
	// Dropout is PEFT's lora_dropout, from 0 to 1: while the graph trains (the context's
	// training flag, context.Context.SetTraining), each element of the adapters' input x is
	// zeroed with this probability and the others scaled by 1/(1 − Dropout), so that
	// y = x·W + (α/r)·(dropout(x)·A)·B, as torch's Dropout before lora_A; outside training, or at
	// 0, the input goes in whole. At 1 the adapters add nothing while training.
	Dropout float64
}

// Scale is α/r (α/√r with RSLoRA), the factor of the adapters' product.
func (l LoRA) Scale() float64 {
	alpha := l.Alpha
	if alpha == 0 {
		alpha = float64(l.Rank)
	}
	if l.RSLoRA {
		return alpha / math.Sqrt(float64(l.Rank))
	}
	return alpha / float64(l.Rank)
}

// Validate returns an error for a rank outside 1 to 2^31 − 1, a negative or non-finite alpha, a
// Scale that is 0 or infinite as a float32 (subnormals flushed to zero, as XLA's CPU backend
// does: the adapters would be ignored, or give NaN), or a Dropout outside 0 to 1.
func (l LoRA) Validate() error {
	if l.Rank < 1 || l.Rank > fileio.MaxCount {
		return errors.Errorf("qlayers: LoRA rank %d; accepted: 1 to %d", l.Rank, fileio.MaxCount)
	}
	if l.Alpha < 0 || math.IsNaN(l.Alpha) || math.IsInf(l.Alpha, 0) {
		return errors.Errorf("qlayers: LoRA alpha %v; accepted: 0 (meaning the rank) or a positive number", l.Alpha)
	}
	key := "scale alpha/rank"
	if l.RSLoRA {
		key = "scale alpha/√rank (RSLoRA)"
	}
	if err := fileio.CheckFloatAbove(key, l.Scale(), 0); err != nil {
		return errors.WithMessagef(err, "qlayers: LoRA rank %d, alpha %v", l.Rank, l.Alpha)
	}
	if !(l.Dropout >= 0 && l.Dropout <= 1) {
		return errors.Errorf("qlayers: LoRA dropout %v; accepted: 0 to 1 (the probability of dropping an input element)", l.Dropout)
	}
	return nil
}

// LoRADense is a fully connected layer with a frozen base kernel and trainable low-rank adapters:
//
//	y = x·W + (α/r)·(x·A)·B + b
//
// over the last axis of x (dropout(x) in the adapters' term while training, with lora.Dropout),
// in scope ctx.In("dense") (Dense's scope and variable names). The base
// W is whatever the scope holds, never trained:
//   - quantized components (from QuantizeContext, or StoreBase for a bitsandbytes weight): the
//     implicit array's fused product (lowering's strategies, cfg.Strategy; the stored format is
//     authoritative, cfg supplies it only when FormatParam is missing) — QLoRA with "nf4-dq/64";
//   - otherwise the float kernel "weights", as it is (not fake-quantized): full-precision LoRA.
//     A missing kernel is created with the context's initializer, like Dense's.
//
// The kernel is (inputDim, outDim), or torch's (outDim, inputDim) when KernelLayoutParam says
// "out_in" (StoreBase's OutIn). The base variables and the bias are marked non-trainable, so an
// optimizer computes gradients for, and keeps state of, A and B only; the gradient still flows
// through the base's product to x, so stacked LoRA layers train together. A (inputDim, rank) and B
// (rank, outDim) are created in x's dtype, B at zero; adapters of another float dtype (LoadAdapters'
// float32) are converted to it, as is a bias of another float dtype (StoreBase keeps one as given). A missing bias
// (useBias) starts at zero.
// While a dense merge is in place (MergeLoRA), the merged float kernel is used alone, in x's dtype.
//
// LoRADense panics, as Dense does, for an invalid cfg or lora, an input that is not float of
// rank >= 1, stored components that do not fit, or adapters of another rank than lora's or
// recorded with another scale (LoRAScaleParam, e.g. LoadAdapters' lora_alpha/r) than lora.Scale().
func LoRADense(ctx *context.Context, x *graph.Node, useBias bool, outDim int, cfg quanta.Config, lora LoRA) *graph.Node {
	checkDenseArgs("qlayers.LoRADense", x, outDim, "a float tensor of rank >= 1", cfg.Validate, lora.Validate)
	shape := x.Shape()
	g := x.Graph()
	ctx = ctx.In(Scope)
	layout := kernelLayout(ctx)
	kernelShape := layout.kernelShape(shape, shape.Dim(-1), outDim)
	flat := flattenRows(x)

	var y *graph.Node
	stored := storedComponents(ctx)
	switch {
	case merged(ctx):
		kernel := ctx.GetVariable(WeightsName)
		if kernel == nil {
			panic(errors.Errorf("qlayers.LoRADense in scope %q: %s is set but the merged kernel %q is missing", ctx.Scope(),
				LoRAMergedParam, WeightsName))
		}
		kernel.SetTrainable(false)
		// MergeLoRA computes a quantized base's merged kernel in float32: the layer computes in x's dtype.
		y = layout.contract(flat, graph.ConvertDType(kernel.ValueGraph(g), shape.DType))
	case len(stored) > 0:
		y = frozenProduct(flat, storedArray(ctx, g, stored, kernelShape, cfg), layout)
	default:
		kernel := floatKernelVariable("qlayers.LoRADense", ctx, kernelShape)
		kernel.SetTrainable(false)
		y = layout.contract(flat, kernel.ValueGraph(g))
	}
	if !merged(ctx) {
		y = graph.Add(y, adapters(ctx, flat, outDim, lora))
	}
	y = unflattenRows(y, shape)
	if useBias {
		bias := ctx.WithInitializer(initializers.Zero).VariableWithShape(BiasesName, biasShape(ctx, shape.DType, outDim))
		bias.SetTrainable(false)
		y = graph.Add(y, graph.ExpandLeftToRank(graph.ConvertDType(bias.ValueGraph(g), shape.DType), y.Rank()))
	}
	return y
}

// adapters returns (α/r)·(x·A)·B for x (rows, inDim), creating A and B if needed and recording
// the scale.
func adapters(ctx *context.Context, x *graph.Node, outDim int, lora LoRA) *graph.Node {
	g := x.Graph()
	inDim, dtype := x.Shape().Dim(1), x.DType()
	aShape, bShape := shapes.Make(dtype, inDim, lora.Rank), shapes.Make(dtype, lora.Rank, outDim)
	for _, v := range []struct {
		name  string
		shape shapes.Shape
	}{{LoRAAName, aShape}, {LoRABName, bShape}} {
		// Adapters of another float dtype (LoadAdapters reads float32) are converted below.
		if existing := ctx.GetVariable(v.name); existing != nil &&
			(!slices.Equal(existing.Shape().Dimensions, v.shape.Dimensions) || !existing.Shape().DType.IsFloat()) {
			panic(errors.Errorf("qlayers.LoRADense in scope %q: adapter %q is %s; rank %d with input %d and output %d needs %s",
				ctx.Scope(), v.name, existing.Shape(), lora.Rank, inDim, outDim, v.shape))
		}
	}
	// Adapters the scope holds carry their scale (LoadAdapters sets lora_alpha/r): lora must agree,
	// or the layer would compute with another scale than the adapters were trained (and would be
	// merged) with.
	if ctx.GetVariable(LoRAAName) != nil {
		if s, found := ctx.GetParam(LoRAScaleParam); found {
			// within rounding: a scale saved as lora_alpha = scale·r (SaveAdapters; PEFT's files
			// do not say how alpha was chosen) and read back as lora_alpha/r may move by an ulp
			if scale, ok := s.(float64); ok && math.Abs(scale-lora.Scale()) > 1e-12*math.Abs(lora.Scale()) {
				panic(errors.Errorf("qlayers.LoRADense in scope %q: the adapters' recorded scale %s=%v differs from "+
					"the LoRA's %v (rank %d, alpha %v, RSLoRA %v); accepted: the alpha and rank the adapters were made with "+
					"(RSLoRA for a file with use_rslora)",
					ctx.Scope(), LoRAScaleParam, scale, lora.Scale(), lora.Rank, lora.Alpha, lora.RSLoRA))
			}
		}
	}
	bound := 1 / math.Sqrt(float64(inDim))
	a := ctx.GetVariable(LoRAAName)
	// The recorded dropout is the one the adapters train with: a graph that does not train
	// (evaluation, inference) records its LoRA's only for new adapters or where none is recorded.
	_, recorded := ctx.GetParam(LoRADropoutParam)
	if a == nil || !recorded || ctx.IsTraining(g) {
		ctx.SetParam(LoRADropoutParam, lora.Dropout)
	}
	if a == nil {
		a = ctx.WithInitializer(initializers.RandomUniformFn(ctx, -bound, bound)).VariableWithShape(LoRAAName, aShape)
	}
	b := ctx.GetVariable(LoRABName)
	if b == nil {
		b = ctx.WithInitializer(initializers.Zero).VariableWithShape(LoRABName, bShape)
	}
	a.SetTrainable(true)
	b.SetTrainable(true)
	ctx.SetParam(LoRAScaleParam, lora.Scale())
	if lora.Dropout > 0 && ctx.IsTraining(g) {
		x = dropout(ctx, x, lora.Dropout)
	}
	value := func(v *context.Variable) *graph.Node { return graph.ConvertDType(v.ValueGraph(g), dtype) }
	delta := graph.Dot(graph.Dot(x, value(a)), value(b))
	return graph.MulScalar(delta, lora.Scale())
}

// dropout zeroes each element of x with probability p (0 < p <= 1) and scales the others by
// 1/(1 − p): the draws are float32 uniforms from ctx's random state, compared with p in float32
// whatever x's dtype (a bfloat16 draw would drop by its coarse steps, not by p).
func dropout(ctx *context.Context, x *graph.Node, p float64) *graph.Node {
	g := x.Graph()
	if p >= 1 {
		return graph.ZerosLike(x)
	}
	u := ctx.RandomUniform(g, shapes.Make(dtypes.Float32, x.Shape().Dimensions...))
	kept := graph.GreaterOrEqual(u, graph.Scalar(g, dtypes.Float32, p))
	return graph.Where(kept, graph.MulScalar(x, 1/(1-p)), graph.ZerosLike(x))
}

// merged reports whether a dense merge is in place in ctx's scope.
func merged(ctx *context.Context) bool {
	v, found := ctx.GetParam(LoRAMergedParam)
	b, _ := v.(bool)
	return found && b
}

// frozenProduct is x·W (x (rows, inDim)) for a frozen quantized base w, whose gradient reaches x
// only, computed in the backward pass by a second fused product, dy·Wᵀ, on components made to
// depend on dy. Left to autodiff, the product's backward would reuse the forward's decoded
// weight, so XLA would keep every layer's decoded float weight alive from the forward to the
// backward pass: a training step would hold the float model. This way it holds, at a time, the
// decode of the product being computed (as bitsandbytes' QLoRA dequantizes each layer per
// matmul).
//
// On a backend without Pad (GoMLX's pure-Go one), which the gradient of the slice below needs,
// the product is left to autodiff.
func frozenProduct(x *graph.Node, w implicitarray.Array, layout KernelLayout) *graph.Node {
	if !x.Graph().Backend().Capabilities().Operations[backends.OpTypePad] {
		return layout.contract(x, w)
	}
	y := layout.contract(graph.StopGradient(x), w)
	return withInputGradient(x, y, func(dy *graph.Node) *graph.Node {
		comps := w.Components()
		for i, c := range comps {
			comps[i] = implicitarray.NodeComponent(lowering.After(dy, c.Node()))
		}
		return layout.contractTransposed(dy, w.WithComponents(comps))
	})
}

// withInputGradient returns y (computed from x without autodiff, e.g. from StopGradient(x)) with
// the gradient dL/dx = grad(dL/dy): x and y travel flattened in one concatenation whose custom
// gradient maps the adjoint of y's part to x's part.
func withInputGradient(x, y *graph.Node, grad func(dy *graph.Node) *graph.Node) *graph.Node {
	nx, ny := x.Shape().Size(), y.Shape().Size()
	yDims := y.Shape().Dimensions
	both := graph.Concatenate([]*graph.Node{graph.Reshape(x, nx), graph.Reshape(graph.ConvertDType(y, x.DType()), ny)}, 0)
	both = graph.IdentityWithCustomGradient(both, func(_, v *graph.Node) *graph.Node {
		dy := graph.Reshape(graph.SliceAxis(v, 0, graph.AxisRange(nx, nx+ny)), yDims...)
		dx := graph.Reshape(graph.ConvertDType(grad(dy), v.DType()), nx)
		return graph.Concatenate([]*graph.Node{dx, graph.Zeros(v.Graph(), shapes.Make(v.DType(), ny))}, 0)
	})
	return graph.ConvertDType(graph.Reshape(graph.SliceAxis(both, 0, graph.AxisRange(nx, nx+ny)), yDims...), y.DType())
}
