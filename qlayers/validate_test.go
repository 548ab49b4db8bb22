package qlayers_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/qlayers"
	"github.com/quanta-ml/quanta/safetensors"
)

// TestNilContext: every host function given a nil context returns an error saying so.
func TestNilContext(t *testing.T) {
	backend := testutil.Backend(t)
	w := mustFlat(t, tensors.FromValue(matrix(11, 24, 40)))
	for name, err := range map[string]error{
		"StoreBase":    qlayers.StoreBase(nil, "/proj", w, nil, qlayers.OutIn),
		"MergeLoRA":    qlayers.MergeLoRA(nil, backend, qlayers.MergeOptions{}),
		"UnmergeLoRA":  qlayers.UnmergeLoRA(nil, backend),
		"SaveAdapters": qlayers.SaveAdapters(nil, t.TempDir(), qlayers.AdapterOptions{}),
		"LoadAdapters": qlayers.LoadAdapters(nil, t.TempDir(), qlayers.AdapterOptions{}),
		"Base": func() error {
			_, _, err := qlayers.Base(nil, "/proj", 40, 24)
			return err
		}(),
	} {
		if err == nil || !strings.Contains(err.Error(), "nil context") {
			t.Errorf("%s(nil context): %v; want an error naming the nil context", name, err)
		}
	}
}

// TestStoreBaseLayout: a layout other than InOut and OutIn is refused, storing nothing.
func TestStoreBaseLayout(t *testing.T) {
	w := mustFlat(t, tensors.FromValue(matrix(11, 24, 40)))
	ctx := context.New()
	err := qlayers.StoreBase(ctx, "/proj", w, nil, qlayers.KernelLayout(7))
	if err == nil || !strings.Contains(err.Error(), "layout KernelLayout(7); accepted: InOut or OutIn") {
		t.Errorf("StoreBase(KernelLayout(7)): %v", err)
	}
	if ctx.NumVariables() != 0 {
		t.Errorf("the refused StoreBase left %d variables", ctx.NumVariables())
	}
}

// TestStoreBaseDeleted: a deleted array is an error wrapping implicitarray.ErrDeleted, storing
// nothing, not a panic from reading its components.
func TestStoreBaseDeleted(t *testing.T) {
	w := mustFlat(t, tensors.FromValue(matrix(11, 24, 40)))
	w.Delete()
	ctx := context.New()
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("StoreBase of a deleted array panicked: %v", r)
			}
		}()
		err = qlayers.StoreBase(ctx, "/proj", w, nil, qlayers.OutIn)
	}()
	if !errors.Is(err, implicitarray.ErrDeleted) || !strings.Contains(err.Error(), `qlayers.StoreBase("/proj")`) {
		t.Errorf("StoreBase(deleted array): %v; want an error wrapping ErrDeleted naming the scope", err)
	}
	if ctx.NumVariables() != 0 {
		t.Errorf("the refused StoreBase left %d variables", ctx.NumVariables())
	}
}

// TestBadLayoutParam: a KernelLayoutParam that is neither "in_out" nor "out_in" (an edited or
// foreign checkpoint) is an error of the host functions that read it, naming the parameter, not
// a panic.
func TestBadLayoutParam(t *testing.T) {
	backend := testutil.Backend(t)
	dir := savedAdapters(t, loraContext(t, nf4DQ, true))
	bad := func(float bool) *context.Context {
		ctx := loraContext(t, nf4DQ, float)
		ctx.InAbsPath(scope).SetParam(qlayers.KernelLayoutParam, "outin")
		return ctx
	}
	for name, call := range map[string]func() error{
		"Base": func() error {
			_, _, err := qlayers.Base(bad(false), "/layer", inDim, outDim)
			return err
		},
		"SaveAdapters": func() error { return qlayers.SaveAdapters(bad(false), t.TempDir(), qlayers.AdapterOptions{}) },
		"MergeLoRA":    func() error { return qlayers.MergeLoRA(bad(false), backend, qlayers.MergeOptions{}) },
		"UnmergeLoRA":  func() error { return qlayers.UnmergeLoRA(bad(false), backend) },
		"LoadAdapters": func() error { return qlayers.LoadAdapters(bad(true), dir, qlayers.AdapterOptions{}) },
	} {
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic: %v", r)
				}
			}()
			err = call()
		}()
		if want := "parameter quanta_kernel_layout=outin"; err == nil || strings.HasPrefix(err.Error(), "panic") ||
			!strings.Contains(err.Error(), want) {
			t.Errorf("%s with %s=\"outin\": %v; want an error containing %q", name, qlayers.KernelLayoutParam, err, want)
		}
	}
}

