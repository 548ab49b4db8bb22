package qlayers_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/checkpoints"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/qlayers"
	"github.com/quanta-ml/quanta/safetensors"
)

var (
	loraCfg = qlayers.LoRA{Rank: 4, Alpha: 8}
	nf4DQ   = quanta.Config{DoubleQuant: true}
)

// loraContext returns a context with one layer's float kernel (inDim, outDim) and biases in
// "/layer/dense", its kernel quantized as cfg says unless float, and adapters A, B set to
// non-zero values (B starts at zero, which would hide A's gradient).
func loraContext(t *testing.T, cfg quanta.Config, float bool) *context.Context {
	t.Helper()
	var ctx *context.Context
	if float {
		ctx = floatContext()
	} else {
		ctx = quantizedContext(t, cfg)
	}
	dense := ctx.In("layer").In(qlayers.Scope)
	dense.VariableWithValue(qlayers.LoRAAName, matrix(5, inDim, loraCfg.Rank))
	dense.VariableWithValue(qlayers.LoRABName, matrix(6, loraCfg.Rank, outDim))
	dense.SetParam(qlayers.LoRAScaleParam, loraCfg.Scale())
	return ctx
}

// quantizedContext returns floatContext's layer with its kernel quantized as cfg says.
func quantizedContext(t *testing.T, cfg quanta.Config) *context.Context {
	t.Helper()
	ctx := floatContext()
	if _, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{{Scope: ".*", Config: cfg}}, qlayers.Options{}); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// savedAdapters saves the adapters of ctx (SaveAdapters) in a fresh temporary folder and returns
// it.
func savedAdapters(t testing.TB, ctx *context.Context) string {
	t.Helper()
	dir := t.TempDir()
	if err := qlayers.SaveAdapters(ctx, dir, qlayers.AdapterOptions{}); err != nil {
		t.Fatalf("%+v", err)
	}
	return dir
}

func loraLayer(cfg quanta.Config) func(ctx *context.Context, x *graph.Node) *graph.Node {
	return func(ctx *context.Context, x *graph.Node) *graph.Node {
		return qlayers.LoRADense(ctx.In("layer").Checked(false), x, true, outDim, cfg, loraCfg)
	}
}

// baseKernel returns the dense value of the layer's base kernel (the quantized one materialized).
func baseKernel(t *testing.T, ctx *context.Context) *tensors.Tensor {
	t.Helper()
	if w := ctx.In("layer").In(qlayers.Scope).GetVariable(qlayers.WeightsName); w != nil {
		return w.MustValue()
	}
	base, _, err := qlayers.Base(ctx, "/layer", inDim, outDim)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	return testutil.Materialize(t, base)
}

// TestLoRAGradients: with a quantized base (NF4-DQ, int8) or a float one, the gradients of
// sum(LoRADense(x)·c) with respect to A, B and x equal those of the float reference
// y = x·W + (α/r)·(x·A)·B + b, W the base's dense value, built from plain GoMLX ops; and the
// reference's gradient of A and B matches central finite differences in float64.
func TestLoRAGradients(t *testing.T) {
	backend := testutil.Backend(t)
	x := matrix(3, batch, inDim)
	c := matrix(4, batch, outDim)
	for _, tc := range []struct {
		name  string
		cfg   quanta.Config
		float bool
	}{{"nf4-dq", nf4DQ, false}, {"int8", quanta.Config{Type: quanta.Int8}, false}, {"float", quanta.Config{}, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := loraContext(t, tc.cfg, tc.float)
			outs := context.MustExecOnceN(backend, ctx, func(ctx *context.Context, x, c *graph.Node) []*graph.Node {
				ctx.SetTraining(x.Graph(), true)
				y := loraLayer(tc.cfg)(ctx, x)
				dense := ctx.In("layer").In(qlayers.Scope)
				a := dense.GetVariable(qlayers.LoRAAName).ValueGraph(x.Graph())
				b := dense.GetVariable(qlayers.LoRABName).ValueGraph(x.Graph())
				return graph.Gradient(graph.ReduceAllSum(graph.Mul(y, c)), a, b, x)
			}, x, c)
			w := baseKernel(t, ctx)
			dense := ctx.In("layer").In(qlayers.Scope)
			a, b := dense.GetVariable(qlayers.LoRAAName).MustValue(), dense.GetVariable(qlayers.LoRABName).MustValue()
			bias := dense.GetVariable(qlayers.BiasesName).MustValue()
			reference := func(x, w, a, b, bias, c *graph.Node) *graph.Node {
				y := graph.Add(graph.Add(graph.Dot(x, w), graph.MulScalar(graph.Dot(graph.Dot(x, a), b), loraCfg.Scale())),
					graph.InsertAxes(bias, 0))
				return graph.ReduceAllSum(graph.Mul(y, c))
			}
			want := graph.MustExecOnceN(backend, func(x, w, a, b, bias, c *graph.Node) []*graph.Node {
				return graph.Gradient(reference(x, w, a, b, bias, c), a, b, x)
			}, x, w, a, b, bias, c)
			for i, name := range []string{"A", "B", "x"} {
				got, ref := testutil.Float64s(t, outs[i]), testutil.Float64s(t, want[i])
				if d, scale := testutil.MaxAbsDiff(got, ref); d > 1e-5*max(1, scale) {
					t.Errorf("gradient of %s differs from the float reference by %g (scale %g)", name, d, scale)
				}
			}
			// Central differences of the reference in float64, for a few entries of A and B.
			f64 := func(t32 *tensors.Tensor) *tensors.Tensor {
				return graph.MustExecOnce(backend, func(v *graph.Node) *graph.Node { return graph.ConvertDType(v, dtypes.Float64) }, t32)
			}
			loss := graph.MustNewExec(backend, reference)
			defer loss.Finalize()
			x64, w64, bias64, c64 := f64(tensors.FromValue(x)), f64(w), f64(bias), f64(tensors.FromValue(c))
			for _, which := range []int{0, 1} {
				base := testutil.Float64s(t, []*tensors.Tensor{a, b}[which])
				grad := testutil.Float64s(t, want[which])
				for _, idx := range []int{0, 7, len(base) - 1} {
					const h = 1e-4
					eval := func(delta float64) float64 {
						v := slices.Clone(base)
						v[idx] += delta
						dims := []*tensors.Tensor{a, b}[which].Shape().Dimensions
						changed := tensors.FromFlatDataAndDimensions(v, dims...)
						args := []*tensors.Tensor{f64(a), f64(b)}
						args[which] = changed
						return testutil.Float64s(t, loss.MustExec(x64, w64, args[0], args[1], bias64, c64)[0])[0]
					}
					fd := (eval(h) - eval(-h)) / (2 * h)
					if math.Abs(fd-grad[idx]) > 1e-3*max(1, math.Abs(fd)) {
						t.Errorf("%s[%d]: gradient %v, finite difference %v", []string{"A", "B"}[which], idx, grad[idx], fd)
					}
				}
			}
		})
	}
}

