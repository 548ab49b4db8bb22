package qlayers

import (
	"encoding/json"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/quanta-ml/quanta/internal/hostdata"
	"github.com/quanta-ml/quanta/internal/xlafloat"
	"github.com/quanta-ml/quanta/safetensors"
	"github.com/x448/float16"
)

// The files of an adapter directory, as PEFT's save_pretrained writes them.
const (
	AdapterWeightsFile = "adapter_model.safetensors"
	AdapterConfigFile  = "adapter_config.json"
)

// adapterKeyPrefix starts PEFT's adapter keys: the model wrapped as base_model.model.
const adapterKeyPrefix = "base_model.model."

// AdapterOptions says how SaveAdapters and LoadAdapters name the layers.
type AdapterOptions struct {
	// ModuleName maps a layer's scope (the scope LoRADense is called in, e.g.
	// "/model/layers_0/q_proj") to the module path PEFT uses for it (e.g.
	// "model.layers.0.self_attn.q_proj"). nil: the scope without its leading "/", "/" replaced by
	// ".", so "/model/hidden_0" is "model.hidden_0". Two layers whose adapters are saved or loaded
	// must have two names: SaveAdapters and LoadAdapters refuse one name for both.
	ModuleName func(scope string) string
}

func (o AdapterOptions) moduleName(scope string) string {
	if o.ModuleName != nil {
		return o.ModuleName(scope)
	}
	return strings.ReplaceAll(strings.TrimPrefix(scope, "/"), "/", ".")
}

// moduleNameError reports that AdapterOptions.ModuleName gives the layers at scopes a and b one
// module name.
func moduleNameError(a, b, module string) error {
	return errors.Errorf("AdapterOptions.ModuleName gives scopes %q and %q one module name %q; accepted: a module name per layer",
		min(a, b), max(a, b), module)
}

// adapterConfig is the part of PEFT's adapter_config.json that SaveAdapters writes and
// LoadAdapters reads.
type adapterConfig struct {
	PEFTType    string  `json:"peft_type"`
	R           int     `json:"r"`
	LoRAAlpha   float64 `json:"lora_alpha"`
	LoRADropout float64 `json:"lora_dropout"`
	Bias        string  `json:"bias"`
	FanInFanOut bool    `json:"fan_in_fan_out"`
	// Not read: PEFT writes a list of module names or a regular expression (target_modules), true,
	// false or an initialization method's name (init_lora_weights).
	TargetModules any `json:"target_modules"`
	InitWeights   any `json:"init_lora_weights"`
	// Read only (SaveAdapters writes none of them): the keys that change the adapters' product.
	UseRSLoRA    bool           `json:"use_rslora,omitempty"`
	UseDoRA      bool           `json:"use_dora,omitempty"`
	AlphaPattern map[string]any `json:"alpha_pattern,omitempty"`
	RankPattern  map[string]any `json:"rank_pattern,omitempty"`
}

