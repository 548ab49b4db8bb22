package qlayers

import (
	"slices"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/bnb"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/nf4"
)

// loraLayer is one layer with adapters, as found in a context.
type loraLayer struct {
	dense         *context.Context // the "dense" scope
	layer         string           // the layer's scope (dense's parent)
	a, b          *context.Variable
	scale         float64
	dropout       float64 // LoRADropoutParam, 0 where none is recorded
	inDim, outDim int
	layout        KernelLayout
}

// loraLayers returns the layers of ctx that hold adapters, sorted by scope.
func loraLayers(ctx *context.Context) ([]loraLayer, error) {
	var out []loraLayer
	loadPending(ctx, func(name string) bool { return name == LoRAAName })
	for v := range ctx.IterVariables() {
		if v.Name() != LoRAAName {
			continue
		}
		dense := ctx.InAbsPath(v.Scope()).Checked(false)
		b := dense.GetVariable(LoRABName)
		if b == nil || v.Shape().Rank() != 2 || b.Shape().Rank() != 2 || v.Shape().Dim(1) != b.Shape().Dim(0) {
			return nil, errors.Errorf("scope %q: adapter %s without a matching %s (%v)", v.Scope(), v.Shape(), LoRABName, b)
		}
		s, found := dense.GetParam(LoRAScaleParam)
		scale, ok := s.(float64)
		if !found || !ok {
			return nil, errors.Errorf("scope %q: parameter %s=%v; accepted: a float64, which LoRADense and LoadAdapters set",
				v.Scope(), LoRAScaleParam, s)
		}
		dropout := 0.0
		if d, found := dense.GetParam(LoRADropoutParam); found {
			if dropout, ok = d.(float64); !ok || !(dropout >= 0 && dropout <= 1) {
				return nil, errors.Errorf("scope %q: parameter %s=%v; accepted: a float64 from 0 to 1, which LoRADense and "+
					"LoadAdapters set", v.Scope(), LoRADropoutParam, d)
			}
		}
		layout, err := storedLayout(dense)
		if err != nil {
			return nil, err
		}
		layer := strings.TrimSuffix(v.Scope(), "/"+Scope)
		out = append(out, loraLayer{dense: dense, layer: layer, a: v, b: b, scale: scale, dropout: dropout, inDim: v.Shape().Dim(0),
			outDim: b.Shape().Dim(1), layout: layout})
	}
	slices.SortFunc(out, func(x, y loraLayer) int { return strings.Compare(x.layer, y.layer) })
	return out, nil
}

// mergeLayers checks the arguments of MergeLoRA and UnmergeLoRA (op, in errors) and returns
// loraLayers(ctx).
func mergeLayers(op string, ctx *context.Context, backend backends.Backend) ([]loraLayer, error) {
	if ctx == nil || backend == nil {
		return nil, errors.New(op + ": nil context or backend")
	}
	layers, err := loraLayers(ctx)
	return layers, errors.WithMessage(err, op)
}

// MergeOptions of MergeLoRA.
type MergeOptions struct {
	// Requantize re-quantizes W + (α/r)·A·B into the base's format and removes the adapters
	// (PEFT's merge_and_unload): the layer becomes a plain quantized layer again, a second
	// rounding, not undoable. Without it the merge is dense: the merged float kernel is stored
	// beside the base, LoRADense uses it alone, and UnmergeLoRA restores the base exactly.
	Requantize bool
}