// TestLoRATrainingStepTrainsAdaptersOnly: a QLoRA training step with Adam (two stacked LoRA
// layers on NF4-DQ bases) changes A and B only; the base components and biases are bitwise
// unchanged, only A and B are trainable, and the optimizer keeps moments for A and B alone.
func TestLoRATrainingStepTrainsAdaptersOnly(t *testing.T) {
	backend := testutil.Backend(t)
	ctx := context.New()
	model := func(ctx *context.Context, x *graph.Node) *graph.Node {
		h := qlayers.LoRADense(ctx.In("hidden").Checked(false), x, true, outDim, nf4DQ, loraCfg)
		return qlayers.LoRADense(ctx.In("out").Checked(false), graph.Tanh(h), true, 8, nf4DQ, loraCfg)
	}
	// Build the float model once (creates the kernels), then quantize its kernels as the base.
	x, labels := matrix(3, batch, inDim), matrix(4, batch, 8)
	context.MustExecOnce(backend, ctx, model, x)
	ctx.In("hidden").In(qlayers.Scope).GetVariable(qlayers.BiasesName).MustSetValue(tensors.FromValue(values(9, outDim)))
	if _, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{{Scope: ".*", Config: nf4DQ}}, qlayers.Options{}); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, ctx)
	opt := optimizers.Adam().LearningRate(1e-2).Done()
	step := context.MustNewExec(backend, ctx, func(ctx *context.Context, x, labels *graph.Node) *graph.Node {
		g := x.Graph()
		ctx.SetTraining(g, true)
		loss := graph.ReduceAllMean(graph.Square(graph.Sub(model(ctx, x), labels)))
		opt.UpdateGraph(ctx, g, loss)
		return loss
	})
	for range 3 {
		step.MustExec(x, labels)
	}
	after := snapshot(t, ctx)
	for name, v := range before {
		isAdapter := strings.HasSuffix(name, "/"+qlayers.LoRAAName) || strings.HasSuffix(name, "/"+qlayers.LoRABName)
		changed := !slices.Equal(v, after[name])
		if isAdapter != changed {
			t.Errorf("%s: changed=%v, want changed only for adapters", name, changed)
		}
	}
	var moments []string
	for v := range ctx.IterVariables() {
		name := v.ScopeAndName()
		isAdapter := v.Name() == qlayers.LoRAAName || v.Name() == qlayers.LoRABName
		if v.Trainable != isAdapter {
			t.Errorf("%s: trainable=%v", name, v.Trainable)
		}
		if strings.Contains(name, "_moment") {
			moments = append(moments, name)
			if !strings.Contains(name, "/"+qlayers.LoRAAName+"_") && !strings.Contains(name, "/"+qlayers.LoRABName+"_") {
				t.Errorf("optimizer state %s belongs to no adapter", name)
			}
		}
	}
	if len(moments) != 2*2*2 { // 2 layers × (A, B) × 2 moments
		t.Errorf("optimizer moments %v, want 8 (two per adapter)", moments)
	}
}

// snapshot returns the bytes of every variable of ctx, by scope and name.
func snapshot(t *testing.T, ctx *context.Context) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for v := range ctx.IterVariables() {
		if err := v.MustValue().ConstBytes(func(data []byte) { out[v.ScopeAndName()] = slices.Clone(data) }); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestLoRAFreshAdapterIsIdentity: B starts at zero, so a fresh LoRA layer computes the base
// layer: the same output as Dense on the stored quantized kernel.
func TestLoRAFreshAdapterIsIdentity(t *testing.T) {
	backend := testutil.Backend(t)
	ctx := floatContext()
	if _, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{{Scope: ".*", Config: nf4DQ}}, qlayers.Options{}); err != nil {
		t.Fatal(err)
	}
	x := matrix(3, batch, inDim)
	want := context.MustExecOnce(backend, ctx, layer(nf4DQ), x)
	got := context.MustExecOnce(backend, ctx, loraLayer(nf4DQ), x)
	if d := maxDiff(flat(t, got), flat(t, want)); d != 0 {
		t.Errorf("fresh LoRA output differs from Dense by %g", d)
	}
	dense := ctx.In("layer").In(qlayers.Scope)
	bound := float32(1 / math.Sqrt(inDim))
	for _, v := range flat(t, dense.GetVariable(qlayers.LoRAAName).MustValue()) {
		if v < -bound || v > bound {
			t.Fatalf("A holds %v, outside ±1/√in = ±%v", v, bound)
		}
	}
	if b := flat(t, dense.GetVariable(qlayers.LoRABName).MustValue()); slices.ContainsFunc(b, func(v float32) bool { return v != 0 }) {
		t.Errorf("B does not start at zero")
	}
}