// SaveAdapters writes the adapters of every LoRA layer of ctx, and nothing else, to directory dir
// as PEFT's save_pretrained does: adapter_model.safetensors with, per layer,
// "base_model.model.<module>.lora_A.weight" (float32 [rank, inputDim], Aᵀ) and
// "...lora_B.weight" (float32 [outDim, rank], Bᵀ), and adapter_config.json (peft_type "LORA", r,
// lora_alpha = scale·r, lora_dropout, target_modules, bias "none"). Every layer must share the
// rank, the scale and the dropout (LoRADropoutParam; 0 where a layer has none recorded).
// Each file is replaced whole (written to a temporary file, synced, renamed): an interrupted save
// leaves the old file or the new one, never part of one. It returns an error, writing nothing, for
// a nil context, when ctx holds no adapters, when they differ in rank, scale or dropout, or when
// opts.ModuleName gives two of their layers one name.
func SaveAdapters(ctx *context.Context, dir string, opts AdapterOptions) error {
	if ctx == nil {
		return errors.New("qlayers.SaveAdapters: nil context")
	}
	layers, err := loraLayers(ctx)
	if err != nil {
		return errors.WithMessage(err, "qlayers.SaveAdapters")
	}
	if len(layers) == 0 {
		return errors.New("qlayers.SaveAdapters: the context holds no LoRA adapters")
	}
	rank, scale, dropout := layers[0].a.Shape().Dim(1), layers[0].scale, layers[0].dropout
	var list []safetensors.Tensor
	var modules []string
	for _, l := range layers {
		if r := l.a.Shape().Dim(1); r != rank || l.scale != scale {
			return errors.Errorf("qlayers.SaveAdapters: scope %q has rank %d and scale %v, scope %q rank %d and scale %v; "+
				"accepted: one rank and scale for all layers", l.layer, r, l.scale, layers[0].layer, rank, scale)
		}
		if l.dropout != dropout {
			return errors.Errorf("qlayers.SaveAdapters: scope %q has %s %v, scope %q %v; accepted: one dropout for all "+
				"layers (%s holds one lora_dropout)", l.layer, LoRADropoutParam, l.dropout, layers[0].layer, dropout, AdapterConfigFile)
		}
		module := opts.moduleName(l.layer)
		if i := slices.Index(modules, module); i >= 0 {
			return errors.WithMessage(moduleNameError(layers[i].layer, l.layer, module), "qlayers.SaveAdapters")
		}
		modules = append(modules, module)
		for _, ab := range []struct {
			v    *context.Variable
			name string
		}{{l.a, "lora_A"}, {l.b, "lora_B"}} {
			value, err := ab.v.Value()
			if err != nil {
				return errors.WithMessagef(err, "qlayers.SaveAdapters: %s", ab.v.ScopeAndName())
			}
			t, err := transposed32(value)
			if err != nil {
				return errors.WithMessagef(err, "qlayers.SaveAdapters: %s", ab.v.ScopeAndName())
			}
			st, err := safetensors.FromTensor(adapterKeyPrefix+module+"."+ab.name+".weight", t)
			if err != nil {
				return errors.WithMessage(err, "qlayers.SaveAdapters")
			}
			list = append(list, st)
		}
	}
	config, err := json.MarshalIndent(adapterConfig{PEFTType: "LORA", R: rank, LoRAAlpha: scale * float64(rank), LoRADropout: dropout, Bias: "none",
		TargetModules: modules, InitWeights: true}, "", "  ")
	if err != nil {
		return errors.Wrap(err, "qlayers.SaveAdapters")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return errors.Wrap(err, "qlayers.SaveAdapters")
	}
	slices.SortFunc(list, func(a, b safetensors.Tensor) int { return strings.Compare(a.Name, b.Name) })
	if err := safetensors.WriteFile(filepath.Join(dir, AdapterWeightsFile), list, map[string]string{"format": "pt"}); err != nil {
		return errors.WithMessage(err, "qlayers.SaveAdapters")
	}
	return fileio.WriteAtomic("qlayers.SaveAdapters", filepath.Join(dir, AdapterConfigFile), func(w io.Writer) error {
		_, err := w.Write(append(config, '\n'))
		return err
	})
}

