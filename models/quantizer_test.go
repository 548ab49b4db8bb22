package models_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/checkpoints"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/ggml"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/qlayers"
)

// QLoRA's NF4 values used below (the published codebook).
const (
	nf4p0160 = 0.16093020141124725
	nf4p4407 = 0.44070982933044434
	nf4m5251 = -0.5250730514526367
)

// project stores kernel (inDim, outDim) and biases through q.Kernel under scope "/proj", then
// returns q.Projection's y for x.
func project(t *testing.T, q *models.Quantizer, kernel [][]float32, biases []float32, x [][]float32) []float64 {
	t.Helper()
	vars, err := q.Kernel("/proj", tensors.FromValue(kernel))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.New()
	if biases != nil {
		vars = append(vars, models.Variable{Scope: "/proj/dense", Name: models.DenseBiases, Value: tensors.FromValue(biases)})
	}
	if err := models.Store(ctx, vars); err != nil {
		t.Fatal(err)
	}
	outDim := len(kernel[0])
	y := context.MustExecOnce(testutil.Backend(t), ctx.Reuse(), func(ctx *context.Context, x *graph.Node) *graph.Node {
		return q.Projection(ctx, "proj", x, outDim, biases != nil)
	}, x)
	return testutil.Float64s(t, y)
}