// TestLoRAMerge: a dense merge gives the output of the unmerged layer (to float rounding) and
// unmerging restores the quantized base exactly; a float base merges into its kernel and unmerges
// to it within float rounding; Requantize stores a quantized kernel of the merged weight (within
// NF4's rounding of the merged layer) and removes the adapters.
// TestLoRALoadedCheckpoint: the adapters of a LoRA checkpoint loaded the GoMLX way (lazily, as a
// graph first uses its variables) are found by MergeLoRA and SaveAdapters, and its layers by
// LoadAdapters, as those of a context loaded with Immediate: the merge happens (the adapters are
// removed by a Requantize merge), not a silent no-op.
func TestLoRALoadedCheckpoint(t *testing.T) {
	backend := testutil.Backend(t)
	dir := t.TempDir()
	checkpoint, err := checkpoints.Build(loraContext(t, nf4DQ, false)).Dir(dir).Done()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.Save(); err != nil {
		t.Fatal(err)
	}
	load := func() *context.Context {
		ctx := context.New()
		if _, err := checkpoints.Build(ctx).Dir(dir).Done(); err != nil {
			t.Fatal(err)
		}
		return ctx
	}
	if err := qlayers.SaveAdapters(load(), filepath.Join(dir, "adapters"), qlayers.AdapterOptions{}); err != nil {
		t.Errorf("SaveAdapters: %v", err)
	}
	if err := qlayers.LoadAdapters(load(), filepath.Join(dir, "adapters"), qlayers.AdapterOptions{}); err != nil {
		t.Errorf("LoadAdapters: %v", err)
	}
	ctx := load()
	if err := qlayers.MergeLoRA(ctx, backend, qlayers.MergeOptions{Requantize: true}); err != nil {
		t.Fatalf("MergeLoRA: %v", err)
	}
	if a := ctx.In("layer").In(qlayers.Scope).GetVariable(qlayers.LoRAAName); a != nil {
		t.Errorf("after a Requantize merge the adapter %s is still there", a.ScopeAndName())
	}
}

func TestLoRAMerge(t *testing.T) {
	backend := testutil.Backend(t)
	x := matrix(3, batch, inDim)
	for _, tc := range []struct {
		name  string
		float bool
	}{{"nf4-dq", false}, {"float", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := loraContext(t, nf4DQ, tc.float)
			want := flat(t, context.MustExecOnce(backend, ctx, loraLayer(nf4DQ), x))
			before := snapshot(t, ctx)
			if err := qlayers.MergeLoRA(ctx, backend, qlayers.MergeOptions{}); err != nil {
				t.Fatalf("%+v", err)
			}
			if err := qlayers.MergeLoRA(ctx, backend, qlayers.MergeOptions{}); err == nil || !strings.Contains(err.Error(), "already merged") {
				t.Errorf("merging twice: %v", err)
			}
			got := flat(t, context.MustExecOnce(backend, ctx, loraLayer(nf4DQ), x))
			if d := maxDiff(got, want); d > 1e-4 {
				t.Errorf("merged output differs by %g", d)
			}
			if err := qlayers.UnmergeLoRA(ctx, backend); err != nil {
				t.Fatalf("%+v", err)
			}
			after := snapshot(t, ctx)
			for name, v := range before {
				if tc.float && strings.HasSuffix(name, "/"+qlayers.WeightsName) {
					w0, w1 := bytesF32(v), bytesF32(after[name])
					if d := maxDiff(w0, w1); d > 1e-6 {
						t.Errorf("unmerged float kernel differs by %g", d)
					}
					continue
				}
				if !slices.Equal(v, after[name]) {
					t.Errorf("%s changed by merge and unmerge", name)
				}
			}
			if _, ok := after["/layer/dense/"+qlayers.WeightsName]; !tc.float && ok {
				t.Errorf("the merged kernel is still there after unmerging")
			}
			got = flat(t, context.MustExecOnce(backend, ctx, loraLayer(nf4DQ), x))
			if d := maxDiff(got, want); d > 1e-6 {
				t.Errorf("unmerged output differs by %g", d)
			}
		})
	}
	t.Run("requantize", func(t *testing.T) {
		ctx := loraContext(t, nf4DQ, false)
		// The expected base: W' = W + (α/r)·A·B from the dense values, quantized independently.
		dense := ctx.In("layer").In(qlayers.Scope)
		w := flat(t, baseKernel(t, ctx))
		a, b := flat(t, dense.GetVariable(qlayers.LoRAAName).MustValue()), flat(t, dense.GetVariable(qlayers.LoRABName).MustValue())
		merged := make([]float32, len(w))
		for i := range inDim {
			for j := range outDim {
				var d float32
				for k := range loraCfg.Rank {
					d += a[i*loraCfg.Rank+k] * b[k*outDim+j]
				}
				merged[i*outDim+j] = w[i*outDim+j] + float32(loraCfg.Scale())*d
			}
		}
		want := quanta.MustQuantize(tensors.FromFlatDataAndDimensions(merged, inDim, outDim), nf4DQ)
		if err := qlayers.MergeLoRA(ctx, backend, qlayers.MergeOptions{Requantize: true}); err != nil {
			t.Fatalf("%+v", err)
		}
		if dense.GetVariable(qlayers.LoRAAName) != nil || dense.GetVariable(qlayers.LoRABName) != nil {
			t.Errorf("adapters remain after a re-quantizing merge")
		}
		base, _, err := qlayers.Base(ctx, "/layer", inDim, outDim)
		if err != nil {
			t.Fatal(err)
		}
		got, ref := flat(t, baseKernel(t, ctx)), flat(t, testutil.Materialize(t, want))
		// The merged weight is computed in float32 by the backend, in another summation order than
		// the host's: a value on a rounding boundary may take the neighbouring code.
		if differ := countDiffer(got, ref); differ > len(ref)/100 {
			t.Errorf("re-quantized base: %d of %d values differ from the quantized merged weight", differ, len(ref))
		}
		if base.(*nf4.Array).Format() != want.(*nf4.Array).Format() {
			t.Errorf("format %s, want %s", base.(*nf4.Array).Format(), want.(*nf4.Array).Format())
		}
		if err := qlayers.MergeLoRA(ctx, backend, qlayers.MergeOptions{Requantize: true}); err != nil {
			t.Errorf("merging a context without adapters: %v", err)
		}
	})
	t.Run("requantize-float", func(t *testing.T) {
		ctx := loraContext(t, nf4DQ, true)
		err := qlayers.MergeLoRA(ctx, backend, qlayers.MergeOptions{Requantize: true})
		if err == nil || !strings.Contains(err.Error(), "float base") {
			t.Errorf("re-quantizing a float base: %v", err)
		}
	})
}