// LoadAdapters reads the adapters SaveAdapters (or PEFT) wrote in dir into ctx: for each module
// of the file, the LoRA layer whose scope opts names so gets A and B (trainable; created if
// missing) and the scale lora_alpha/r (lora_alpha/√r with use_rslora, PEFT's rank-stabilized
// LoRA: LoRADense then takes a LoRA with RSLoRA set) and lora_dropout (LoRADropoutParam, which
// SaveAdapters writes back; the dropout LoRADense applies is its LoRA's, a training setting);
// target_modules and init_lora_weights are not read (the adapters of a method that rewrites the
// base, PEFT's "pissa", "olora", "corda" or "loftq", need that base in ctx). A layer is
// a scope holding a base kernel ("weights" or quantized components) in its "dense" sub-scope. Adapters saved as F16, BF16 or F64 are
// converted to float32, or to the dtype of the adapters the layer holds. It returns an error, loading nothing, for a nil context, a config whose r
// is not from 1 to 2^31 − 1, whose lora_alpha is not a finite positive number, whose scale is 0 as
// a float32 (subnormals flushed to zero, as XLA's CPU backend does: the adapters would be ignored),
// whose lora_dropout is not from 0 to 1, a config that sets
// use_dora, alpha_pattern or rank_pattern (which this plain LoRA does not compute) or a bias other
// than "none" (trained biases, which are not loaded), a module no layer of ctx is named, a module
// AdapterOptions.ModuleName gives two layers, a lora_A without its lora_B, a tensor other than a
// lora_A.weight and its lora_B.weight (PEFT's modules_to_save copies, embedding adapters
// lora_embedding_A/B, DoRA's lora_magnitude_vector, lora_bias's lora_B.bias: loading the rest
// would give a model without them), adapters whose dtypes or shapes do not fit r (checked
// before they are read), the layer's float kernel, its quantized components (as Base checks them)
// or its existing adapters, a value the float16 or bfloat16 adapters the layer holds would round
// to infinity (the layer's graph is built for their dtype), a layer whose adapters are merged (MergeLoRA's dense merge: UnmergeLoRA
// first), or a file without the config.
func LoadAdapters(ctx *context.Context, dir string, opts AdapterOptions) error {
	if ctx == nil {
		return errors.New("qlayers.LoadAdapters: nil context")
	}
	configText, err := fileio.ReadFile("qlayers.LoadAdapters", filepath.Join(dir, AdapterConfigFile), fileio.MaxConfigBytes)
	if err != nil {
		return err
	}
	f, err := safetensors.Open(filepath.Join(dir, AdapterWeightsFile))
	if err != nil {
		return errors.WithMessage(err, "qlayers.LoadAdapters")
	}
	defer func() { _ = f.Close() }()
	return errors.WithMessage(loadAdapters(ctx, configText, f, opts), "qlayers.LoadAdapters")
}

