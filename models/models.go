package models

import (
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/qlayers"
)

// Projection computes the linear layer called name, y = x·W (+ b) over the last axis of x with
// outDim outputs, reading its parameters from ctx.In(name). x has rank >= 2 (batch and sequence
// axes, features last); the result has x's shape with the last axis outDim.
type Projection func(ctx *context.Context, name string, x *graph.Node, outDim int, useBias bool) *graph.Node

// Dense is the default Projection: layers.Dense in ctx.In(name), whose variables are
// "dense/weights" (inDim, outDim) and "dense/biases" (outDim). Outside training, a float32 x
// with its stored float32 weights takes lowering.DenseMatMul, which gives few rows to quanta's
// float32 kernel where the backend has it. A kernel stored transposed, "dense/weights_t"
// (outDim, inDim) and no "dense/weights" (a Quantizer's Skip rule in qlayers.OutIn, or its Keep
// rule), is multiplied as x·Wᵀ by lowering.DenseMatMulTransposed (graph.DotGeneral in
// training); it panics, naming the scope, when that kernel or the biases do not fit x and outDim.
func Dense(ctx *context.Context, name string, x *graph.Node, outDim int, useBias bool) *graph.Node {
	g := x.Graph()
	dctx := ctx.In(name).In(DenseScope)
	w, b := dctx.GetVariable(DenseWeights), dctx.GetVariable(DenseBiases)
	if w == nil && dctx.GetVariable(DenseWeightsTransposed) != nil {
		return denseTransposed(ctx, name, x, outDim, useBias)
	}
	shape := x.Shape()
	if ctx.IsTraining(g) || w == nil || shape.Rank() < 1 || shape.DType != dtypes.Float32 ||
		!w.Shape().Equal(shapes.Make(dtypes.Float32, shape.Dim(-1), outDim)) ||
		useBias && (b == nil || !b.Shape().Equal(shapes.Make(dtypes.Float32, outDim))) {
		return layers.Dense(ctx.In(name), x, useBias, outDim)
	}
	return denseProduct(ctx, name, x, outDim, useBias, lowering.DenseMatMul(flatRows(x), w.ValueGraph(g)))
}

// denseTransposed is Dense on the float32 kernel DenseWeightsTransposed (outDim, inDim): x·Wᵀ
// by lowering.DenseMatMulTransposed outside training, the same product as graph.DotGeneral in
// training. It panics, naming the scope, when the kernel or the biases do not fit x and outDim.
func denseTransposed(ctx *context.Context, name string, x *graph.Node, outDim int, useBias bool) *graph.Node {
	g := x.Graph()
	dctx := ctx.In(name).In(DenseScope)
	w := dctx.GetVariable(DenseWeightsTransposed)
	shape := x.Shape()
	if w == nil || shape.Rank() < 1 || shape.DType != dtypes.Float32 || !w.Shape().Equal(shapes.Make(dtypes.Float32, outDim, shape.Dim(-1))) {
		panic(errors.Errorf("models.Dense in scope %q: input %s with %d outputs, %s %s; accepted: float32 [..., inDim] and %s float32 (%d, inDim)",
			dctx.Scope(), shape, outDim, DenseWeightsTransposed, variableShape(w), DenseWeightsTransposed, outDim))
	}
	flat, wv := flatRows(x), w.ValueGraph(g)
	if ctx.IsTraining(g) {
		return denseProduct(ctx, name, x, outDim, useBias, graph.DotGeneral(flat, []int{1}, nil, wv, []int{1}, nil))
	}
	return denseProduct(ctx, name, x, outDim, useBias, lowering.DenseMatMulTransposed(flat, wv))
}

// flatRows returns x as a matrix, its leading axes flattened into rows.
func flatRows(x *graph.Node) *graph.Node {
	return graph.Reshape(x, -1, x.Shape().Dim(-1))
}

// denseProduct returns the product y of x's rows, flattened, shaped as x with outDim outputs,
// plus the biases of name's dense scope when useBias. It panics, naming the scope, when the
// biases are missing or not float32 [outDim].
func denseProduct(ctx *context.Context, name string, x *graph.Node, outDim int, useBias bool, y *graph.Node) *graph.Node {
	shape := x.Shape()
	y = graph.Reshape(y, append(shape.Clone().Dimensions[:shape.Rank()-1], outDim)...)
	if useBias {
		dctx := ctx.In(name).In(DenseScope)
		b := dctx.GetVariable(DenseBiases)
		if b == nil || !b.Shape().Equal(shapes.Make(dtypes.Float32, outDim)) {
			panic(errors.Errorf("models.Dense in scope %q: biases are %s; accepted: float32 [%d]", dctx.Scope(), variableShape(b), outDim))
		}
		y = graph.Add(y, graph.ExpandLeftToRank(b.ValueGraph(x.Graph()), y.Rank()))
	}
	return y
}

// DenseScope and DenseWeights are where Dense keeps a kernel: variable DenseWeights (inDim,
// outDim) in ctx.In(name).In(DenseScope), or DenseWeightsTransposed (outDim, inDim) for a kernel
// stored as PyTorch and GGUF files store a linear weight; DenseBiases likewise.
const (
	DenseScope             = "dense"
	DenseWeights           = "weights"
	DenseWeightsTransposed = qlayers.TransposedWeightsName
	DenseBiases            = "biases"
)