func maxAbs(v []float32) float64 {
	var m float64
	for _, x := range v {
		m = max(m, math.Abs(float64(x)))
	}
	return m
}

func bytesF32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
	}
	return out
}

// roundTrip saves the adapters of loraContext's NF4-DQ layer (savedAdapters) and loads them into
// the quantized base alone (quantizedContext); it returns the layer's output on x before the save,
// the adapters' folder and the context they are loaded into.
func roundTrip(t *testing.T, backend backends.Backend, x [][]float32) (want []float32, dir string, fresh *context.Context) {
	t.Helper()
	ctx := loraContext(t, nf4DQ, false)
	want = flat(t, context.MustExecOnce(backend, ctx, loraLayer(nf4DQ), x))
	dir = savedAdapters(t, ctx)
	fresh = quantizedContext(t, nf4DQ)
	if err := qlayers.LoadAdapters(fresh, dir, qlayers.AdapterOptions{}); err != nil {
		t.Fatalf("%+v", err)
	}
	return want, dir, fresh
}

// TestAdaptersRoundTrip: SaveAdapters writes PEFT's files (Aᵀ and Bᵀ as float32 [r, in] and
// [out, r] under base_model.model.<module>, r and lora_alpha in the config), and LoadAdapters
// reads them into a context holding only the base: the layer computes the same output.
func TestAdaptersRoundTrip(t *testing.T) {
	backend := testutil.Backend(t)
	x := matrix(3, batch, inDim)
	want, dir, fresh := roundTrip(t, backend, x)
	f := safetensors.MustOpen(filepath.Join(dir, qlayers.AdapterWeightsFile))
	defer f.Close()
	var names []string
	for _, n := range f.Names() {
		info, _ := f.Info(n)
		names = append(names, info.String())
	}
	wantNames := []string{fmt.Sprintf("base_model.model.layer.lora_A.weight F32[%d %d]", loraCfg.Rank, inDim),
		fmt.Sprintf("base_model.model.layer.lora_B.weight F32[%d %d]", outDim, loraCfg.Rank)}
	if !slices.Equal(names, wantNames) {
		t.Errorf("adapter file holds %v, want %v", names, wantNames)
	}
	config, _ := os.ReadFile(filepath.Join(dir, qlayers.AdapterConfigFile))
	for _, s := range []string{`"peft_type": "LORA"`, `"r": 4`, `"lora_alpha": 8`, `"layer"`} {
		if !strings.Contains(string(config), s) {
			t.Errorf("adapter config lacks %s:\n%s", s, config)
		}
	}

	got := flat(t, context.MustExecOnce(backend, fresh, loraLayer(nf4DQ), x))
	if d := maxDiff(got, want); d != 0 {
		t.Errorf("output with loaded adapters differs by %g", d)
	}
	other := context.New()
	other.In("elsewhere").In(qlayers.Scope).VariableWithValue(qlayers.WeightsName, matrix(1, inDim, outDim))
	if err := qlayers.LoadAdapters(other, dir, qlayers.AdapterOptions{}); err == nil || !strings.Contains(err.Error(), "names no layer") {
		t.Errorf("loading into a context without the layer: %v", err)
	}
	if other.In("elsewhere").In(qlayers.Scope).GetVariable(qlayers.LoRAAName) != nil {
		t.Errorf("a failed load left adapters behind")
	}
}

// TestStoreBaseOutIn: a torch-layout (out, in) base stored with StoreBase (an NF4 array whose
// blocks run over the flattened weight, as bitsandbytes keeps a ragged weight) gives
// y = x·Wᵀ + b in Dense and in a fresh LoRADense; Base returns the stored array.
func TestStoreBaseOutIn(t *testing.T) {
	backend := testutil.Backend(t)
	const in, out = 40, 24 // 40 is not a multiple of the block size 64: flattened blocks
	wT := tensors.FromValue(matrix(11, out, in))
	w := mustFlat(t, wT)
	bias := tensors.FromValue(values(12, out))
	ctx := context.New()
	if err := qlayers.StoreBase(ctx, "/proj", w, bias, qlayers.OutIn); err != nil {
		t.Fatalf("%+v", err)
	}
	if err := qlayers.StoreBase(ctx, "/proj", w, bias, qlayers.OutIn); err == nil {
		t.Errorf("storing twice in one scope: no error")
	}
	x := matrix(13, 3, in)
	viaDense := flat(t, context.MustExecOnce(backend, ctx, func(ctx *context.Context, x *graph.Node) *graph.Node {
		return qlayers.Dense(ctx.In("proj").Checked(false), x, true, out, quanta.Config{})
	}, x))
	got := flat(t, context.MustExecOnce(backend, ctx, func(ctx *context.Context, x *graph.Node) *graph.Node {
		return qlayers.LoRADense(ctx.In("proj").Checked(false), x, true, out, quanta.Config{}, loraCfg)
	}, x))
	if d := maxDiff(viaDense, got); d != 0 {
		t.Errorf("Dense on the stored torch-layout kernel differs from a fresh LoRADense by %g", d)
	}
	dense := testutil.Materialize(t, w)
	wv, bv := flat(t, dense), flat(t, bias)
	for i := range 3 {
		for j := range out {
			sum := float64(bv[j])
			for k := range in {
				sum += float64(x[i][k]) * float64(wv[j*in+k])
			}
			if d := math.Abs(sum - float64(got[i*out+j])); d > 1e-5 {
				t.Fatalf("y[%d,%d] = %v, want %v", i, j, got[i*out+j], sum)
			}
		}
	}
	base, layout, err := qlayers.Base(ctx, "/proj", in, out)
	if err != nil || layout != qlayers.OutIn || base.(*nf4.Array).Format() != w.Format() {
		t.Errorf("Base: %v %v %v", base, layout, err)
	}
}