// loadAdapters loads the adapters of f, which configText (adapter_config.json) describes, into
// ctx.
func loadAdapters(ctx *context.Context, configText []byte, f *safetensors.File, opts AdapterOptions) error {
	var config adapterConfig
	if err := json.Unmarshal(configText, &config); err != nil {
		return errors.Wrap(err, AdapterConfigFile)
	}
	if config.PEFTType != "" && config.PEFTType != "LORA" {
		return errors.Errorf("%s has peft_type %q; accepted: LORA", AdapterConfigFile, config.PEFTType)
	}
	if err := fileio.CheckInt("r", config.R, 1, fileio.MaxCount); err != nil {
		return errors.WithMessage(err, AdapterConfigFile)
	}
	// lora_alpha itself is never a float32 (the scale below is checked as one): PEFT reads any
	// finite alpha, and SaveAdapters writes scale·r, beyond float32's range for a large scale and r.
	if a := config.LoRAAlpha; !(a > 0) || math.IsInf(a, 0) {
		return errors.Errorf("%s: lora_alpha = %g; accepted: a finite number above 0", AdapterConfigFile, a)
	}
	// lora_dropout is a training setting (PEFT drops the adapters' input while training): recorded
	// for SaveAdapters, applied by LoRADense as its LoRA says; a value torch's Dropout refuses is a
	// broken config.
	if d := config.LoRADropout; !(d >= 0 && d <= 1) {
		return errors.Errorf("%s: lora_dropout = %g; accepted: 0 to 1 (a dropout probability)", AdapterConfigFile, d)
	}
	for _, k := range []struct {
		key string
		set bool
	}{{"use_dora", config.UseDoRA}, {"alpha_pattern", len(config.AlphaPattern) > 0}, {"rank_pattern", len(config.RankPattern) > 0}} {
		if k.set {
			return errors.Errorf("%s sets %s (DoRA's magnitudes, or alphas and ranks per module); accepted: plain LoRA, "+
				"one r and lora_alpha for all modules", AdapterConfigFile, k.key)
		}
	}
	if config.Bias != "" && config.Bias != "none" {
		return errors.Errorf("%s has bias %q (the file holds trained biases, which are not loaded); accepted: \"none\"",
			AdapterConfigFile, config.Bias)
	}
	scale, key := config.LoRAAlpha/float64(config.R), "lora_alpha / r"
	if config.UseRSLoRA {
		scale, key = config.LoRAAlpha/math.Sqrt(float64(config.R)), "lora_alpha / √r (use_rslora)" // PEFT's rank-stabilized scaling
	}
	// A scale that is 0 as float32 (subnormals flushed) would ignore the adapters silently.
	if err := fileio.CheckFloatAbove(key, scale, 0); err != nil {
		return errors.WithMessagef(err, "%s: lora_alpha %g, r %d", AdapterConfigFile, config.LoRAAlpha, config.R)
	}

	// The layers of ctx, by module name.
	layers := map[string]string{}    // module -> layer scope
	shared := map[string][2]string{} // module -> two layer scopes ModuleName gives it
	loadPending(ctx, func(name string) bool { return name == WeightsName || name == componentName(0) })
	for v := range ctx.IterVariables() {
		if v.Name() == WeightsName || v.Name() == componentName(0) {
			if layer, ok := strings.CutSuffix(v.Scope(), "/"+Scope); ok {
				module := opts.moduleName(layer)
				if other, found := layers[module]; found && other != layer {
					shared[module] = [2]string{min(other, layer), max(other, layer)}
				}
				layers[module] = layer
			}
		}
	}
	// Every tensor is a lora_A or the lora_B of one: PEFT's other tensors change the model too, and
	// a model without them is not the adapted one.
	for _, name := range f.Names() {
		if strings.HasSuffix(name, ".lora_A.weight") {
			continue
		}
		if module, ok := strings.CutSuffix(name, ".lora_B.weight"); ok {
			if _, ok := f.Info(module + ".lora_A.weight"); ok {
				continue
			}
		}
		return errors.Errorf("tensor %q is not a lora_A.weight or the lora_B.weight of one; accepted: LoRA adapters of "+
			"linear layers only (not modules_to_save copies, embedding adapters lora_embedding_A/B, DoRA's "+
			"lora_magnitude_vector, lora_bias's lora_B.bias or other PEFT tensors)", name)
	}
	type pending struct {
		dense *context.Context
		a, b  *tensors.Tensor
	}
	var todo []pending
	for _, name := range f.Names() {
		module, ok := strings.CutSuffix(strings.TrimPrefix(name, adapterKeyPrefix), ".lora_A.weight")
		if !ok {
			continue
		}
		if pair, found := shared[module]; found {
			return moduleNameError(pair[0], pair[1], module)
		}
		layer, found := layers[module]
		if !found {
			return errors.Errorf("module %q (tensor %q) names no layer of the context; layers: %v", module, name,
				slices.Sorted(maps.Keys(layers)))
		}
		bName := strings.TrimSuffix(name, "lora_A.weight") + "lora_B.weight"
		aInfo, _ := f.Info(name)
		bInfo, ok := f.Info(bName)
		if !ok {
			return errors.Wrapf(safetensors.ErrNotFound, "module %q: tensor %q", module, bName)
		}
		if !adapterFits(aInfo, 0, config.R) || !adapterFits(bInfo, 1, config.R) {
			return errors.Errorf("module %q: lora_A %s, lora_B %s; accepted: float (F32, F16, BF16, F64) [r, in] and [out, r] "+
				"with r = %d", module, aInfo, bInfo, config.R)
		}
		aFile, err := f.ReadFloat32(name)
		if err != nil {
			return err
		}
		bFile, err := f.ReadFloat32(bName)
		if err != nil {
			return err
		}
		a, err := transposed32(aFile)
		if err != nil {
			return errors.WithMessagef(err, "module %q: lora_A", module)
		}
		b, err := transposed32(bFile)
		if err != nil {
			return errors.WithMessagef(err, "module %q: lora_B", module)
		}
		dense := ctx.InAbsPath(layer).In(Scope).Checked(false)
		if merged(dense) {
			// The merged kernel holds the adapters the layer has: UnmergeLoRA would subtract the
			// loaded ones from a float base, and LoRADense would not use them.
			return errors.Errorf("module %q: layer %q is merged (MergeLoRA); accepted: a layer not merged, UnmergeLoRA first",
				module, layer)
		}
		if w := dense.GetVariable(WeightsName); w != nil && w.Shape().Rank() == 2 {
			in, out := w.Shape().Dim(0), w.Shape().Dim(1)
			layout, err := storedLayout(dense)
			if err != nil {
				return errors.WithMessagef(err, "module %q", module)
			}
			if layout == OutIn {
				in, out = out, in
			}
			if a.Shape().Dim(0) != in || b.Shape().Dim(1) != out {
				return errors.Errorf("module %q: lora_A %s, lora_B %s for a layer of %d inputs and %d outputs; accepted: [r, %d] "+
					"and [%d, r]", module, aInfo, bInfo, in, out, in, out)
			}
		} else if len(storedComponents(dense)) > 0 {
			// A layer holding its quantized components alone: they must fit a kernel of the
			// adapters' dimensions, as Base checks them, or LoRADense would fail on them later.
			in, out := a.Shape().Dim(0), b.Shape().Dim(1)
			if _, _, err := Base(ctx, layer, in, out); err != nil {
				return errors.WithMessagef(err, "module %q: lora_A %s, lora_B %s (%d inputs, %d outputs) do not fit layer %q",
					module, aInfo, bInfo, in, out, layer)
			}
		}
		for _, x := range []struct {
			name string
			t    *tensors.Tensor
		}{{LoRAAName, a}, {LoRABName, b}} {
			if v := dense.GetVariable(x.name); v != nil &&
				(!slices.Equal(v.Shape().Dimensions, x.t.Shape().Dimensions) || !v.Shape().DType.IsFloat()) {
				return errors.Errorf("module %q: %s is %s in the file, %s in the context", module, x.name, x.t.Shape(), v.Shape())
			}
		}
		// Adapters the layer holds keep their dtype (LoRADense creates them in its input's).
		// A value past the dtype's range is refused rather than loaded as infinite: the layer's
		// graph is built for its dtype, so the adapters cannot be held in float32 instead.
		if v := dense.GetVariable(LoRAAName); v != nil {
			if a, err = convertedInRange(a, v.DType()); err != nil {
				return errors.WithMessagef(err, "module %q: lora_A (%s)", module, name)
			}
		}
		if v := dense.GetVariable(LoRABName); v != nil {
			if b, err = convertedInRange(b, v.DType()); err != nil {
				return errors.WithMessagef(err, "module %q: lora_B (%s)", module, bName)
			}
		}
		todo = append(todo, pending{dense: dense, a: a, b: b})
	}
	if len(todo) == 0 {
		return errors.Errorf("%s holds no lora_A weights", AdapterWeightsFile)
	}
	for _, p := range todo {
		for _, x := range []struct {
			name string
			t    *tensors.Tensor
		}{{LoRAAName, p.a}, {LoRABName, p.b}} {
			if v := p.dense.GetVariable(x.name); v != nil {
				v.MustSetValue(x.t)
				v.SetTrainable(true)
			} else {
				p.dense.VariableWithValue(x.name, x.t).SetTrainable(true)
			}
		}
		p.dense.SetParam(LoRAScaleParam, scale)
		p.dense.SetParam(LoRADropoutParam, config.LoRADropout)
	}
	return nil
}