// MergeLoRA folds the adapters of every layer of ctx into its base, computing on backend: W' = W
// + (α/r)·A·B (transposed for an "out_in" kernel), W the base materialized in float32 (or the
// float kernel). With a quantized base, the dense merge stores W' as the float kernel "weights"
// and keeps the components (UnmergeLoRA deletes it again: exact); with a float base, it replaces
// W (UnmergeLoRA subtracts the product again, as PEFT does: exact up to float rounding). With
// opts.Requantize (quantized bases only), W' is quantized in the base's format — bitsandbytes'
// rule for its flattened-block formats — the components replaced and the adapters removed.
//
// It returns an error, changing nothing, for a nil context or backend, a layer already merged, a
// Requantize of a float base, a dense merge of a quantized base that keeps its float kernel beside
// it (QuantizeContext's Options.KeepFloat: the merge would overwrite that kernel and UnmergeLoRA
// delete it), or a base that does not fit its adapters.
func MergeLoRA(ctx *context.Context, backend backends.Backend, opts MergeOptions) error {
	layers, err := mergeLayers("qlayers.MergeLoRA", ctx, backend)
	if err != nil {
		return err
	}
	type result struct {
		l      loraLayer
		merged *tensors.Tensor
		comps  []*tensors.Tensor // Requantize
	}
	var results []result
	for _, l := range layers {
		if merged(l.dense) {
			return errors.Errorf("qlayers.MergeLoRA: scope %q is already merged; UnmergeLoRA first", l.layer)
		}
		w, quantized, err := baseDense(backend, l)
		if err != nil {
			return errors.WithMessage(err, "qlayers.MergeLoRA")
		}
		if opts.Requantize && !quantized {
			return errors.Errorf("qlayers.MergeLoRA: scope %q has a float base; Requantize needs a quantized one", l.layer)
		}
		if quantized && !opts.Requantize && l.dense.GetVariable(WeightsName) != nil {
			return errors.Errorf("qlayers.MergeLoRA: scope %q keeps its float kernel %q beside the quantized base "+
				"(Options.KeepFloat), which a dense merge would overwrite and UnmergeLoRA delete; accepted: "+
				"MergeOptions.Requantize, or the layer without its float kernel", l.layer, WeightsName)
		}
		mergedW, err := addDelta(backend, l, w, 1)
		if err != nil {
			return errors.WithMessagef(err, "qlayers.MergeLoRA: scope %q", l.layer)
		}
		r := result{l: l, merged: mergedW}
		if opts.Requantize {
			text, _ := l.dense.GetParam(FormatParam)
			format, _ := text.(string)
			if r.comps, err = requantize(mergedW, format); err != nil {
				return errors.WithMessagef(err, "qlayers.MergeLoRA: scope %q", l.layer)
			}
		}
		results = append(results, r)
	}
	for _, r := range results {
		dense := r.l.dense
		switch {
		case opts.Requantize:
			for i, t := range r.comps {
				storedComponents(dense)[i].MustSetValue(t)
			}
			for _, name := range []string{LoRAAName, LoRABName} {
				if err := ctx.DeleteVariable(dense.Scope(), name); err != nil {
					return errors.WithMessagef(err, "qlayers.MergeLoRA: scope %q", r.l.layer)
				}
			}
		default:
			if v := dense.GetVariable(WeightsName); v != nil {
				v.MustSetValue(r.merged)
			} else {
				dense.VariableWithValue(WeightsName, r.merged).SetTrainable(false)
			}
			dense.SetParam(LoRAMergedParam, true)
		}
	}
	return nil
}

// UnmergeLoRA undoes MergeLoRA's dense merge in every merged layer of ctx: with a quantized base
// the merged float kernel is deleted (the base is as it was); with a float base, (α/r)·A·B is
// subtracted again. It returns an error, changing nothing, for a nil context or backend, or if no
// layer is merged.
func UnmergeLoRA(ctx *context.Context, backend backends.Backend) error {
	layers, err := mergeLayers("qlayers.UnmergeLoRA", ctx, backend)
	if err != nil {
		return err
	}
	type result struct {
		l        loraLayer
		restored *tensors.Tensor // nil: delete the merged kernel
	}
	var results []result
	for _, l := range layers {
		if !merged(l.dense) {
			continue
		}
		r := result{l: l}
		if len(storedComponents(l.dense)) == 0 {
			w, err := l.dense.GetVariable(WeightsName).Value()
			if err != nil {
				return errors.WithMessagef(err, "qlayers.UnmergeLoRA: scope %q", l.layer)
			}
			if r.restored, err = addDelta(backend, l, w, -1); err != nil {
				return errors.WithMessagef(err, "qlayers.UnmergeLoRA: scope %q", l.layer)
			}
		}
		results = append(results, r)
	}
	if len(results) == 0 {
		return errors.New("qlayers.UnmergeLoRA: no merged layer")
	}
	for _, r := range results {
		if r.restored != nil {
			r.l.dense.GetVariable(WeightsName).MustSetValue(r.restored)
		} else if err := ctx.DeleteVariable(r.l.dense.Scope(), WeightsName); err != nil {
			return errors.WithMessagef(err, "qlayers.UnmergeLoRA: scope %q", r.l.layer)
		}
		r.l.dense.SetParam(LoRAMergedParam, false)
	}
	return nil
}

