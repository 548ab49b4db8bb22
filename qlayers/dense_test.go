package qlayers_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/checkpoints"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/onebit"
	"github.com/quanta-ml/quanta/qlayers"
)

const (
	batch, inDim, outDim = 5, 64, 128
	scope                = "/layer/dense"
)

// values returns n deterministic values in about [-1, 1] (a sine walk: no ties at quantization
// thresholds in practice).
func values(seed, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(math.Sin(float64(seed*7919+i)*0.7311) * math.Cos(float64(i)*0.013+float64(seed)))
	}
	return out
}

func matrix(seed, rows, cols int) [][]float32 {
	flat := values(seed, rows*cols)
	m := make([][]float32, rows)
	for i := range m {
		m[i] = flat[i*cols : (i+1)*cols]
	}
	return m
}

// floatContext returns a context holding the float kernel and biases of one Dense layer in scope
// "/layer/dense".
func floatContext() *context.Context {
	return kernelContext(qlayers.WeightsName, matrix(1, inDim, outDim))
}

// transposedContext holds the layer's float kernel transposed, as a models.Quantizer stores it
// under a Skip rule in OutIn, with no "weights".
func transposedContext() *context.Context {
	return kernelContext(qlayers.TransposedWeightsName, matrix(1, outDim, inDim))
}

// kernelContext holds the layer's float kernel as the variable name, and its biases.
func kernelContext(name string, kernel [][]float32) *context.Context {
	ctx := context.New()
	layer := ctx.In("layer").In(qlayers.Scope)
	layer.VariableWithValue(name, kernel)
	layer.VariableWithValue(qlayers.BiasesName, values(2, outDim))
	return ctx
}

// layer is the model of the tests: one Dense layer in scope "/layer".
func layer(cfg quanta.Config) func(ctx *context.Context, x *graph.Node) *graph.Node {
	return func(ctx *context.Context, x *graph.Node) *graph.Node {
		return qlayers.Dense(ctx.In("layer").Checked(false), x, true, outDim, cfg)
	}
}

func flat(t *testing.T, x *tensors.Tensor) []float32 {
	t.Helper()
	var out []float32
	x.MustConstFlatData(func(data any) { out = append(out, data.([]float32)...) })
	return out
}

func maxDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// countDiffer returns the number of positions where got and want differ.
func countDiffer[T comparable](got, want []T) int {
	n := 0
	for i := range want {
		if got[i] != want[i] {
			n++
		}
	}
	return n
}

// reference computes x · w + b in float64 on the host.
func reference(x [][]float32, w []float32, b []float32) []float32 {
	out := make([]float32, 0, len(x)*outDim)
	for _, row := range x {
		for j := range outDim {
			sum := float64(b[j])
			for k := range inDim {
				sum += float64(row[k]) * float64(w[k*outDim+j])
			}
			out = append(out, float32(sum))
		}
	}
	return out
}

func TestDenseTrainingGradientIsStraightThrough(t *testing.T) {
	backend := testutil.Backend(t)
	x := matrix(3, batch, inDim)
	c := matrix(4, batch, outDim)
	// d/dW sum((x·STE(W) + b) * c) = xᵀ·c: the straight-through estimator passes the gradient of
	// the product unchanged to the float kernel.
	want := make([]float32, inDim*outDim)
	for k := range inDim {
		for j := range outDim {
			var sum float64
			for i := range batch {
				sum += float64(x[i][k]) * float64(c[i][j])
			}
			want[k*outDim+j] = float32(sum)
		}
	}
	for _, typ := range quanta.Types() {
		t.Run(typ.String(), func(t *testing.T) {
			ctx := floatContext()
			grad := context.MustExecOnce(backend, ctx, func(ctx *context.Context, x, c *graph.Node) *graph.Node {
				ctx.SetTraining(x.Graph(), true)
				y := layer(quanta.Config{Type: typ, Scaled: true})(ctx, x)
				w := ctx.In("layer").In(qlayers.Scope).GetVariable(qlayers.WeightsName).ValueGraph(x.Graph())
				return graph.Gradient(graph.ReduceAllSum(graph.Mul(y, c)), w)[0]
			}, x, c)
			if d := maxDiff(flat(t, grad), want); d > 1e-4 {
				t.Errorf("gradient w.r.t. the float kernel differs from xᵀ·c by %g", d)
			}
		})
	}
}