// TestBaseAfterDelete: Base once an array it returned was deleted (which finalizes the stored
// kernel) is an error wrapping implicitarray.ErrDeleted, as StoreBase's is, not a report of
// components of an invalid dtype; Dense on that layer panics with the same error, not GoMLX's
// "Tensor shape is invalid" while feeding the parameters.
func TestBaseAfterDelete(t *testing.T) {
	w := mustFlat(t, tensors.FromValue(matrix(11, 24, 40)))
	ctx := context.New()
	if err := qlayers.StoreBase(ctx, "/proj", w, nil, qlayers.OutIn); err != nil {
		t.Fatal(err)
	}
	base, _, err := qlayers.Base(ctx, "/proj", 40, 24)
	if err != nil {
		t.Fatal(err)
	}
	base.(*nf4.Array).Delete()
	if _, _, err := qlayers.Base(ctx, "/proj", 40, 24); !errors.Is(err, implicitarray.ErrDeleted) ||
		!strings.Contains(err.Error(), `qlayers.Base("/proj")`) {
		t.Errorf("Base after Delete: %v; want an error wrapping ErrDeleted naming the scope", err)
	}
	// Dense on the finalized kernel: the same error, naming Dense and its scope.
	func() {
		defer testutil.RecoverError(&err)
		err = nil
		context.MustExecOnce(testutil.Backend(t), ctx, func(ctx *context.Context, x *graph.Node) *graph.Node {
			return qlayers.Dense(ctx.In("proj").Checked(false), x, false, 24, nf4DQ)
		}, matrix(3, 2, 40))
	}()
	if !errors.Is(err, implicitarray.ErrDeleted) || !strings.Contains(err.Error(), `qlayers.Dense in scope "/proj/dense"`) {
		t.Errorf("Dense after Delete: %v; want an error wrapping ErrDeleted naming qlayers.Dense and the scope", err)
	}
}

// TestBaseHugeBlockSize: a recorded format whose block size no array of the kernel's size can
// have is an error before a template is sized by it.
func TestBaseHugeBlockSize(t *testing.T) {
	w := mustFlat(t, tensors.FromValue(matrix(11, 24, 40)))
	ctx := context.New()
	if err := qlayers.StoreBase(ctx, "/proj", w, nil, qlayers.OutIn); err != nil {
		t.Fatal(err)
	}
	ctx.InAbsPath("/proj").In(qlayers.Scope).SetParam(qlayers.FormatParam, "nf4/1099511627776/flat")
	var err error
	testutil.AllocatesAtMost(t, "Base", 16<<20, func() { _, _, err = qlayers.Base(ctx, "/proj", 40, 24) })
	if err == nil || !strings.Contains(err.Error(), "block size 1099511627776") {
		t.Errorf("Base with block size 2^40: %v", err)
	}
}