// mustFlat quantizes w with blocks of 64 over the flattened values.
func mustFlat(t *testing.T, w *tensors.Tensor) *nf4.Array {
	t.Helper()
	rows := nf4.MustQuantize(tensors.FromFlatDataAndDimensions(tensors.MustCopyFlatData[float32](w), w.Shape().Size()), 64)
	f := nf4.Format{BlockSize: 64, FlatBlocks: true}
	shapesWant := nf4.ComponentShapes(w.Shape(), f, dtypes.Float32)
	packed := tensors.FromFlatDataAndDimensions(tensors.MustCopyFlatData[uint8](rows.Packed().Tensor()), shapesWant[0].Dimensions...)
	absmax := tensors.FromFlatDataAndDimensions(tensors.MustCopyFlatData[float32](rows.Absmax().Tensor()), shapesWant[1].Dimensions...)
	a, err := nf4.FromTensors(w.Shape(), f, packed, absmax)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestLoRAProjection: the projection hook runs LoRADense in ctx.In(name), on inputs of any rank
// (batch and sequence axes, features last), and fits models.Projection.
func TestLoRAProjection(t *testing.T) {
	backend := testutil.Backend(t)
	var proj models.Projection = qlayers.LoRAProjection(nf4DQ, loraCfg)
	ctx := loraContext(t, nf4DQ, false)
	x := tensors.FromFlatDataAndDimensions(values(3, 2*3*inDim), 2, 3, inDim)
	got := context.MustExecOnce(backend, ctx, func(ctx *context.Context, x *graph.Node) *graph.Node {
		return proj(ctx.Checked(false), "layer", x, outDim, true)
	}, x)
	want := context.MustExecOnce(backend, ctx, func(ctx *context.Context, x *graph.Node) *graph.Node {
		return graph.Reshape(loraLayer(nf4DQ)(ctx, graph.Reshape(x, 6, inDim)), 2, 3, outDim)
	}, x)
	if !got.Shape().Equal(want.Shape()) {
		t.Fatalf("shape %s, want %s", got.Shape(), want.Shape())
	}
	if d := maxDiff(flat(t, got), flat(t, want)); d > 1e-6 {
		t.Errorf("projection differs from LoRADense by %g", d)
	}
}

// TestLoadAdaptersSpecialFile: an adapter_config.json that is a device is refused by name, not
// read until memory runs out (os.ReadFile of /dev/zero never ends).
func TestLoadAdaptersSpecialFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/dev/zero", filepath.Join(dir, qlayers.AdapterConfigFile)); err != nil {
		t.Skip(err)
	}
	var err error
	testutil.Within(t, 3*time.Second, "LoadAdapters reading adapter_config.json (/dev/zero)", func() {
		err = qlayers.LoadAdapters(context.New(), dir, qlayers.AdapterOptions{})
	})
	if err == nil || !strings.Contains(err.Error(), "regular file") {
		t.Errorf("LoadAdapters: error %v; want one refusing a file that is not a regular file", err)
	}
}

// TestLoRAMergeKeepsFloatKernel: a dense merge of a quantized base whose float kernel was kept
// (Options.KeepFloat) is refused, naming the kernel and what is accepted, and changes nothing (it
// overwrote the kept kernel, which UnmergeLoRA then deleted); Requantize still merges and leaves
// the kept kernel as it was.
func TestLoRAMergeKeepsFloatKernel(t *testing.T) {
	backend := testutil.Backend(t)
	ctx := floatContext()
	if _, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{{Scope: ".*", Config: quanta.Config{}}}, qlayers.Options{KeepFloat: true}); err != nil {
		t.Fatal(err)
	}
	dense := ctx.In("layer").In(qlayers.Scope)
	dense.VariableWithValue(qlayers.LoRAAName, matrix(5, inDim, loraCfg.Rank))
	dense.VariableWithValue(qlayers.LoRABName, matrix(6, loraCfg.Rank, outDim))
	dense.SetParam(qlayers.LoRAScaleParam, loraCfg.Scale())
	before := snapshot(t, ctx)
	err := qlayers.MergeLoRA(ctx, backend, qlayers.MergeOptions{})
	if err == nil || !strings.Contains(err.Error(), "KeepFloat") || !strings.Contains(err.Error(), "accepted") {
		t.Fatalf("dense merge of a layer with a kept float kernel: %v; want an error naming KeepFloat and what is accepted", err)
	}
	after := snapshot(t, ctx)
	for name, v := range before {
		if !slices.Equal(v, after[name]) {
			t.Errorf("%s changed by the refused merge", name)
		}
	}
	if err := qlayers.MergeLoRA(ctx, backend, qlayers.MergeOptions{Requantize: true}); err != nil {
		t.Fatalf("%+v", err)
	}
	kept := "/layer/dense/" + qlayers.WeightsName
	if w := snapshot(t, ctx)[kept]; !slices.Equal(w, before[kept]) {
		t.Errorf("the kept float kernel changed under a Requantize merge")
	}
}

// TestLoRADenseRecordedScale: adapters loaded with their scale (lora_alpha/r from the file) are
// used with that scale; a LoRA of another alpha is refused by name instead of silently computing
// (and recording for MergeLoRA) another scale.
func TestLoRADenseRecordedScale(t *testing.T) {
	backend := testutil.Backend(t)
	x := matrix(3, batch, inDim)
	want, _, fresh := roundTrip(t, backend, x)
	other := qlayers.LoRA{Rank: loraCfg.Rank} // alpha = rank: scale 1, the file says 2
	var err error
	func() {
		defer testutil.RecoverError(&err)
		context.MustExecOnce(backend, fresh, func(ctx *context.Context, x *graph.Node) *graph.Node {
			return qlayers.LoRADense(ctx.In("layer").Checked(false), x, true, outDim, nf4DQ, other)
		}, x)
	}()
	if err == nil || !strings.Contains(err.Error(), qlayers.LoRAScaleParam) {
		t.Errorf("LoRADense with scale %v on adapters loaded with scale %v: error %v, want one naming %s",
			other.Scale(), loraCfg.Scale(), err, qlayers.LoRAScaleParam)
	}
	if s, _ := fresh.In("layer").In(qlayers.Scope).GetParam(qlayers.LoRAScaleParam); s != loraCfg.Scale() {
		t.Errorf("recorded scale is %v after the refused call, want %v", s, loraCfg.Scale())
	}
	got := flat(t, context.MustExecOnce(backend, fresh, loraLayer(nf4DQ), x))
	if d := maxDiff(got, want); d != 0 {
		t.Errorf("output with the loaded adapters' own LoRA differs by %g", d)
	}
}