// adapterFits reports whether a PEFT adapter tensor is a float matrix with r at rankAxis (0 for
// lora_A [r, in], 1 for lora_B [out, r]) and a positive other dimension.
func adapterFits(info *safetensors.Info, rankAxis, r int) bool {
	switch info.DType {
	case safetensors.F32, safetensors.F16, safetensors.BF16, safetensors.F64:
	default:
		return false
	}
	return len(info.Shape) == 2 && info.Shape[rankAxis] == r && info.Shape[1-rankAxis] >= 1
}

// convertedFrom32 returns the float32 tensor t in the float dtype, rounded to nearest as XLA
// converts (the conversion LoRADense applies to float32 adapters in its graph).
func convertedFrom32(t *tensors.Tensor, dtype dtypes.DType) *tensors.Tensor {
	var values []float32
	t.MustConstFlatData(func(flat any) { values = flat.([]float32) })
	dims := t.Shape().Dimensions
	switch dtype {
	case dtypes.Float64:
		return tensors.FromFlatDataAndDimensions(hostdata.Convert(values, func(x float32) float64 { return float64(x) }), dims...)
	case dtypes.BFloat16:
		return tensors.FromFlatDataAndDimensions(hostdata.Convert(values, xlafloat.ToBF16), dims...)
	case dtypes.Float16:
		return tensors.FromFlatDataAndDimensions(hostdata.Convert(values, float16.Fromfloat32), dims...)
	}
	return t
}