// TestLoadAdaptersChecks: adapter files whose config or tensors do not fit are errors found
// before the tensors are read, naming the key; adapters saved in F16 are converted.
func TestLoadAdaptersChecks(t *testing.T) {
	ctx := loraContext(t, nf4DQ, false)
	dir := savedAdapters(t, ctx)
	config, err := os.ReadFile(filepath.Join(dir, qlayers.AdapterConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	weights := safetensors.MustOpen(filepath.Join(dir, qlayers.AdapterWeightsFile))
	var list []safetensors.Tensor
	for _, name := range weights.Names() {
		info, _ := weights.Info(name)
		list = append(list, safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: must(weights.ReadBytes(name))})
	}
	_ = weights.Close()
	write := func(t *testing.T, config []byte, list []safetensors.Tensor) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, qlayers.AdapterConfigFile), config, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := safetensors.WriteFile(filepath.Join(dir, qlayers.AdapterWeightsFile), list, nil); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	setConfig := func(old, new string) []byte { return []byte(strings.Replace(string(config), old, new, 1)) }
	withB := func(shape []int, data []byte) []safetensors.Tensor {
		out := append([]safetensors.Tensor(nil), list...)
		out[1].Shape, out[1].Data = shape, data
		return out
	}
	with := func(name string, shape ...int) []safetensors.Tensor {
		n := 1
		for _, d := range shape {
			n *= d
		}
		return append(append([]safetensors.Tensor(nil), list...), safetensors.Tensor{Name: name, DType: safetensors.F32, Shape: shape, Data: make([]byte, 4*n)})
	}
	for _, tc := range []struct {
		name   string
		config []byte
		list   []safetensors.Tensor
		want   string
	}{
		{"rank 0", setConfig(`"r": 4`, `"r": 0`), list, "adapter_config.json: r = 0; accepted: 1 to 2147483647"},
		{"negative alpha", setConfig(`"lora_alpha": 8`, `"lora_alpha": -8`), list, "lora_alpha = -8; accepted: a finite number above 0"},
		// lora_alpha is a normal float32, but the scale lora_alpha/r (/√r) is subnormal: 0 on XLA's CPU
		// backend, the adapters ignored.
		{"scale flushed to zero", setConfig(`"lora_alpha": 8`, `"lora_alpha": 4e-38`), list,
			"lora_alpha / r = 1e-38, 0 as float32"},
		{"rslora scale flushed to zero", setConfig(`"lora_alpha": 8`, `"use_rslora": true, "lora_alpha": 2e-38`), list,
			"lora_alpha / √r (use_rslora) = 1e-38, 0 as float32"},
		{"missing lora_B", config, list[:1], `tensor "base_model.model.layer.lora_B.weight"`},
		{"DoRA", setConfig(`"r": 4`, `"use_dora": true, "r": 4`), list, "adapter_config.json sets use_dora"},
		{"alpha per module", setConfig(`"r": 4`, `"alpha_pattern": {"layer": 16}, "r": 4`), list, "adapter_config.json sets alpha_pattern"},
		{"trained biases", setConfig(`"bias": "none"`, `"bias": "lora_only"`), list, `adapter_config.json has bias "lora_only"`},
		// lora_dropout is a training setting, not applied here, but a value torch's Dropout refuses
		// is a broken config.
		{"negative dropout", setConfig(`"lora_dropout": 0`, `"lora_dropout": -0.1`), list, "adapter_config.json: lora_dropout = -0.1; accepted: 0 to 1"},
		{"dropout above 1", setConfig(`"lora_dropout": 0`, `"lora_dropout": 1.5`), list, "adapter_config.json: lora_dropout = 1.5; accepted: 0 to 1"},
		{"rank per module", setConfig(`"r": 4`, `"rank_pattern": {"layer": 2}, "r": 4`), list, "adapter_config.json sets rank_pattern"},
		{"lora_B of another rank", config, withB([]int{outDim, 2}, make([]byte, 4*outDim*2)), "lora_B base_model.model.layer.lora_B.weight F32[128 2]"},
		{"empty lora_B with a huge dimension", config, withB([]int{1 << 40, 0}, []byte{}), "F32[1099511627776 0]"},
		// Tensors PEFT saves beside lora_A/lora_B: each would change the model, so none is skipped.
		{"modules_to_save", config, with("base_model.model.head.weight", 2, 3), `tensor "base_model.model.head.weight"`},
		{"embedding adapter", config, with("base_model.model.embed.lora_embedding_A", 4, 10), `tensor "base_model.model.embed.lora_embedding_A"`},
		{"DoRA magnitude", config, with("base_model.model.layer.lora_magnitude_vector.weight", outDim), `tensor "base_model.model.layer.lora_magnitude_vector.weight"`},
		{"DoRA magnitude (PEFT < 0.12)", config, with("base_model.model.layer.lora_magnitude_vector", outDim), `tensor "base_model.model.layer.lora_magnitude_vector"`},
		{"lora_B bias", config, with("base_model.model.layer.lora_B.bias", outDim), `tensor "base_model.model.layer.lora_B.bias"`},
		{"lora_B without lora_A", config, with("base_model.model.other.lora_B.weight", outDim, 4), `tensor "base_model.model.other.lora_B.weight"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fresh := quantizedContext(t, nf4DQ)
			before := fresh.NumVariables()
			err := qlayers.LoadAdapters(fresh, write(t, tc.config, tc.list), qlayers.AdapterOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want one containing %q", err, tc.want)
			}
			if fresh.NumVariables() != before {
				t.Errorf("the failed load changed the variables: %d, had %d", fresh.NumVariables(), before)
			}
		})
	}

	// PEFT's rank-stabilized LoRA scales by lora_alpha/√r; empty patterns and use_dora false are plain LoRA.
	for _, tc := range []struct {
		name, old, new string
		scale          float64
	}{
		{"plain", `"r": 4`, `"use_rslora": false, "use_dora": false, "alpha_pattern": {}, "rank_pattern": {}, "r": 4`, 8.0 / 4},
		{"rslora", `"r": 4`, `"use_rslora": true, "r": 4`, 8.0 / 2},
		{"dropout", `"lora_dropout": 0`, `"lora_dropout": 0.05`, 8.0 / 4}, // PEFT's usual: training only
		{"dropout 1", `"lora_dropout": 0`, `"lora_dropout": 1`, 8.0 / 4},  // torch's Dropout takes 1
		// PEFT's target_modules may be a regular expression, and init_lora_weights a method's name:
		// neither changes the adapters' product.
		{"target_modules regexp", `"target_modules": [`, `"target_modules": ".*layer", "x": [`, 8.0 / 4},
		{"gaussian init", `"init_lora_weights": true`, `"init_lora_weights": "gaussian"`, 8.0 / 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fresh := floatContext()
			if err := qlayers.LoadAdapters(fresh, write(t, setConfig(tc.old, tc.new), list), qlayers.AdapterOptions{}); err != nil {
				t.Fatalf("%+v", err)
			}
			if s, _ := fresh.In("layer").In(qlayers.Scope).GetParam(qlayers.LoRAScaleParam); s != tc.scale {
				t.Errorf("scale %v, want %v", s, tc.scale)
			}
		})
	}

	t.Run("F16", func(t *testing.T) {
		var f16 []safetensors.Tensor
		var want [][]float32
		for _, x := range list {
			values := make([]float32, len(x.Data)/4)
			var data []byte
			for i := range values {
				// A multiple of 1/1024 in (-2, 2): exact in F16 (sign, 11 significant bits).
				v := float32(math.Round(float64(math.Float32frombits(binary.LittleEndian.Uint32(x.Data[4*i:])))*1024) / 1024)
				values[i] = v
				data = binary.LittleEndian.AppendUint16(data, f16Bits(v))
			}
			want = append(want, values)
			f16 = append(f16, safetensors.Tensor{Name: x.Name, DType: safetensors.F16, Shape: x.Shape, Data: data})
		}
		fresh := quantizedContext(t, nf4DQ)
		if err := qlayers.LoadAdapters(fresh, write(t, config, f16), qlayers.AdapterOptions{}); err != nil {
			t.Fatalf("%+v", err)
		}
		dense := fresh.In("layer").In(qlayers.Scope)
		a := tensors.MustCopyFlatData[float32](dense.GetVariable(qlayers.LoRAAName).MustValue()) // (in, r) = lora_A transposed
		r := loraCfg.Rank
		for i := range inDim {
			for k := range r {
				if a[i*r+k] != want[0][k*inDim+i] {
					t.Fatalf("lora_a[%d][%d] = %v, want the file's lora_A[%d][%d] = %v", i, k, a[i*r+k], k, i, want[0][k*inDim+i])
				}
			}
		}
	})
}

// f16Bits encodes a value that IEEE half precision holds exactly as a normal number (here, a
// multiple of 1/1024 below 2 in magnitude).
func f16Bits(v float32) uint16 {
	if v == 0 {
		return 0
	}
	bits := math.Float32bits(v)
	exp := int(bits>>23&0xFF) - 127 + 15
	return uint16(bits>>16)&0x8000 | uint16(exp)<<10 | uint16(bits>>13)&0x3FF
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestLoadAdaptersLayerDims: adapters whose input or output width is not the float kernel's are
// refused.
func TestLoadAdaptersLayerDims(t *testing.T) {
	ctx := fuzzLayer() // "/layer": 8 inputs, 4 outputs
	dense := ctx.In("layer").In(qlayers.Scope)
	dense.VariableWithValue(qlayers.LoRAAName, matrix(2, 9, 2)) // 9 inputs
	dense.VariableWithValue(qlayers.LoRABName, matrix(3, 2, 4))
	dense.SetParam(qlayers.LoRAScaleParam, 1.0)
	dir := savedAdapters(t, ctx)
	err := qlayers.LoadAdapters(fuzzLayer(), dir, qlayers.AdapterOptions{})
	if want := "for a layer of 8 inputs and 4 outputs; accepted: [r, 8] and [4, r]"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v; want one containing %q", err, want)
	}
}

// TestLoadAdaptersQuantizedLayerDims: adapters whose sizes do not fit a layer holding only its
// quantized components (64 inputs, 128 outputs; no float kernel) fail at load, naming the module,
// the layer and the sizes, and load nothing; adapters that fit load.
func TestLoadAdaptersQuantizedLayerDims(t *testing.T) {
	for _, cfg := range []quanta.Config{nf4DQ, {Type: quanta.Int8}, {Type: quanta.Binary, Scaled: true}} {
		for _, tc := range []struct {
			in, out int
			want    string // "" for no error
		}{
			{inDim, outDim, ""},
			{inDim + 4, outDim, `(68 inputs, 128 outputs) do not fit layer "/layer"`},
			{inDim, outDim + 64, `(64 inputs, 192 outputs) do not fit layer "/layer"`},
		} {
			t.Run(fmt.Sprintf("%s/%dx%d", cfg.Type, tc.in, tc.out), func(t *testing.T) {
				src := context.New()
				dense := src.In("layer").In(qlayers.Scope)
				dense.VariableWithValue(qlayers.WeightsName, matrix(1, tc.in, tc.out))
				dense.VariableWithValue(qlayers.LoRAAName, matrix(2, tc.in, 2))
				dense.VariableWithValue(qlayers.LoRABName, matrix(3, 2, tc.out))
				dense.SetParam(qlayers.LoRAScaleParam, 1.0)
				dir := savedAdapters(t, src)
				ctx := floatContext()
				if _, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{{Scope: ".*", Config: cfg}}, qlayers.Options{}); err != nil {
					t.Fatal(err)
				}
				err := qlayers.LoadAdapters(ctx, dir, qlayers.AdapterOptions{})
				if tc.want == "" {
					if err != nil {
						t.Fatalf("%+v", err)
					}
					return
				}
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `module "layer"`) {
					t.Errorf("error %v; want one naming the module and containing %q", err, tc.want)
				}
				if v := ctx.GetVariableByScopeAndName(scope, qlayers.LoRAAName); v != nil {
					t.Errorf("a failed load set %s", v.ScopeAndName())
				}
			})
		}
	}
}