// TestAdaptersLargeAlphaRoundTrip: adapters whose scale is a float32 but whose lora_alpha = scale·r,
// as SaveAdapters writes it, is not (1e38 at rank 512: 5.12e40) load back with their scale, as PEFT
// reads any finite lora_alpha; only the scale is computed in float32.
func TestAdaptersLargeAlphaRoundTrip(t *testing.T) {
	const rank, scale = 512, 1e38
	ctx := floatContext()
	dense := ctx.In("layer").In(qlayers.Scope)
	dense.VariableWithValue(qlayers.LoRAAName, matrix(5, inDim, rank))
	dense.VariableWithValue(qlayers.LoRABName, matrix(6, rank, outDim))
	dense.SetParam(qlayers.LoRAScaleParam, float64(scale))
	dir := savedAdapters(t, ctx)
	if config, err := os.ReadFile(filepath.Join(dir, qlayers.AdapterConfigFile)); err != nil || !strings.Contains(string(config), `"lora_alpha": 5.12e+40`) {
		t.Fatalf("%s: %s, %v; want lora_alpha 5.12e+40", qlayers.AdapterConfigFile, config, err)
	}
	fresh := floatContext()
	if err := qlayers.LoadAdapters(fresh, dir, qlayers.AdapterOptions{}); err != nil {
		t.Fatalf("%+v", err)
	}
	if s, _ := fresh.In("layer").In(qlayers.Scope).GetParam(qlayers.LoRAScaleParam); s != float64(scale) {
		t.Errorf("scale %v; want %v", s, float64(scale))
	}
}

// TestLoRAValidate: a rank outside 1 to 2^31 − 1 (one whose adapters' sizes overflow made XLA
// abort the process), a negative or non-finite alpha, a scale that is 0 or infinite as float32
// and a dropout outside 0 to 1 are errors naming the key, from Validate and as LoRADense's panic.
func TestLoRAValidate(t *testing.T) {
	backend := testutil.Backend(t)
	for _, c := range []struct {
		lora qlayers.LoRA
		want string
	}{
		{qlayers.LoRA{Rank: 4}, ""},
		{qlayers.LoRA{Rank: 0}, "rank 0"},
		{qlayers.LoRA{Rank: -3, Alpha: 8}, "rank -3"},
		{qlayers.LoRA{Rank: 1 << 62}, "rank 4611686018427387904"},
		{qlayers.LoRA{Rank: 4, Alpha: -1}, "alpha -1"},
		{qlayers.LoRA{Rank: 4, Alpha: math.NaN()}, "alpha NaN"},
		{qlayers.LoRA{Rank: 4, Alpha: math.Inf(1)}, "alpha +Inf"},
		// A finite alpha whose scale is 0 (subnormal, flushed by XLA's CPU backend: the adapters
		// ignored) or infinite as float32.
		{qlayers.LoRA{Rank: 4, Alpha: 4e-38}, "scale alpha/rank = 1e-38, 0 as float32"},
		{qlayers.LoRA{Rank: 4, Alpha: 2e-38, RSLoRA: true}, "scale alpha/√rank (RSLoRA) = 1e-38, 0 as float32"},
		{qlayers.LoRA{Rank: 1, Alpha: 1e300}, "scale alpha/rank = 1e+300, +Inf as float32"},
		{qlayers.LoRA{Rank: 4, Dropout: 1}, ""},
		{qlayers.LoRA{Rank: 4, Dropout: -0.1}, "dropout -0.1"},
		{qlayers.LoRA{Rank: 4, Dropout: 1.5}, "dropout 1.5"},
		{qlayers.LoRA{Rank: 4, Dropout: math.NaN()}, "dropout NaN"},
	} {
		t.Run(fmt.Sprintf("%+v", c.lora), func(t *testing.T) {
			if testutil.WantError(t, c.lora.Validate(), c.want) {
				var err error
				func() {
					defer testutil.RecoverError(&err)
					context.MustExecOnce(backend, floatContext(), func(ctx *context.Context, x *graph.Node) *graph.Node {
						return qlayers.LoRADense(ctx.In("layer").Checked(false), x, true, outDim, nf4DQ, c.lora)
					}, matrix(3, batch, inDim))
				}()
				testutil.WantError(t, err, "qlayers.LoRADense")
				testutil.WantError(t, err, c.want)
			}
		})
	}
}

// TestLoadAdaptersIntoMergedLayer: loading adapters into a layer whose adapters are merged is an
// error changing nothing: it replaced the adapters the merged kernel holds, so UnmergeLoRA then
// subtracted the loaded ones and left a float base changed.
func TestLoadAdaptersIntoMergedLayer(t *testing.T) {
	backend := testutil.Backend(t)
	saved := loraContext(t, nf4DQ, true)
	saved.In("layer").In(qlayers.Scope).GetVariable(qlayers.LoRABName).MustSetValue(tensors.FromValue(matrix(9, loraCfg.Rank, outDim)))
	dir := savedAdapters(t, saved)
	ctx := loraContext(t, nf4DQ, true)
	before := snapshot(t, ctx)
	if err := qlayers.MergeLoRA(ctx, backend, qlayers.MergeOptions{}); err != nil {
		t.Fatalf("%+v", err)
	}
	merged := snapshot(t, ctx)
	err := qlayers.LoadAdapters(ctx, dir, qlayers.AdapterOptions{})
	if err == nil || !strings.Contains(err.Error(), `layer "/layer" is merged`) {
		t.Errorf("LoadAdapters into a merged layer: %v; want an error saying it is merged", err)
	}
	for name, v := range snapshot(t, ctx) {
		if !slices.Equal(v, merged[name]) {
			t.Errorf("%s changed by the refused load", name)
		}
	}
	if err := qlayers.UnmergeLoRA(ctx, backend); err != nil {
		t.Fatalf("%+v", err)
	}
	w := "/layer/dense/" + qlayers.WeightsName
	if d := maxDiff(bytesF32(snapshot(t, ctx)[w]), bytesF32(before[w])); d > 1e-6 {
		t.Errorf("float base differs by %g after merge, load and unmerge", d)

	}
}