// Variable is one value a loader stores in a context: scope (absolute, e.g. "/layer_0/attn_q/dense"),
// name and value.
type Variable struct {
	Scope string
	Name  string
	Value *tensors.Tensor
}

// KernelFunc returns the variables to store for the float kernel (inDim, outDim) of the linear
// layer whose Projection scope is scope (e.g. "/layer_0/attn_q"). The kernel tensor is owned by
// the callee: returned in a Variable it is stored, otherwise it may be finalized once converted.
type KernelFunc func(scope string, kernel *tensors.Tensor) ([]Variable, error)

// FuseFunc reports whether a loader may store the projections at the scopes parts (e.g.
// "/layer_0/attn_q", "/layer_0/attn_k", "/layer_0/attn_v"), whose kernels have the output widths
// outDims, as one projection at scope fused whose kernel is theirs concatenated along the output
// axis: one product reads all of them, and the model slices its output. Quantizer.Fuse is one;
// a loader without a FuseFunc never fuses.
type FuseFunc func(fused string, parts []string, outDims []int) bool

// LoadOptions are the options of the GGUF loaders of the architectures (llama.LoadGGUF,
// gemma3.LoadGGUF); the zero value loads the float model, every tensor decoded to float32.
type LoadOptions struct {
	// Kernel receives each projection kernel the loader decodes, float32 in (inDim, outDim)
	// layout, and returns the variables to store for it; nil means DenseKernel (the float
	// kernel). Quantizer.Kernel quantizes it.
	Kernel KernelFunc
	// Table receives the token-embedding table [VocabSize, Dim] (float32) when the loader decodes
	// it and returns the variables to store for it; nil means DenseTableVariables (the float
	// table). With Quantizer.QuantizeTable, run the model with its Table = Quantizer.Table.
	Table TableFunc
	// Keep, if set, is asked for each kernel and table that the file stores in a quantized block
	// type whether to keep it as stored (a ggml.Array, never decoded): Keeper. A Quantizer with
	// Keep rules (Preset(FilePreset)) keeps them; run the model with its Projection and Table.
	Keep Keeper
	// Fuse, if set, is asked whether each block's q/k/v kernels (as attn_qkv) and gate/up kernels
	// (as ffn_gate_up) may be stored as one kernel concatenated along the output axis; a group
	// fuses when it says yes for every block and, where the parts are kept as stored, the file
	// stores every part of every block in one block type (their rows of blocks are stacked as
	// they are). With Quantizer.Fuse the products give the values of the separate ones.
	Fuse FuseFunc
	// Backend, if set, receives each tensor as soon as it is converted (Place): with the host
	// memory shared (XLA CPU), the host then holds one copy of the model during and after
	// loading; without it the tensors stay local until their first execution.
	Backend backends.Backend
}

// DenseKernel is the default KernelFunc: the float kernel as Dense's "weights".
func DenseKernel(scope string, kernel *tensors.Tensor) ([]Variable, error) {
	return []Variable{{Scope: scope + "/" + DenseScope, Name: DenseWeights, Value: kernel}}, nil
}

// Store stores the variables in ctx, all or none: it returns an error, storing nothing, if any
// of them already exists in ctx or two of them share a scope and name.
func Store(ctx *context.Context, vars []Variable) error {
	seen := map[[2]string]bool{}
	for _, v := range vars {
		key := [2]string{v.Scope, v.Name}
		if seen[key] {
			return errors.Errorf("models.Store: variable %s/%s given twice", v.Scope, v.Name)
		}
		seen[key] = true
		if ctx.InspectVariable(v.Scope, v.Name) != nil {
			return errors.Errorf("models.Store: variable %s/%s already exists in the context; load into a fresh context", v.Scope, v.Name)
		}
		if v.Value == nil {
			return errors.Errorf("models.Store: variable %s/%s has no value", v.Scope, v.Name)
		}
	}
	for _, v := range vars {
		ctx.InAbsPath(v.Scope).Checked(false).VariableWithValue(v.Name, v.Value)
	}
	return nil
}

// Place moves the values of vars to device 0 of backend, sharing the host memory where the
// backend allows it (XLA CPU, the pure-Go backend) so that the host keeps one copy; a nil backend
// leaves them local. Loaders call it on each tensor as soon as it is converted, so that the
// transient copies of a large model never pile up.
func Place(backend backends.Backend, vars []Variable) error {
	if backend == nil {
		return nil
	}
	for _, v := range vars {
		if err := v.Value.MaterializeOnDevice(backend, true, 0); err != nil {
			return errors.WithMessagef(err, "models.Place: %s/%s", v.Scope, v.Name)
		}
	}
	return nil
}

// Release finalizes the values of vars: for a loader that fails after converting some tensors.
func Release(vars []Variable) {
	for _, v := range vars {
		if v.Value != nil {
			_ = v.Value.FinalizeAll()
		}
	}
}