// convertedInRange is convertedFrom32, with an error naming the value and the dtype's range for
// a finite value the dtype rounds to infinity (past float16's ±65504 or bfloat16's
// ±3.3895314e38).
func convertedInRange(t *tensors.Tensor, dtype dtypes.DType) (*tensors.Tensor, error) {
	var largest float32
	switch dtype {
	case dtypes.Float16:
		largest = float16.Float16(0x7bff).Float32()
	case dtypes.BFloat16:
		largest = bfloat16.FromBits(0x7f7f).Float32()
	}
	var values []float32
	t.MustConstFlatData(func(flat any) { values = flat.([]float32) })
	for _, x := range values {
		if largest == 0 || math.IsInf(float64(x), 0) {
			break
		}
		var y float32
		if dtype == dtypes.Float16 {
			y = float16.Fromfloat32(x).Float32()
		} else {
			y = xlafloat.ToBF16(x).Float32()
		}
		if math.IsInf(float64(y), 0) {
			return nil, errors.Errorf("value %g is outside %s's range [%g, %g]; accepted: values the "+
				"layer's %s adapters can hold", x, dtype, -largest, largest, dtype)
		}
	}
	return convertedFrom32(t, dtype), nil
}

// transposed32 returns the transpose of a rank-2 float tensor as float32 (adapters are saved as
// PEFT's float32 [out, in] Linear weights).
func transposed32(t *tensors.Tensor) (*tensors.Tensor, error) {
	s := t.Shape()
	if s.Rank() != 2 || !s.DType.IsFloat() {
		return nil, errors.Errorf("adapter %s; accepted: a rank-2 float tensor", s)
	}
	rows, cols := s.Dim(0), s.Dim(1)
	var values []float32
	var err error
	t.MustConstFlatData(func(flat any) {
		switch v := flat.(type) {
		case []float32:
			values = v
		case []float64:
			values = hostdata.Convert(v, func(x float64) float32 { return float32(x) })
		case []bfloat16.BFloat16:
			values = hostdata.Convert(v, bfloat16.BFloat16.Float32)
		case []float16.Float16:
			values = hostdata.Convert(v, float16.Float16.Float32)
		default:
			err = errors.Errorf("adapter %s; accepted: float32, float64, bfloat16 or float16", s)
		}
		if values != nil {
			out := make([]float32, len(values))
			for i, v := range values { // by element: a dimension of an empty tensor bounds nothing
				out[i%cols*rows+i/cols] = v
			}
			values = out
		}
	})
	if err != nil {
		return nil, err
	}
	for _, v := range values {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, errors.Errorf("adapter %s holds %v; accepted: finite values", s, v)
		}
	}
	return tensors.FromFlatDataAndDimensions(values, cols, rows), nil
}