func TestDenseInference(t *testing.T) {
	backend := testutil.Backend(t)
	x := matrix(5, batch, inDim)
	for _, typ := range quanta.Types() {
		cfg := quanta.Config{Type: typ, Scaled: true}
		t.Run(typ.String(), func(t *testing.T) {
			// The quantized weights, materialized by the format package, are the reference kernel.
			ctx := floatContext()
			report, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{{Scope: scope, Config: cfg}}, qlayers.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !report.Entries[0].Quantized {
				t.Fatalf("kernel not quantized: %+v", report.Entries[0])
			}
			stored := storedArray(t, ctx, cfg)
			dense := testutil.Materialize(t, stored)
			want := reference(x, flat(t, dense), values(2, outDim))
			if ctx.GetVariableByScopeAndName(scope, qlayers.WeightsName) != nil {
				t.Errorf("the float kernel was kept without Options.KeepFloat")
			}

			for _, s := range []lowering.Strategy{lowering.Auto, lowering.Materialize} {
				c := cfg
				c.Strategy = s
				got := context.MustExecOnce(backend, ctx, layer(c), x)
				if d := maxDiff(flat(t, got), want); d > 1e-3 {
					t.Errorf("strategy %s: quantized inference differs from x·materialize(W)+b by %g", s, d)
				}
			}

			// With only the float kernel, inference applies the fake-quantized forward: same values.
			got := context.MustExecOnce(backend, floatContext(), layer(cfg), x)
			if d := maxDiff(flat(t, got), want); d > 1e-3 {
				t.Errorf("fake-quantized inference differs from x·materialize(W)+b by %g", d)
			}
		})
	}
}