// TestAdapterModuleNameCollision: an AdapterOptions.ModuleName that gives two layers one module
// name is refused by SaveAdapters and LoadAdapters, naming both scopes, and nothing is loaded
// (LoadAdapters would otherwise load the module's adapters into one of the layers, silently).
func TestAdapterModuleNameCollision(t *testing.T) {
	dir := savedAdapters(t, loraContext(t, nf4DQ, false))
	last := qlayers.AdapterOptions{ModuleName: func(string) string { return "layer" }} // not one name per layer
	const want = `AdapterOptions.ModuleName gives scopes "/a" and "/b" one module name "layer"`
	ctx := context.New()
	for _, scope := range []string{"a", "b"} {
		ctx.In(scope).In(qlayers.Scope).VariableWithValue(qlayers.WeightsName, matrix(1, inDim, outDim))
	}
	if err := qlayers.LoadAdapters(ctx, dir, last); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("LoadAdapters: %v; want an error containing %q", err, want)
	}
	for _, scope := range []string{"/a/dense", "/b/dense"} {
		if ctx.InspectVariable(scope, qlayers.LoRAAName) != nil {
			t.Errorf("adapters loaded into %s", scope)
		}
	}
	ctx = context.New()
	for _, scope := range []string{"a", "b"} {
		dense := ctx.In(scope).In(qlayers.Scope)
		dense.VariableWithValue(qlayers.WeightsName, matrix(1, inDim, outDim))
		dense.VariableWithValue(qlayers.LoRAAName, matrix(5, inDim, loraCfg.Rank))
		dense.VariableWithValue(qlayers.LoRABName, matrix(6, loraCfg.Rank, outDim))
		dense.SetParam(qlayers.LoRAScaleParam, loraCfg.Scale())
	}
	if err := qlayers.SaveAdapters(ctx, t.TempDir(), last); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("SaveAdapters: %v; want an error containing %q", err, want)
	}
}

// TestLoRADenseRSLoRA: adapters of a file with use_rslora (scale lora_alpha/√r) are used by a
// LoRA with the file's rank and alpha and RSLoRA set, and give the output of the same adapters
// loaded plainly with the same scale (8/√4 = 16/4); without RSLoRA the LoRA is
// refused, naming it.
func TestLoRADenseRSLoRA(t *testing.T) {
	backend := testutil.Backend(t)
	ctx := loraContext(t, nf4DQ, false)
	x := matrix(3, batch, inDim)
	dir := savedAdapters(t, ctx)
	configFile := filepath.Join(dir, qlayers.AdapterConfigFile)
	config, err := os.ReadFile(configFile)
	if err != nil {
		t.Fatal(err)
	}
	load := func(t *testing.T, config string) *context.Context {
		if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		fresh := quantizedContext(t, nf4DQ)
		if err := qlayers.LoadAdapters(fresh, dir, qlayers.AdapterOptions{}); err != nil {
			t.Fatalf("%+v", err)
		}
		return fresh
	}
	layer := func(lora qlayers.LoRA) func(ctx *context.Context, x *graph.Node) *graph.Node {
		return func(ctx *context.Context, x *graph.Node) *graph.Node {
			return qlayers.LoRADense(ctx.In("layer").Checked(false), x, true, outDim, nf4DQ, lora)
		}
	}
	// lora_alpha 16 at r 4 is the scale 4 that lora_alpha 8 gives with use_rslora (8/√4).
	plain := load(t, strings.Replace(string(config), `"lora_alpha": 8`, `"lora_alpha": 16`, 1))
	want := flat(t, context.MustExecOnce(backend, plain, layer(qlayers.LoRA{Rank: 4, Alpha: 16}), x))
	rs := load(t, strings.Replace(string(config), `"r": 4`, `"use_rslora": true, "r": 4`, 1))
	got := flat(t, context.MustExecOnce(backend, rs, layer(qlayers.LoRA{Rank: 4, Alpha: 8, RSLoRA: true}), x))
	if d := maxDiff(got, want); d != 0 {
		t.Errorf("rank-stabilized adapters with LoRA{Rank: 4, Alpha: 8, RSLoRA: true} differ by %g from the same scale loaded plainly", d)
	}
	func() {
		defer testutil.RecoverError(&err)
		err = nil
		context.MustExecOnce(backend, rs, layer(qlayers.LoRA{Rank: 4, Alpha: 8}), x)
	}()
	testutil.WantError(t, err, "RSLoRA false")
	// A recorded scale an ulp from the LoRA's (a rank-stabilized scale saved as lora_alpha =
	// scale·r and read back as lora_alpha/r moves so for about 9% of alphas and ranks) is the
	// same scale: 0.10000000000000002/4 against 0.1/4.
	ulp := load(t, strings.Replace(string(config), `"lora_alpha": 8`, `"lora_alpha": 0.10000000000000002`, 1))
	func() {
		defer testutil.RecoverError(&err)
		err = nil
		context.MustExecOnce(backend, ulp, layer(qlayers.LoRA{Rank: 4, Alpha: 0.1}), x)
	}()
	if err != nil {
		t.Errorf("a recorded scale one ulp from the LoRA's: %v", err)
	}
}