// baseDense returns the layer's base as a dense float32 host tensor in its layout, and whether
// it is quantized.
func baseDense(backend backends.Backend, l loraLayer) (*tensors.Tensor, bool, error) {
	if len(storedComponents(l.dense)) > 0 {
		w, _, err := Base(l.dense, l.layer, l.inDim, l.outDim)
		if err != nil {
			return nil, true, err
		}
		dense, err := implicitarray.MaterializeOnHost(backend, w)
		return dense, true, err
	}
	v := l.dense.GetVariable(WeightsName)
	if v == nil {
		return nil, false, errors.Errorf("scope %q holds adapters but no base kernel", l.layer)
	}
	w, err := v.Value()
	return w, false, err
}

// addDelta returns w + sign·(α/r)·A·B in w's layout and dtype, computed in float32.
func addDelta(backend backends.Backend, l loraLayer, w *tensors.Tensor, sign float64) (*tensors.Tensor, error) {
	a, err := l.a.Value()
	if err != nil {
		return nil, err
	}
	b, err := l.b.Value()
	if err != nil {
		return nil, err
	}
	return graph.ExecOnce(backend, func(w, a, b *graph.Node) *graph.Node {
		f32 := func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtypes.Float32) }
		delta := graph.MulScalar(graph.Dot(f32(a), f32(b)), sign*l.scale)
		if l.layout == OutIn {
			delta = graph.Transpose(delta, 0, 1)
		}
		return graph.ConvertDType(graph.Add(f32(w), delta), w.DType())
	}, w, a, b)
}

// requantize quantizes the merged kernel w in the stored format text.
func requantize(w *tensors.Tensor, text string) ([]*tensors.Tensor, error) {
	var array implicitarray.Array
	if rest, ok := strings.CutSuffix(text, "/flat"); ok {
		cfg, err := parseFormat(rest)
		if err != nil {
			return nil, err
		}
		if array, err = bnb.Quantize4bit(w, cfg.EffectiveBlockSize(), cfg.DoubleQuant); err != nil {
			return nil, err
		}
		// bnb's rule gives a float32 absmax and blocks a kernel whose rows hold whole blocks along
		// them: the components are fitted to the stored format's shapes and dtypes (an absmax in
		// the kernel's half dtype), which LoRADense and Base read.
		f := nf4.Format{BlockSize: cfg.EffectiveBlockSize(), FlatBlocks: true, DoubleQuant: cfg.DoubleQuant}
		return fitComponents(array.Components(), nf4.ComponentShapes(w.Shape(), f, w.DType())), nil
	} else {
		cfg, err := parseFormat(text)
		if err != nil {
			return nil, err
		}
		if array, err = quanta.Quantize(w, cfg); err != nil {
			return nil, err
		}
	}
	var out []*tensors.Tensor
	for _, c := range array.Components() {
		out = append(out, c.Tensor())
	}
	return out, nil
}

// fitComponents returns the host components cs reshaped to the shapes of want (same sizes) and,
// float32 ones, converted to want's float dtype.
func fitComponents(cs []implicitarray.Component, want []shapes.Shape) []*tensors.Tensor {
	out := make([]*tensors.Tensor, len(cs))
	for i, c := range cs {
		t := c.Tensor()
		switch dims := want[i].Dimensions; t.DType() {
		case dtypes.Uint8:
			t = tensors.FromFlatDataAndDimensions(tensors.MustCopyFlatData[uint8](t), dims...)
		case dtypes.Float32:
			t = convertedFrom32(tensors.FromFlatDataAndDimensions(tensors.MustCopyFlatData[float32](t), dims...), want[i].DType)
		}
		out[i] = t
	}
	return out
}