// TestQuantizerLayouts checks the products against weights quantized by hand: the layout decides
// the axis of NF4's blocks and of int8's scales.
func TestQuantizerLayouts(t *testing.T) {
	// Kernel (in=2, out=2), W[in][out].
	nf4Kernel := [][]float32{{1, 0.5}, {-2, 4}}
	// int8: columns (outputs) [1, 2.2, -4, 0.5] and [0.5, -1.1, 0.25, 2] (no ties at 127/absmax).
	int8Kernel := [][]float32{{1, 0.5}, {2.2, -1.1}, {-4, 0.25}, {0.5, 2}}
	ones := [][]float32{{1, 1, 1, 1}}
	for _, tc := range []struct {
		name   string
		rule   models.Rule
		kernel [][]float32
		biases []float32
		x      [][]float32
		want   []float64
	}{
		{
			// Blocks of 2 along out are the rows: [1, 0.5] → absmax 1, 0.5 → 0.4407;
			// [-2, 4] → absmax 4, -0.5 → -0.5251. x = [1, 0] and [0, 1] read the rows.
			name:   "nf4 in,out: blocks along out",
			rule:   models.Rule{Scope: ".*", Config: quanta.Config{Type: quanta.NF4, BlockSize: 2}, Layout: qlayers.InOut},
			kernel: nf4Kernel, x: [][]float32{{1, 0}, {0, 1}},
			want: []float64{1, nf4p4407, 4 * nf4m5251, 4},
		},
		{
			// Blocks of 2 along in are the columns: [1, -2] → absmax 2, 0.5 → 0.4407·2;
			// [0.5, 4] → absmax 4, 0.125 → 0.1609·4.
			name:   "nf4 out,in: blocks along in",
			rule:   models.Rule{Scope: ".*", Config: quanta.Config{Type: quanta.NF4, BlockSize: 2}, Layout: qlayers.OutIn},
			kernel: nf4Kernel, x: [][]float32{{1, 0}, {0, 1}},
			want: []float64{2 * nf4p4407, 4 * nf4p0160, -2, 4},
		},
		{
			// One scale per output: absmax 4 → codes [32, 70, -127, 16], sum -9, ·4/127;
			// absmax 2 → [32, -70, 16, 127], sum 105, ·2/127; plus the biases.
			name:   "int8 out,in: a scale per output channel",
			rule:   models.Rule{Scope: ".*", Config: quanta.Config{Type: quanta.Int8}, Layout: qlayers.OutIn},
			kernel: int8Kernel, biases: []float32{0.5, -1}, x: ones,
			want: []float64{-9*4.0/127 + 0.5, 105*2.0/127 - 1},
		},
		{
			// Unscaled ternary: threshold 0.5·std of all 8 values (std 1.8502): ±1 beyond 0.9251.
			name:   "ternary in,out",
			rule:   models.Rule{Scope: ".*", Config: quanta.Config{Type: quanta.Ternary}, Layout: qlayers.InOut},
			kernel: int8Kernel, x: ones,
			want: []float64{1 + 1 - 1 + 0, 0 - 1 + 0 + 1},
		},
		{
			// Binary with one mean|w| per output column: [1, 1, -1, 1]·1.925 and [1, -1, 1, 1]·0.9625.
			name:   "binary scaled in,out",
			rule:   models.Rule{Scope: ".*", Config: quanta.Config{Type: quanta.Binary, Scaled: true}, Layout: qlayers.InOut},
			kernel: int8Kernel, x: ones,
			want: []float64{2 * 1.925, 2 * 0.9625},
		},
		{
			name:   "skip: float",
			rule:   models.Rule{Scope: ".*", Skip: true},
			kernel: int8Kernel, biases: []float32{0.5, -1}, x: ones,
			want: []float64{-0.3 + 0.5, 1.65 - 1},
		},
		{
			name:   "skip out,in: float, stored transposed",
			rule:   models.Rule{Scope: ".*", Skip: true, Layout: qlayers.OutIn},
			kernel: int8Kernel, biases: []float32{0.5, -1}, x: [][]float32{{1, 1, 1, 1}, {0, 1, 0, 0}},
			want: []float64{-0.3 + 0.5, 1.65 - 1, 2.2 + 0.5, -1.1 - 1},
		},
		{
			name:   "keep: a float kernel as a file stores it, (out, in)",
			rule:   models.Rule{Scope: ".*", Keep: true},
			kernel: int8Kernel, x: [][]float32{{0, 0, 1, 0}},
			want: []float64{-4, 0.25},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := models.MustNewQuantizer([]models.Rule{tc.rule})
			got := project(t, q, tc.kernel, tc.biases, tc.x)
			if diff, _ := testutil.MaxAbsDiff(got, tc.want); diff > 1e-5 {
				t.Errorf("y = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestQuantizerRules checks rule order, Skip, the report and the errors.
func TestQuantizerRules(t *testing.T) {
	q := models.MustNewQuantizer([]models.Rule{
		{Scope: "/layer_0/.*", Skip: true},
		{Scope: "/layer_[0-9]+/ffn_.*", Config: quanta.Config{Type: quanta.Int8}, Layout: qlayers.OutIn},
		{Scope: ".*", Config: quanta.Config{Type: quanta.NF4}},
	})
	kernel := func() *tensors.Tensor { return testutil.RandomTensor(1, 64, 128) }
	for _, tc := range []struct {
		scope, want string
	}{
		{"/layer_0/ffn_up", "float"},
		{"/layer_1/ffn_up", "int8"},
		{"/layer_1/attn_q", "nf4"},
	} {
		k := kernel()
		vars, err := q.Kernel(tc.scope, k)
		if err != nil {
			t.Fatal(err)
		}
		// A quantized kernel lets the float one go at once: a model never holds both.
		if quantized := tc.want != "float"; k.Ok() == quantized {
			t.Errorf("%s: float kernel still valid after Kernel: %v", tc.scope, k.Ok())
		}
		got := "float"
		if len(vars) == 2 && vars[0].Value.DType() == dtypes.Int8 {
			got = "int8"
		} else if len(vars) == 2 && vars[0].Value.DType() == dtypes.Uint8 {
			got = "nf4"
		}
		if got != tc.want || vars[0].Scope != tc.scope+"/dense" {
			t.Errorf("%s: stored %d variables (%s) in %s, want %s", tc.scope, len(vars), got, vars[0].Scope, tc.want)
		}
	}
	r := q.Report()
	// 64×128 float32 = 32768 bytes; int8: 8192 codes + 128 scales·4; nf4: 4096 packed + 64·2 absmax·4.
	if before, after := r.BytesBefore(), r.BytesAfter(); before != 3*32768 || after != 32768+8192+512+4096+512 {
		t.Errorf("report: %d -> %d bytes\n%s", before, after, r)
	}
	for _, rules := range [][]models.Rule{
		{{Scope: "(", Config: quanta.Config{}}},
		{{Scope: ".*", Config: quanta.Config{BlockSize: 3}}},
		{{Scope: ".*", Layout: qlayers.KernelLayout(7)}},
	} {
		if _, err := models.NewQuantizer(rules); err == nil {
			t.Errorf("NewQuantizer(%+v): no error", rules)
		}
	}
	if _, err := q.Kernel("/layer_1/attn_q", tensors.FromValue([][]float64{{1, 2}})); err == nil {
		t.Error("Kernel of a float64 kernel: no error")
	}
	// Binary packs 4 rows a byte along the first stored axis: out,in needs outDim % 4 == 0.
	binary := models.MustNewQuantizer([]models.Rule{{Scope: ".*", Config: quanta.Config{Type: quanta.Binary}, Layout: qlayers.OutIn}})
	if _, err := binary.Kernel("/p", testutil.RandomTensor(1, 8, 6)); err == nil || !strings.Contains(err.Error(), "/p") {
		t.Errorf("binary (out,in) with outDim 6: %v, want an error naming the scope", err)
	}
}

// TestQuantizerProjectionErrors: a scope quantized by Kernel whose components are not in the
// context, and an input of the wrong width, panic naming the scope.
func TestQuantizerProjectionErrors(t *testing.T) {
	q := models.MustNewQuantizer([]models.Rule{{Scope: ".*", Config: quanta.Config{Type: quanta.Int8}}})
	if _, err := q.Kernel("/proj", testutil.RandomTensor(1, 4, 8)); err != nil {
		t.Fatal(err)
	}
	backend := testutil.Backend(t)
	for _, tc := range []struct {
		name string
		x    [][]float32
		want string
	}{
		{"missing components", [][]float32{{1, 2, 3, 4}}, "weights.q0"},
		{"wrong width", [][]float32{{1, 2, 3}}, "[..., 4]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.New()
			err := catch(func() {
				context.MustExecOnce(backend, ctx.Reuse(), func(ctx *context.Context, x *graph.Node) *graph.Node {
					return q.Projection(ctx, "proj", x, 8, false)
				}, tc.x)
			})
			if err == nil || !strings.Contains(err.Error(), "/proj/dense") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v; want a panic naming /proj/dense and %q", err, tc.want)
			}
		})
	}
}

// TestQuantizerUnrecordedComponents: a Quantizer runs only the kernels and tables it stored
// itself; given a context with another Quantizer's components (a checkpoint loaded in a fresh
// process), Projection and Table panic naming the scope and the stored component, rather than
// falling back to the float layer and failing on a float variable that does not exist.
func TestQuantizerUnrecordedComponents(t *testing.T) {
	rules := []models.Rule{{Scope: ".*", Config: quanta.Config{Type: quanta.Int8}, Layout: qlayers.OutIn}}
	loader := models.MustNewQuantizer(rules)
	vars, err := loader.Kernel("/proj", testutil.RandomTensor(1, 4, 8))
	if err != nil {
		t.Fatal(err)
	}
	table, err := loader.QuantizeTable("/emb", testutil.RandomTensor(2, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.New()
	if err := models.Store(ctx, append(vars, table...)); err != nil {
		t.Fatal(err)
	}
	fresh := models.MustNewQuantizer(rules)
	backend := testutil.Backend(t)
	for _, tc := range []struct {
		name string
		fn   func(ctx *context.Context, x *graph.Node) *graph.Node
		want []string
	}{
		{"Projection", func(ctx *context.Context, x *graph.Node) *graph.Node {
			return fresh.Projection(ctx, "proj", x, 8, false)
		}, []string{"models.Quantizer.Projection", "/proj/dense", "weights.q0"}},
		{"Table", func(ctx *context.Context, x *graph.Node) *graph.Node {
			return implicitarray.Materialize(fresh.Table(ctx, "emb", x.Graph(), 2, 3))
		}, []string{"models.Quantizer.Table", "/emb", "embeddings.q0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := catch(func() {
				context.MustExecOnce(backend, ctx.Reuse(), tc.fn, [][]float32{{1, 2, 3, 4}})
			})
			for _, want := range tc.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("got %v; want a panic naming %q", err, want)
				}
			}
		})
	}
}

func catch(f func()) (err error) {
	defer testutil.RecoverError(&err)
	f()
	return nil
}

// TestQuantizerFloatLayouts: a float kernel is stored as DenseWeights (inDim, outDim) without a
// rule and under a Skip rule in qlayers.InOut, and transposed, DenseWeightsTransposed (outDim,
// inDim), under a Skip rule in qlayers.OutIn and a Keep rule (as a file stores a linear weight).
// The layout is in the variable's name, so Dense multiplies either right without the Quantizer
// that stored it (a checkpoint read in a fresh process): W = [[1, 2], [3, 4]] (in, out) and
// x = [1, 10] give y = x·W = [31, 42].
func TestQuantizerFloatLayouts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules []models.Rule
		want  string
	}{
		{"no rule", nil, models.DenseWeights},
		{"skip in,out", []models.Rule{{Scope: ".*", Skip: true}}, models.DenseWeights},
		{"skip out,in", []models.Rule{{Scope: ".*", Skip: true, Layout: qlayers.OutIn}}, models.DenseWeightsTransposed},
		{"keep", []models.Rule{{Scope: ".*", Keep: true}}, models.DenseWeightsTransposed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := models.MustNewQuantizer(tc.rules)
			vars, err := q.Kernel("/proj", tensors.FromValue([][]float32{{1, 2}, {3, 4}}))
			if err != nil {
				t.Fatal(err)
			}
			if len(vars) != 1 || vars[0].Scope != "/proj/dense" || vars[0].Name != tc.want ||
				!slices.Equal(vars[0].Value.Shape().Dimensions, []int{2, 2}) {
				t.Fatalf("stored %+v; want one float kernel /proj/dense/%s of dimensions [2 2]", vars, tc.want)
			}
			ctx := context.New()
			if err := models.Store(ctx, vars); err != nil {
				t.Fatal(err)
			}
			fresh := models.MustNewQuantizer(nil)
			for _, p := range []struct {
				name       string
				projection models.Projection
			}{{"storing Quantizer", q.Projection}, {"fresh Quantizer", fresh.Projection}, {"Dense", models.Dense}} {
				y := context.MustExecOnce(testutil.Backend(t), ctx.Reuse(), func(ctx *context.Context, x *graph.Node) *graph.Node {
					return p.projection(ctx, "proj", x, 2, false)
				}, [][]float32{{1, 10}})
				if got := testutil.Float64s(t, y); !slices.Equal(got, []float64{31, 42}) {
					t.Errorf("%s: y = %v; want [31 42]", p.name, got)
				}
			}
		})
	}
}