// TestLoRADropout: while training, a LoRA's Dropout p zeroes each element of the adapters' input
// with probability p and scales the others by 1/(1−p); outside training, and at p = 0, the input
// goes in whole, and at p = 1 the adapters add nothing. A layer with a zero base whose adapters
// sum their input (A all ones, B one, scale α/r = 2) shows it: over an input of ones its output
// is 2·kept/(1−p), kept the elements let through, whose count is binomial (n, 1−p). The layer
// records p for SaveAdapters.
func TestLoRADropout(t *testing.T) {
	backend := testutil.Backend(t)
	const n = 4096
	filled := func(rows, cols int, v float32) [][]float32 {
		m := make([][]float32, rows)
		for i := range m {
			m[i] = make([]float32, cols)
			for j := range m[i] {
				m[i][j] = v
			}
		}
		return m
	}
	for _, c := range []struct {
		p        float64
		training bool
		lo, hi   float64 // the count kept, within 8 standard deviations of n·(1−p)
	}{
		{0, true, n, n},
		{0.5, false, n, n},
		{0.5, true, n/2 - 8*32, n/2 + 8*32},
		{0.1, true, 0.9*n - 8*19.2, 0.9*n + 8*19.2},
		{1, true, 0, 0},
	} {
		t.Run(fmt.Sprintf("p=%v,training=%v", c.p, c.training), func(t *testing.T) {
			ctx := context.New()
			dense := ctx.In("layer").In(qlayers.Scope)
			dense.VariableWithValue(qlayers.WeightsName, filled(n, 1, 0))
			dense.VariableWithValue(qlayers.LoRAAName, filled(n, 1, 1))
			dense.VariableWithValue(qlayers.LoRABName, filled(1, 1, 1))
			lora := qlayers.LoRA{Rank: 1, Alpha: 2, Dropout: c.p}
			out := context.MustExecOnce(backend, ctx, func(ctx *context.Context, x *graph.Node) *graph.Node {
				ctx.SetTraining(x.Graph(), c.training)
				return qlayers.LoRADense(ctx.In("layer").Checked(false), x, false, 1, nf4DQ, lora)
			}, filled(1, n, 1))
			y := float64(flat(t, out)[0])
			kept := y / 2 // y = 2·kept/(1−p) while training with 0 < p < 1
			if c.training && c.p > 0 && c.p < 1 {
				kept *= 1 - c.p
			}
			if kept < c.lo || kept > c.hi || (c.p == 0.5 && c.training && kept != math.Round(kept)) {
				t.Errorf("output %v: %v elements kept; want a whole count from %v to %v", y, kept, c.lo, c.hi)
			}
			if c.p == 0.5 && c.training && kept == n {
				t.Errorf("output %v: no element dropped", y)
			}
			if got, _ := dense.GetParam(qlayers.LoRADropoutParam); got != c.p {
				t.Errorf("recorded %s = %v; want %v", qlayers.LoRADropoutParam, got, c.p)
			}
		})
	}
}

// TestAdaptersDropoutRoundTrip: SaveAdapters writes the layers' recorded dropout as lora_dropout,
// which LoadAdapters records again; layers recorded with two dropouts are refused, naming the
// parameter, since the config holds one.
func TestAdaptersDropoutRoundTrip(t *testing.T) {
	ctx := loraContext(t, nf4DQ, true)
	dense := ctx.In("layer").In(qlayers.Scope)
	dense.SetParam(qlayers.LoRADropoutParam, 0.25)
	dir := savedAdapters(t, ctx)
	if config, err := os.ReadFile(filepath.Join(dir, qlayers.AdapterConfigFile)); err != nil || !strings.Contains(string(config), `"lora_dropout": 0.25`) {
		t.Fatalf("%s: %s, %v; want lora_dropout 0.25", qlayers.AdapterConfigFile, config, err)
	}
	fresh := floatContext()
	if err := qlayers.LoadAdapters(fresh, dir, qlayers.AdapterOptions{}); err != nil {
		t.Fatalf("%+v", err)
	}
	if d, _ := fresh.In("layer").In(qlayers.Scope).GetParam(qlayers.LoRADropoutParam); d != 0.25 {
		t.Errorf("loaded %s = %v; want 0.25", qlayers.LoRADropoutParam, d)
	}

	other := ctx.In("other").In(qlayers.Scope)
	other.VariableWithValue(qlayers.WeightsName, matrix(1, inDim, outDim))
	other.VariableWithValue(qlayers.LoRAAName, matrix(5, inDim, loraCfg.Rank))
	other.VariableWithValue(qlayers.LoRABName, matrix(6, loraCfg.Rank, outDim))
	other.SetParam(qlayers.LoRAScaleParam, loraCfg.Scale()) // no dropout recorded: 0
	err := qlayers.SaveAdapters(ctx, t.TempDir(), qlayers.AdapterOptions{})
	testutil.WantError(t, err, qlayers.LoRADropoutParam)
}

// TestAdaptersDropoutKeptByInference: the lora_dropout of loaded adapters (0.05, PEFT's usual)
// survives a graph that does not train, built with a LoRA without dropout (evaluation), and
// SaveAdapters writes it back; a training graph records its LoRA's dropout (0.1) instead.
func TestAdaptersDropoutKeptByInference(t *testing.T) {
	backend := testutil.Backend(t)
	peft := loraContext(t, nf4DQ, false)
	peft.In("layer").In(qlayers.Scope).SetParam(qlayers.LoRADropoutParam, 0.05)
	ctx := quantizedContext(t, nf4DQ)
	if err := qlayers.LoadAdapters(ctx, savedAdapters(t, peft), qlayers.AdapterOptions{}); err != nil {
		t.Fatalf("%+v", err)
	}
	for _, c := range []struct {
		training bool
		dropout  float64
		want     string
	}{{false, 0, `"lora_dropout": 0.05`}, {true, 0.1, `"lora_dropout": 0.1`}, {false, 0, `"lora_dropout": 0.1`}} {
		lora := loraCfg
		lora.Dropout = c.dropout
		context.MustExecOnce(backend, ctx, func(ctx *context.Context, x *graph.Node) *graph.Node {
			ctx.SetTraining(x.Graph(), c.training)
			return qlayers.LoRADense(ctx.In("layer").Checked(false), x, true, outDim, nf4DQ, lora)
		}, matrix(3, batch, inDim))
		dir := savedAdapters(t, ctx)
		if config, err := os.ReadFile(filepath.Join(dir, qlayers.AdapterConfigFile)); err != nil || !strings.Contains(string(config), c.want) {
			t.Errorf("after a graph with training=%v and dropout %v, %s: %s, %v; want %s", c.training, c.dropout,
				qlayers.AdapterConfigFile, config, err, c.want)
		}
	}
}