// storedArray rebuilds, on the host, the array whose components QuantizeContext stored.
func storedArray(t *testing.T, ctx *context.Context, cfg quanta.Config) implicitarray.Array {
	t.Helper()
	w := tensors.FromValue(matrix(1, inDim, outDim))
	a, err := hostQuantize(w, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var comps []implicitarray.Component
	for i := range a.Components() {
		v := ctx.GetVariableByScopeAndName(scope, qlayers.ComponentPrefix+string(rune('0'+i)))
		if v == nil {
			t.Fatalf("component %d not stored", i)
		}
		if v.Trainable {
			t.Errorf("component %s is trainable", v.Name())
		}
		comps = append(comps, implicitarray.TensorComponent(v.MustValue()))
	}
	return a.WithComponents(comps)
}

// hostQuantize quantizes w in cfg's format with the format package (the arrays QuantizeContext
// stores).
func hostQuantize(w *tensors.Tensor, cfg quanta.Config) (implicitarray.Array, error) {
	switch cfg.Type {
	case quanta.NF4:
		return nf4.Quantize(w, cfg.EffectiveBlockSize())
	case quanta.Int8:
		return int8.Quantize(w)
	case quanta.Binary:
		return onebit.QuantizeBinary(w, &onebit.Options{DType: w.DType(), Scale: true, ScaleAxes: []int{0}})
	case quanta.Ternary:
		return onebit.QuantizeTernary(w, &onebit.Options{DType: w.DType(), Scale: true, ScaleAxes: []int{0}})
	}
	return nil, fmt.Errorf("no host quantize for %s", cfg.Type)
}

func TestQuantizeContextReport(t *testing.T) {
	ctx := context.New()
	for _, name := range []string{"a", "b", "c"} {
		ctx.In(name).In(qlayers.Scope).VariableWithValue(qlayers.WeightsName, matrix(1, inDim, outDim))
	}
	ctx.In("a").In(qlayers.Scope).VariableWithValue(qlayers.BiasesName, values(2, outDim)) // not a kernel
	rules := []qlayers.Rule{
		{Scope: "/b/.*", Skip: true},
		{Scope: "/[ab]/dense", Config: quanta.Config{Type: quanta.NF4}},
	}
	report, err := qlayers.QuantizeContext(ctx, rules, qlayers.Options{KeepFloat: true})
	if err != nil {
		t.Fatal(err)
	}
	const floatBytes = inDim * outDim * 4
	// NF4, block 64: two codes a byte, one float32 absmax per 64 values.
	const nf4Bytes = inDim*outDim/2 + inDim*outDim/64*4
	want := []qlayers.ReportEntry{
		{Scope: "/a/dense", Quantized: true, FloatBytes: floatBytes, QuantizedBytes: nf4Bytes, KeptFloat: true},
		{Scope: "/b/dense", FloatBytes: floatBytes, KeptFloat: true}, // skipped ahead of the broader rule
		{Scope: "/c/dense", FloatBytes: floatBytes, KeptFloat: true}, // no rule matches
	}
	if len(report.Entries) != len(want) {
		t.Fatalf("report has %d entries, want %d:\n%s", len(report.Entries), len(want), report)
	}
	for i, w := range want {
		e := report.Entries[i]
		if e.Scope != w.Scope || e.Quantized != w.Quantized || e.FloatBytes != w.FloatBytes ||
			e.QuantizedBytes != w.QuantizedBytes || e.KeptFloat != w.KeptFloat {
			t.Errorf("entry %d = %+v, want %+v", i, e, w)
		}
	}
	if got, want := report.BytesBefore(), int64(3*floatBytes); got != want {
		t.Errorf("BytesBefore = %d, want %d", got, want)
	}
	if got, want := report.BytesAfter(), int64(3*floatBytes+nf4Bytes); got != want {
		t.Errorf("BytesAfter (float kept) = %d, want %d", got, want)
	}
	if !strings.Contains(report.String(), "nf4/64") {
		t.Errorf("report table does not name the format:\n%s", report)
	}
	if ctx.GetVariableByScopeAndName("/a/dense", qlayers.WeightsName) == nil {
		t.Errorf("KeepFloat: the float kernel of /a/dense was deleted")
	}

	// Converting again, without KeepFloat, replaces the components and deletes the float kernel.
	report, err = qlayers.QuantizeContext(ctx, rules[1:2], qlayers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := report.BytesAfter(), int64(floatBytes+2*nf4Bytes); got != want {
		t.Errorf("BytesAfter = %d, want %d:\n%s", got, want, report)
	}
	if ctx.GetVariableByScopeAndName("/a/dense", qlayers.WeightsName) != nil {
		t.Errorf("the float kernel of /a/dense was kept")
	}
}

func TestQuantizeContextErrors(t *testing.T) {
	tests := []struct {
		name  string
		rules []qlayers.Rule
		want  string
	}{
		{"bad pattern", []qlayers.Rule{{Scope: "/a/(", Config: quanta.Config{}}}, "scope pattern"},
		{"invalid config", []qlayers.Rule{{Scope: ".*", Config: quanta.Config{BlockSize: -2}}}, "negative"},
		{"odd block", []qlayers.Rule{{Scope: ".*", Config: quanta.Config{BlockSize: 3}}}, "odd"},
		{"first axis not a multiple of 4", []qlayers.Rule{{Scope: ".*", Config: quanta.Config{Type: quanta.Binary}}}, "/odd/dense"},
		// A rule that converts nothing is a mistake the caller must hear of.
		{"misspelt scope", []qlayers.Rule{{Scope: "/od/dense", Config: quanta.Config{Type: quanta.Int8}}},
			`rule 0 ("/od/dense") matches no kernel (tables are seen only with Options.Tables); the scopes are: "/odd/dense"`},
		{"shadowed skip", []qlayers.Rule{{Scope: ".*", Config: quanta.Config{Type: quanta.Int8}}, {Scope: "/odd/dense", Skip: true}},
			`rule 1 ("/odd/dense") decides no kernel: the kernels it matches are decided by earlier rules (/odd/dense/weights by rule 0)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.New()
			ctx.In("odd").In(qlayers.Scope).VariableWithValue(qlayers.WeightsName, matrix(1, 6, 8))
			_, err := qlayers.QuantizeContext(ctx, tc.rules, qlayers.Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if ctx.GetVariableByScopeAndName("/odd/dense", qlayers.WeightsName) == nil ||
				ctx.GetVariableByScopeAndName("/odd/dense", qlayers.ComponentPrefix+"0") != nil {
				t.Errorf("a failed conversion changed the context")
			}
		})
	}
}

func TestDensePanics(t *testing.T) {
	backend := testutil.Backend(t)
	x := matrix(5, batch, inDim)
	quantized := func() *context.Context {
		ctx := floatContext()
		if _, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{{Scope: ".*", Config: quanta.Config{}}}, qlayers.Options{}); err != nil {
			t.Fatal(err)
		}
		return ctx
	}
	tests := []struct {
		name string
		ctx  *context.Context
		fn   func(ctx *context.Context, x *graph.Node) *graph.Node
		want string
	}{
		{"invalid config", floatContext(), layer(quanta.Config{BlockSize: -1}), "negative"},
		// Binary and ternary store 4 input rows a byte: refused before training, not at QuantizeContext.
		{"binary on 6 inputs, training", context.New(), func(ctx *context.Context, x *graph.Node) *graph.Node {
			ctx.SetTraining(x.Graph(), true)
			return layer(quanta.Config{Type: quanta.Binary})(ctx, graph.Slice(x, graph.AxisRange(), graph.AxisRange(0, 6)))
		}, "[5 6] for a binary kernel (Float32)[6 128]; accepted: an input dimension that is a multiple of 4"},
		{"ternary on 62 inputs, inference", context.New(), func(ctx *context.Context, x *graph.Node) *graph.Node {
			return layer(quanta.Config{Type: quanta.Ternary, Scaled: true})(ctx, graph.Slice(x, graph.AxisRange(), graph.AxisRange(0, 62)))
		}, "multiple of 4"},
		{"integer input", floatContext(), func(ctx *context.Context, x *graph.Node) *graph.Node {
			return layer(quanta.Config{})(ctx, graph.ConvertDType(x, dtypes.Int32))
		}, "accepted: a float tensor"},
		{"training without the float kernel", quantized(), func(ctx *context.Context, x *graph.Node) *graph.Node {
			ctx.SetTraining(x.Graph(), true)
			return layer(quanta.Config{})(ctx, x)
		}, "needs the float kernel"},
		{"components of another shape", func() *context.Context {
			ctx := quantized()
			ctx.InAbsPath(scope).SetParam(qlayers.FormatParam, "nf4/32")
			return ctx
		}(), layer(quanta.Config{}), "needs"},
		{"bad format parameter", func() *context.Context {
			ctx := quantized()
			ctx.InAbsPath(scope).SetParam(qlayers.FormatParam, "fp4")
			return ctx
		}(), layer(quanta.Config{}), "is not a format"},
		{"kernel stored transposed", transposedContext(), layer(quanta.Config{}), "qlayers.Dense in scope \"/layer/dense\": the float kernel is stored transposed, weights_t"},
		{"kernel stored transposed, LoRA", transposedContext(), func(ctx *context.Context, x *graph.Node) *graph.Node {
			return qlayers.LoRADense(ctx.In("layer").Checked(false), x, true, outDim, quanta.Config{}, qlayers.LoRA{Rank: 2, Alpha: 2})
		}, "qlayers.LoRADense in scope \"/layer/dense\": the float kernel is stored transposed, weights_t"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := context.ExecOnce(backend, tc.ctx, tc.fn, x)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	backend := testutil.Backend(t)
	x := matrix(5, batch, inDim)
	dir := t.TempDir()
	for _, typ := range quanta.Types() {
		cfg := quanta.Config{Type: typ, Scaled: true}
		t.Run(typ.String(), func(t *testing.T) {
			ctx := floatContext()
			if _, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{{Scope: ".*", Config: cfg}}, qlayers.Options{}); err != nil {
				t.Fatal(err)
			}
			want := flat(t, context.MustExecOnce(backend, ctx, layer(cfg), x))
			checkpoint, err := checkpoints.Build(ctx).Dir(dir + "/" + typ.String()).Done()
			if err != nil {
				t.Fatal(err)
			}
			if err := checkpoint.Save(); err != nil {
				t.Fatal(err)
			}

			// A fresh context reads the checkpoint lazily; the layer's cfg says nothing of the
			// stored format (the parameter does).
			loaded := context.New()
			if _, err := checkpoints.Build(loaded).Dir(dir + "/" + typ.String()).Done(); err != nil {
				t.Fatal(err)
			}
			other := quanta.Config{Type: (typ + 1) % 4}
			got := flat(t, context.MustExecOnce(backend, loaded, layer(other), x))
			if d := maxDiff(got, want); d != 0 {
				t.Errorf("inference after the checkpoint round trip differs by %g", d)
			}
			if loaded.GetVariableByScopeAndName(scope, qlayers.WeightsName) != nil {
				t.Errorf("inference on the loaded quantized context created a float kernel")
			}
		})
	}
}

// TestQuantizeLoadedCheckpoint: a float model saved as a checkpoint and loaded in a fresh context
// the GoMLX way (lazily: its variables come into the context as they are first asked for) is
// converted by QuantizeContext, as one loaded with Immediate is, and runs as the model converted
// before the save; the optimizer state of the float kernel goes with it, so that a checkpoint of
// the converted context does not carry it.
func TestQuantizeLoadedCheckpoint(t *testing.T) {
	backend := testutil.Backend(t)
	x := matrix(5, batch, inDim)
	cfg := quanta.Config{Type: quanta.Int8}
	rules := []qlayers.Rule{{Scope: ".*", Config: cfg}}
	dir := t.TempDir()
	ctx := floatContext()
	trainStep(t, ctx, cfg) // Adam's moments of the kernel
	checkpoint, err := checkpoints.Build(ctx).Dir(dir).Done()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.Save(); err != nil {
		t.Fatal(err)
	}
	if _, err := qlayers.QuantizeContext(ctx, rules, qlayers.Options{}); err != nil {
		t.Fatal(err)
	}
	want := flat(t, context.MustExecOnce(backend, ctx, layer(cfg), x))

	loaded := context.New()
	handler, err := checkpoints.Build(loaded).Dir(dir).Done()
	if err != nil {
		t.Fatal(err)
	}
	report, err := qlayers.QuantizeContext(loaded, rules, qlayers.Options{})
	if err != nil {
		t.Fatalf("QuantizeContext on the lazily loaded checkpoint: %v", err)
	}
	if len(report.Entries) != 1 || !report.Entries[0].Quantized {
		t.Fatalf("report %+v; want the one kernel quantized", report.Entries)
	}
	got := flat(t, context.MustExecOnce(backend, loaded.Reuse(), layer(cfg), x))
	if d := maxDiff(got, want); d != 0 {
		t.Errorf("the loaded and converted model differs from the one converted before the save by %g", d)
	}
	if loaded.GetVariableByScopeAndName(scope, qlayers.WeightsName) != nil {
		t.Errorf("the float kernel is still in the loaded context")
	}
	for key := range handler.LoadedVariables() { // what a Save of the loaded context would write besides its variables
		if _, name := context.VariableScopeAndNameFromParameterName(key); strings.HasPrefix(name, qlayers.WeightsName+"_") {
			t.Errorf("the float kernel's optimizer state %s is still waiting in the checkpoint loader", key)
		}
	}
}

// trainStep runs one Adam step of the one-layer model on ctx (mean squared error to zero).
func trainStep(t *testing.T, ctx *context.Context, cfg quanta.Config) {
	t.Helper()
	backend := testutil.Backend(t)
	model := func(ctx *context.Context, _ any, inputs []*graph.Node) []*graph.Node {
		return []*graph.Node{layer(cfg)(ctx, inputs[0])}
	}
	trainer := train.NewTrainer(backend, ctx, model, losses.MeanSquaredError, optimizers.Adam().Done(), nil, nil)
	x := tensors.FromValue(matrix(3, batch, inDim))
	y := tensors.FromShape(shapes.Make(dtypes.Float32, batch, outDim))
	if _, err := trainer.TrainStep(nil, []*tensors.Tensor{x}, []*tensors.Tensor{y}); err != nil {
		t.Fatalf("%+v", err)
	}
}

// TestQuantizeContextDeletesOptimizerState: deleting a float kernel deletes the optimizer's state
// for it (Adam's two moments), so checkpoints do not carry kernel-sized dead state.
func TestQuantizeContextDeletesOptimizerState(t *testing.T) {
	cfg := quanta.Config{Type: quanta.NF4}
	ctx := floatContext()
	trainStep(t, ctx, cfg)
	moments := func() int {
		n := 0
		for v := range ctx.IterVariables() {
			if strings.HasPrefix(v.Name(), qlayers.WeightsName+"_") {
				n++
			}
		}
		return n
	}
	if moments() == 0 {
		t.Fatal("the Adam step created no state for the kernel: the test does not exercise what it should")
	}
	if _, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{{Scope: ".*", Config: cfg}}, qlayers.Options{}); err != nil {
		t.Fatal(err)
	}
	if n := moments(); n != 0 {
		t.Errorf("%d optimizer variables of the deleted kernel remain", n)
	}
}

// TestKeepFloatFollowsTraining: with KeepFloat, training after QuantizeContext changes what
// inference computes (the float kernel is quantized in the graph), never stale components.
func TestKeepFloatFollowsTraining(t *testing.T) {
	backend := testutil.Backend(t)
	cfg := quanta.Config{Type: quanta.Int8}
	ctx := floatContext()
	if _, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{{Scope: ".*", Config: cfg}}, qlayers.Options{KeepFloat: true}); err != nil {
		t.Fatal(err)
	}
	x := tensors.FromValue(matrix(3, batch, inDim))
	before := flat(t, context.MustExecOnce(backend, ctx.Reuse(), layer(cfg), x))
	trainStep(t, ctx, cfg)
	after := flat(t, context.MustExecOnce(backend, ctx.Reuse(), layer(cfg), x))

	kernel, err := ctx.GetVariableByScopeAndName(scope, qlayers.WeightsName).Value()
	if err != nil {
		t.Fatal(err)
	}
	dense, err := quanta.Simulate(backend, kernel, cfg)
	if err != nil {
		t.Fatal(err)
	}
	biases, err := ctx.GetVariableByScopeAndName(scope, qlayers.BiasesName).Value()
	if err != nil {
		t.Fatal(err)
	}
	want := reference(matrix(3, batch, inDim), flat(t, dense), flat(t, biases))
	if d := maxDiff(after, want); d > 1e-3 {
		t.Errorf("inference after more training differs from the trained kernel quantized by %g", d)
	}
	if d := maxDiff(after, before); d == 0 {
		t.Errorf("the training step changed nothing: the test does not exercise staleness")
	}
}

// TestReconvertSkipRemovesComponents: converting again, with KeepFloat, under rules that now keep
// a layer float (a Skip rule) deletes the components of the earlier conversion, so inference
// runs as on a context converted by the new rules alone (never the old stored format).
func TestReconvertSkipRemovesComponents(t *testing.T) {
	backend := testutil.Backend(t)
	ctx := floatContext()
	keep := qlayers.Options{KeepFloat: true}
	if _, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{{Scope: ".*", Config: quanta.Config{Type: quanta.Int8}}}, keep); err != nil {
		t.Fatal(err)
	}
	report, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{{Scope: scope, Skip: true}}, keep)
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Entries) != 1 || report.Entries[0].Quantized {
		t.Fatalf("report:\n%s", report)
	}
	if ctx.InspectVariable(scope, qlayers.ComponentPrefix+"0") != nil || ctx.InspectVariable(scope, qlayers.WeightsName) == nil {
		t.Fatal("the int8 components are still stored, or the float kernel is gone")
	}
	cfg := quanta.Config{Type: quanta.NF4}
	x := tensors.FromValue(matrix(3, batch, inDim))
	got := flat(t, context.MustExecOnce(backend, ctx.Reuse(), layer(cfg), x))
	want := flat(t, context.MustExecOnce(backend, floatContext().Reuse(), layer(cfg), x))
	if d := maxDiff(got, want); d != 0 {
		t.Errorf("inference differs by %g from a context the Skip rule left float", d)
	}
}

func TestQuantizeContextNil(t *testing.T) {
	if _, err := qlayers.QuantizeContext(nil, nil, qlayers.Options{}); err == nil || !strings.Contains(err.Error(), "nil context") {
		t.Errorf("QuantizeContext(nil) = %v, want an error", err)
	}
}

// TestKeepFloatTrainsStoredFormat: more QAT after QuantizeContext with KeepFloat fake-quantizes the
// kernel in the stored format (FormatParam), the one inference then uses, even when Dense is given
// another Config (here the zero value, NF4): the training forward pass equals x·W + b with W the
// int8 fake quantization of the kernel, recomputed in float64 (scale = amax/127 per input row,
// round half to even).
func TestKeepFloatTrainsStoredFormat(t *testing.T) {
	backend := testutil.Backend(t)
	ctx := floatContext()
	rules := []qlayers.Rule{{Scope: ".*", Config: quanta.Config{Type: quanta.Int8}}}
	if _, err := qlayers.QuantizeContext(ctx, rules, qlayers.Options{KeepFloat: true}); err != nil {
		t.Fatal(err)
	}
	x := matrix(3, batch, inDim)
	got := flat(t, context.MustExecOnce(backend, ctx.Reuse(), func(ctx *context.Context, x *graph.Node) *graph.Node {
		ctx.SetTraining(x.Graph(), true)
		return layer(quanta.Config{})(ctx, x)
	}, x))
	w := matrix(1, inDim, outDim)
	fake := make([]float32, 0, inDim*outDim)
	for _, row := range w {
		var amax float64
		for _, v := range row {
			amax = math.Max(amax, math.Abs(float64(v)))
		}
		scale := amax / 127
		for _, v := range row {
			fake = append(fake, float32(math.RoundToEven(float64(v)/scale)*scale))
		}
	}
	want := reference(x, fake, values(2, outDim))
	if d := maxDiff(got, want); d > 1e-3 {
		t.Errorf("training forward differs from the stored int8 format's by %g", d)
	}
}