func TestPresets(t *testing.T) {
	for _, name := range models.PresetNames() {
		rules, err := models.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := models.NewQuantizer(rules); err != nil || models.PresetDoc(name) == "" {
			t.Errorf("preset %s: %v, doc %q", name, err, models.PresetDoc(name))
		}
		if upper := " " + strings.ToUpper(name) + " "; models.PresetDoc(upper) != models.PresetDoc(name) {
			t.Errorf("PresetDoc(%q) = %q; want the doc of %q, as Preset reads the name", upper, models.PresetDoc(upper), name)
		}
		if name == models.FilePreset {
			if len(rules) != 1 || !rules[0].Keep || rules[0].Scope != ".*" {
				t.Errorf("preset %s: %+v; want one Keep rule for every scope", name, rules)
			}
			continue
		}
		if !rules[0].Skip || rules[0].Scope != "/lm_head" {
			t.Errorf("preset %s: the output head is not kept float: %+v", name, rules[0])
		}
	}
	if _, err := models.Preset("nf3"); err == nil {
		t.Error("Preset(nf3): no error")
	}
}

// TestDefaultTableFormat: the file's format keeps the file's table, f32 keeps it float, every
// conversion stores it int8.
func TestDefaultTableFormat(t *testing.T) {
	for _, tc := range []struct{ format, want string }{
		{models.FilePreset, models.FilePreset}, {"f32", "f32"}, {"nf4", "int8"}, {"int8", "int8"}, {"ternary", "int8"},
	} {
		if got := models.DefaultTableFormat(tc.format); got != tc.want {
			t.Errorf("DefaultTableFormat(%q) = %q, want %q", tc.format, got, tc.want)
		}
	}
}

// TestQuantizerCheckpointAttach: attaching a GoMLX checkpoint to a context loaded through the
// Quantizer (resuming it) replaces the stored components' values, finalizing the tensors they
// had; the projections and tables then still build, with the values saved.
func TestQuantizerCheckpointAttach(t *testing.T) {
	backend := testutil.Backend(t)
	q := models.MustNewQuantizer([]models.Rule{{Scope: ".*", Config: quanta.Config{Type: quanta.Int8}, Layout: qlayers.OutIn}})
	// As in TestQuantizerLayouts: one scale per output, y = [-9·4/127, 105·2/127] for x = ones.
	kernel := [][]float32{{1, 0.5}, {2.2, -1.1}, {-4, 0.25}, {0.5, 2}}
	vars, err := q.Kernel("/proj", tensors.FromValue(kernel))
	if err != nil {
		t.Fatal(err)
	}
	table, err := q.QuantizeTable("/emb", tensors.FromValue([][]float32{{1, -2, 0.5}, {4, 0, -1}}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.New()
	if err := models.Store(ctx, append(vars, table...)); err != nil {
		t.Fatal(err)
	}
	run := func() ([]float64, []float64) {
		out := context.MustExecOnceN(backend, ctx.Reuse(), func(ctx *context.Context, x, ids *graph.Node) []*graph.Node {
			rows := qlayers.Lookup(q.Table(ctx, "emb", x.Graph(), 2, 3), ids)
			return []*graph.Node{q.Projection(ctx, "proj", x, 2, false), rows}
		}, [][]float32{{1, 1, 1, 1}}, []int32{1, 0})
		return testutil.Float64s(t, out[0]), testutil.Float64s(t, out[1])
	}
	y, rows := run()
	if diff, _ := testutil.MaxAbsDiff(y, []float64{-9 * 4.0 / 127, 105 * 2.0 / 127}); diff > 1e-5 {
		t.Fatalf("y = %v before the checkpoint", y)
	}
	dir := t.TempDir()
	checkpoint, err := checkpoints.Build(ctx).Dir(dir).Done()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.Save(); err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoints.Build(ctx).Dir(dir).Done(); err != nil {
		t.Fatal(err)
	}
	var yAfter, rowsAfter []float64
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("building after the checkpoint was attached: %v", r)
			}
		}()
		yAfter, rowsAfter = run()
	}()
	if !slices.Equal(yAfter, y) || !slices.Equal(rowsAfter, rows) {
		t.Errorf("after the checkpoint: y %v, rows %v; want %v, %v", yAfter, rowsAfter, y, rows)
	}
}

// TestKeepDeleted: keeping a deleted array is an error wrapping implicitarray.ErrDeleted, naming
// the method and the scope, not a panic on its finalized tensors.
func TestKeepDeleted(t *testing.T) {
	rules, err := models.Preset(models.FilePreset)
	if err != nil {
		t.Fatal(err)
	}
	q, err := models.NewQuantizer(rules)
	if err != nil {
		t.Fatal(err)
	}
	for name, keep := range map[string]func(implicitarray.Array) ([]models.Variable, error){
		"KeepKernel": func(a implicitarray.Array) ([]models.Variable, error) { return q.KeepKernel("/blk.0/attn_q", a) },
		"KeepTable":  func(a implicitarray.Array) ([]models.Variable, error) { return q.KeepTable("/token_embd", a) },
	} {
		w := ggml.MustQuantize(testutil.RandomTensor(1, 4, 32), gguf.TypeQ8_0)
		w.Delete()
		if _, err := keep(w); !errors.Is(err, implicitarray.ErrDeleted) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s of a deleted array: %v; want an error wrapping implicitarray.ErrDeleted naming %s", name, err, name)
		}
	}
}
