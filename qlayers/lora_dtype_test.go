package qlayers_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/bnb"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/qlayers"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/quanta-ml/quanta/safetensors"
	"github.com/x448/float16"
)

// halfDTypes are the half-precision dtypes of a model's layers.
var halfDTypes = []dtypes.DType{dtypes.BFloat16, dtypes.Float16}

// halfTensor returns values (dims) as a host tensor of dtype (bfloat16 or float16), and
// the float32 values it holds after the rounding.
func halfTensor(dtype dtypes.DType, values []float32, dims ...int) (*tensors.Tensor, []float32) {
	rounded := make([]float32, len(values))
	if dtype == dtypes.Float32 {
		return tensors.FromFlatDataAndDimensions(values, dims...), values
	}
	if dtype == dtypes.BFloat16 {
		v := make([]bfloat16.BFloat16, len(values))
		for i, x := range values {
			v[i] = bfloat16.FromFloat32(x)
			rounded[i] = v[i].Float32()
		}
		return tensors.FromFlatDataAndDimensions(v, dims...), rounded
	}
	v := make([]float16.Float16, len(values))
	for i, x := range values {
		v[i] = float16.Fromfloat32(x)
		rounded[i] = v[i].Float32()
	}
	return tensors.FromFlatDataAndDimensions(v, dims...), rounded
}

// TestSaveAdaptersHalfPrecision: the adapters of a bfloat16 or float16 layer (LoRADense creates
// them in the input's dtype) are saved as float32 [r, in] and [out, r] with their values.
func TestSaveAdaptersHalfPrecision(t *testing.T) {
	for _, dtype := range halfDTypes {
		t.Run(dtype.String(), func(t *testing.T) {
			ctx := context.New()
			dense := ctx.In("layer").In(qlayers.Scope)
			w, _ := halfTensor(dtype, values(1, inDim*outDim), inDim, outDim)
			a, aValues := halfTensor(dtype, values(5, inDim*loraCfg.Rank), inDim, loraCfg.Rank)
			b, bValues := halfTensor(dtype, values(6, loraCfg.Rank*outDim), loraCfg.Rank, outDim)
			dense.VariableWithValue(qlayers.WeightsName, w)
			dense.VariableWithValue(qlayers.LoRAAName, a)
			dense.VariableWithValue(qlayers.LoRABName, b)
			dense.SetParam(qlayers.LoRAScaleParam, loraCfg.Scale())
			dir := savedAdapters(t, ctx)
			f := safetensors.MustOpen(filepath.Join(dir, qlayers.AdapterWeightsFile))
			defer f.Close()
			for _, tc := range []struct {
				name       string
				want       []float32
				rows, cols int // in the context
			}{{"lora_A", aValues, inDim, loraCfg.Rank}, {"lora_B", bValues, loraCfg.Rank, outDim}} {
				got, err := f.ReadFloat32("base_model.model.layer." + tc.name + ".weight")
				if err != nil {
					t.Fatal(err)
				}
				saved := flat(t, got)
				for i := range tc.rows {
					for j := range tc.cols {
						if g, w := saved[j*tc.rows+i], tc.want[i*tc.cols+j]; g != w {
							t.Fatalf("%s[%d, %d] = %g, want %g", tc.name, j, i, g, w)
						}
					}
				}
			}
		})
	}
}

// halfLoRALayer is loraLayer on x converted to dtype, its output converted back to float32.
func halfLoRALayer(dtype dtypes.DType, cfg ...quanta.Config) func(ctx *context.Context, x *graph.Node) *graph.Node {
	return func(ctx *context.Context, x *graph.Node) *graph.Node {
		y := qlayers.LoRADense(ctx.In("layer").Checked(false), graph.ConvertDType(x, dtype), true, outDim, append(cfg, nf4DQ)[0], loraCfg)
		return graph.ConvertDType(y, dtypes.Float32)
	}
}

// execLayer runs layer on ctx once with the input x (context.MustExecOnce), failing the test,
// named what, with the error the graph panicked with where it does not build or run.
func execLayer(t *testing.T, what string, backend backends.Backend, ctx *context.Context,
	layer func(ctx *context.Context, x *graph.Node) *graph.Node, x any) *tensors.Tensor {
	t.Helper()
	var got *tensors.Tensor
	err := func() (err error) {
		defer testutil.RecoverError(&err)
		got = context.MustExecOnce(backend, ctx, layer, x)
		return nil
	}()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return got
}

// halfQLoRAContext returns a context with one NF4-DQ layer quantized from a kernel of dtype, its
// bias and adapters A, B (non-zero) in dtype, as LoRADense on an input of dtype creates them.
func halfQLoRAContext(t *testing.T, dtype dtypes.DType, cfg ...quanta.Config) *context.Context {
	t.Helper()
	if dtype == dtypes.Float16 && runtime.IsGo(testutil.Backend(t)) {
		t.Skip("the pure-Go backend has no float16 parameters")
	}
	ctx := context.New()
	dense := ctx.In("layer").In(qlayers.Scope)
	w, _ := halfTensor(dtype, values(1, inDim*outDim), inDim, outDim)
	b, _ := halfTensor(dtype, values(2, outDim), outDim)
	dense.VariableWithValue(qlayers.WeightsName, w)
	dense.VariableWithValue(qlayers.BiasesName, b)
	if _, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{{Scope: ".*", Config: append(cfg, nf4DQ)[0]}}, qlayers.Options{}); err != nil {
		t.Fatal(err)
	}
	a, _ := halfTensor(dtype, values(5, inDim*loraCfg.Rank), inDim, loraCfg.Rank)
	bb, _ := halfTensor(dtype, values(6, loraCfg.Rank*outDim), loraCfg.Rank, outDim)
	dense.VariableWithValue(qlayers.LoRAAName, a)
	dense.VariableWithValue(qlayers.LoRABName, bb)
	dense.SetParam(qlayers.LoRAScaleParam, loraCfg.Scale())
	return ctx
}

// TestLoRAMergeHalfPrecision: after a dense merge of a bfloat16 or float16 QLoRA layer, the layer
// computes in its input's dtype and gives the unmerged output (within the dtype's rounding of the
// merged kernel).
func TestLoRAMergeHalfPrecision(t *testing.T) {
	backend := testutil.Backend(t)
	x := matrix(3, batch, inDim)
	for _, dtype := range halfDTypes {
		t.Run(dtype.String(), func(t *testing.T) {
			ctx := halfQLoRAContext(t, dtype)
			want := flat(t, context.MustExecOnce(backend, ctx, halfLoRALayer(dtype), x))
			if err := qlayers.MergeLoRA(ctx, backend, qlayers.MergeOptions{}); err != nil {
				t.Fatalf("%+v", err)
			}
			got := flat(t, execLayer(t, "LoRADense after MergeLoRA", backend, ctx, halfLoRALayer(dtype), x))
			if d, bound := maxDiff(got, want), 0.05*maxAbs(want); d > bound {
				t.Errorf("merged output differs by %g (bound %g)", d, bound)
			}
		})
	}
}

// TestLoadAdaptersHalfPrecision: adapters saved from a bfloat16 or float16 QLoRA layer load into
// a layer of the same dtype, without adapters or with its own (as LoRADense created them), and the
// layer gives the output it gave with the saved adapters.
func TestLoadAdaptersHalfPrecision(t *testing.T) {
	backend := testutil.Backend(t)
	x := matrix(3, batch, inDim)
	for _, dtype := range halfDTypes {
		for _, withAdapters := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/adapters=%v", dtype, withAdapters), func(t *testing.T) {
				ctx := halfQLoRAContext(t, dtype)
				want := flat(t, context.MustExecOnce(backend, ctx, halfLoRALayer(dtype), x))
				dir := savedAdapters(t, ctx)
				fresh := halfQLoRAContext(t, dtype)
				for _, name := range []string{qlayers.LoRAAName, qlayers.LoRABName} {
					if withAdapters {
						v := fresh.In("layer").In(qlayers.Scope).GetVariable(name)
						v.MustSetValue(tensors.FromShape(v.Shape()))
					} else if err := fresh.DeleteVariable("/layer/dense", name); err != nil {
						t.Fatal(err)
					}
				}
				if err := qlayers.LoadAdapters(fresh, dir, qlayers.AdapterOptions{}); err != nil {
					t.Fatalf("%+v", err)
				}
				got := flat(t, execLayer(t, "LoRADense with loaded adapters", backend, fresh, halfLoRALayer(dtype), x))
				if d := maxDiff(got, want); d != 0 {
					t.Errorf("output with loaded adapters differs by %g", d)
				}
			})
		}
	}
}

// TestLoRAMergeHalfPrecisionScales: the bases whose scales are stored in the kernel's dtype (NF4
// absmax, int8 scale) of a bfloat16 or float16 layer merge, densely or re-quantized, and the layer
// then gives the unmerged output: within the dtype's rounding densely, and re-quantized within the
// second rounding of a weight the adapters grew (about 9 at most here, a code step of NF4 about 1).
func TestLoRAMergeHalfPrecisionScales(t *testing.T) {
	backend := testutil.Backend(t)
	x := matrix(3, batch, inDim)
	for _, dtype := range halfDTypes {
		for _, cfg := range []quanta.Config{{}, {Type: quanta.Int8}} {
			for _, requantize := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/requantize=%v", dtype, cfg.Type, requantize), func(t *testing.T) {
					ctx := halfQLoRAContext(t, dtype, cfg)
					want := flat(t, context.MustExecOnce(backend, ctx, halfLoRALayer(dtype, cfg), x))
					if err := qlayers.MergeLoRA(ctx, backend, qlayers.MergeOptions{Requantize: requantize}); err != nil {
						t.Fatalf("%+v", err)
					}
					got := flat(t, execLayer(t, "LoRADense after MergeLoRA", backend, ctx, halfLoRALayer(dtype, cfg), x))
					bound := 0.05 * maxAbs(want)
					if requantize {
						bound = 0.6 * maxAbs(want)
					}
					if d := maxDiff(got, want); d > bound {
						t.Errorf("merged output differs by %g (bound %g)", d, bound)
					}
				})
			}
		}
	}
}

// TestStoreBaseBiasDType: a base stored by StoreBase with a bias in another float dtype than the
// layer's input (a bitsandbytes layer's float32 bias under a bfloat16 model, or the reverse) gives,
// in Dense and in a fresh LoRADense, y = x·W + b in the input's dtype, W the base's dense value and
// b the stored bias, computed on the host.
func TestStoreBaseBiasDType(t *testing.T) {
	backend := testutil.Backend(t)
	type layerFn = func(ctx *context.Context, x *graph.Node) *graph.Node
	for _, tc := range []struct{ bias, x dtypes.DType }{
		{dtypes.Float32, dtypes.BFloat16}, {dtypes.BFloat16, dtypes.Float32},
		{dtypes.Float32, dtypes.Float16}, {dtypes.Float16, dtypes.Float32},
	} {
		for name, fn := range map[string]layerFn{
			"Dense": func(ctx *context.Context, x *graph.Node) *graph.Node {
				return qlayers.Dense(ctx.In("layer").Checked(false), x, true, outDim, quanta.Config{Type: quanta.Int8})
			},
			"LoRADense": func(ctx *context.Context, x *graph.Node) *graph.Node {
				return qlayers.LoRADense(ctx.In("layer").Checked(false), x, true, outDim, quanta.Config{Type: quanta.Int8}, loraCfg)
			},
		} {
			t.Run(fmt.Sprintf("%s/bias=%s/x=%s", name, tc.bias, tc.x), func(t *testing.T) {
				if (tc.bias == dtypes.Float16 || tc.x == dtypes.Float16) && runtime.IsGo(backend) {
					t.Skip("the pure-Go backend has no float16 parameters")
				}
				kernel, _ := halfTensor(tc.x, values(1, inDim*outDim), inDim, outDim)
				w, err := qint8.Quantize(kernel)
				if err != nil {
					t.Fatal(err)
				}
				bias, b := halfTensor(tc.bias, values(2, outDim), outDim)
				x, xv := halfTensor(tc.x, values(3, batch*inDim), batch, inDim)
				ctx := context.New()
				if err := qlayers.StoreBase(ctx, "/layer", w, bias, qlayers.InOut); err != nil {
					t.Fatalf("%+v", err)
				}
				got := execLayer(t, fmt.Sprintf("%s on a %s bias with a %s input", name, tc.bias, tc.x), backend, ctx, fn, x)
				if got.DType() != tc.x {
					t.Fatalf("output %s; want %s", got.Shape(), tc.x)
				}
				wv := testutil.Float32s(t, testutil.Materialize(t, w))
				rows := make([][]float32, batch)
				for i := range rows {
					rows[i] = xv[i*inDim : (i+1)*inDim]
				}
				want := reference(rows, wv, b)
				bound := 1e-4 * maxAbs(want)
				if tc.x != dtypes.Float32 {
					bound = 0.01 * maxAbs(want) // the output's rounding
				}
				if d := maxDiff(testutil.Float32s(t, got), want); d > bound {
					t.Errorf("y differs from x·W + b by %g (bound %g)", d, bound)
				}
			})
		}
	}
}

// TestLoRAMergeRequantizeFlatNF4: MergeLoRA with Requantize on an NF4 base with flattened blocks
// (StoreBase's bitsandbytes layout) keeps the stored components' shapes and dtypes, with the
// absmax in float32 or the kernel's half dtype and with rows that hold whole blocks or not; Base
// and LoRADense then read the base, and the layer gives x·(W + (α/r)·A·B)ᵀ computed on the host
// from the unmerged base, within the second rounding (a code step of NF4 about 1 here, weights up
// to about 2).
func TestLoRAMergeRequantizeFlatNF4(t *testing.T) {
	backend := testutil.Backend(t)
	for _, dtype := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16, dtypes.Float16} {
		for _, in := range []int{40, 64} { // blocks of 64 across rows, or whole rows
			t.Run(fmt.Sprintf("%s/in=%d", dtype, in), func(t *testing.T) {
				if dtype == dtypes.Float16 && runtime.IsGo(backend) {
					t.Skip("the pure-Go backend has no float16 parameters")
				}
				const out = 24
				w := halfFlat(t, dtype, values(11, out*in), out, in)
				ctx := context.New()
				if err := qlayers.StoreBase(ctx, "/proj", w, nil, qlayers.OutIn); err != nil {
					t.Fatalf("%+v", err)
				}
				dense := ctx.In("proj").In(qlayers.Scope)
				a, av := halfTensor(dtype, values(5, in*loraCfg.Rank), in, loraCfg.Rank)
				b, bv := halfTensor(dtype, values(6, loraCfg.Rank*out), loraCfg.Rank, out)
				dense.VariableWithValue(qlayers.LoRAAName, a)
				dense.VariableWithValue(qlayers.LoRABName, b)
				dense.SetParam(qlayers.LoRAScaleParam, loraCfg.Scale())
				wv := testutil.Float32s(t, testutil.Materialize(t, w)) // (out, in), before the merge replaces w's components
				var before []string
				for _, c := range w.Components() {
					before = append(before, c.Shape().String())
				}
				if err := qlayers.MergeLoRA(ctx, backend, qlayers.MergeOptions{Requantize: true}); err != nil {
					t.Fatalf("%+v", err)
				}
				for i, want := range before {
					v := dense.GetVariable(qlayers.ComponentPrefix + fmt.Sprint(i))
					if v == nil || v.Shape().String() != want {
						t.Fatalf("component %d after the merge: %v; stored %s", i, v.Shape(), want)
					}
				}
				if _, _, err := qlayers.Base(ctx, "/proj", in, out); err != nil {
					t.Fatalf("Base after the merge: %+v", err)
				}
				x, xv := halfTensor(dtype, values(13, 3*in), 3, in)
				got := execLayer(t, "LoRADense after the merge", backend, ctx, func(ctx *context.Context, x *graph.Node) *graph.Node {
					return qlayers.LoRADense(ctx.In("proj").Checked(false), x, false, out, quanta.Config{}, loraCfg)
				}, x)
				want := make([]float32, 3*out)
				for i := range 3 {
					for j := range out {
						var sum float64
						for k := range in {
							delta := 0.0
							for r := range loraCfg.Rank {
								delta += float64(av[k*loraCfg.Rank+r]) * float64(bv[r*out+j])
							}
							sum += float64(xv[i*in+k]) * (float64(wv[j*in+k]) + loraCfg.Scale()*delta)
						}
						want[i*out+j] = float32(sum)
					}
				}
				if d, bound := maxDiff(testutil.Float32s(t, got), want), 0.2*maxAbs(want); d > bound {
					t.Errorf("merged output differs from x·(W + (α/r)·A·B)ᵀ by %g (bound %g)", d, bound)
				}
			})
		}
	}
}

// halfFlat quantizes w (out, in) to NF4 with blocks of 64 over the flattened values, its absmax
// in dtype (the kernel's).
func halfFlat(t *testing.T, dtype dtypes.DType, w []float32, out, in int) *nf4.Array {
	t.Helper()
	rows := nf4.MustQuantize(tensors.FromFlatDataAndDimensions(w, len(w)), 64)
	f := nf4.Format{BlockSize: 64, FlatBlocks: true}
	shape := shapes.Make(dtype, out, in)
	want := nf4.ComponentShapes(shape, f, dtype)
	packed := tensors.FromFlatDataAndDimensions(tensors.MustCopyFlatData[uint8](rows.Packed().Tensor()), want[0].Dimensions...)
	absmax, _ := halfTensor(dtype, tensors.MustCopyFlatData[float32](rows.Absmax().Tensor()), want[1].Dimensions...)
	a, err := nf4.FromTensors(shape, f, packed, absmax)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestStoreBaseBnbHalfPrecision: a bitsandbytes layer whose scales are float32, as bitsandbytes
// stores them — Linear4bit without double quantization (its absmax), stored by StoreBase with
// blocks along the rows (in = 128) or straddling them (in = 200, FlatBlocks), and Linear8bitLt
// (its SCB/127) — gives in Dense and LoRADense on a bfloat16 or float16 input y = x·Wᵀ + b in the
// input's dtype, W bitsandbytes' own dequantized weight and b the layer's bias, computed on the
// host.
func TestStoreBaseBnbHalfPrecision(t *testing.T) {
	backend := testutil.Backend(t)
	type layerFn = func(out int) func(ctx *context.Context, x *graph.Node) *graph.Node
	for _, format := range []struct {
		name, file string
		cfg        quanta.Config
		// read returns the layer's weight, its bias and the dtype of its scales.
		read func(t *testing.T, f *safetensors.File) (implicitarray.Array, *tensors.Tensor, dtypes.DType)
	}{
		{"nf4", "linear4bit_nf4_", quanta.Config{}, func(t *testing.T, f *safetensors.File) (implicitarray.Array, *tensors.Tensor, dtypes.DType) {
			layer, err := bnb.ReadLinear4bit(f, "")
			if err != nil {
				t.Fatalf("%+v", err)
			}
			if layer.Weight.Format().DoubleQuant {
				t.Fatalf("format %s; want bitsandbytes' nf4 without double quantization", layer.Weight.Format())
			}
			return layer.Weight, layer.Bias, layer.Weight.Absmax().Shape().DType
		}},
		{"int8", "linear8bitlt_", quanta.Config{Type: quanta.Int8}, func(t *testing.T, f *safetensors.File) (implicitarray.Array, *tensors.Tensor, dtypes.DType) {
			layer, err := bnb.ReadLinear8bitLt(f, "")
			if err != nil {
				t.Fatalf("%+v", err)
			}
			return layer.Weight, layer.Bias, layer.Weight.Scale().Shape().DType
		}},
	} {
		for _, layerName := range []string{"l128x64", "l200x48"} {
			for _, dtype := range halfDTypes {
				for name, fn := range map[string]layerFn{
					"Dense": func(out int) func(ctx *context.Context, x *graph.Node) *graph.Node {
						return func(ctx *context.Context, x *graph.Node) *graph.Node {
							return qlayers.Dense(ctx.In("proj").Checked(false), x, true, out, format.cfg)
						}
					},
					"LoRADense": func(out int) func(ctx *context.Context, x *graph.Node) *graph.Node {
						return func(ctx *context.Context, x *graph.Node) *graph.Node {
							return qlayers.LoRADense(ctx.In("proj").Checked(false), x, true, out, format.cfg, loraCfg)
						}
					},
				} {
					t.Run(fmt.Sprintf("%s/%s/%s/%s", format.name, layerName, dtype, name), func(t *testing.T) {
						if dtype == dtypes.Float16 && runtime.IsGo(backend) {
							t.Skip("the pure-Go backend has no float16 parameters")
						}
						f, err := safetensors.Open(filepath.Join(bnbDir, format.file+layerName+".safetensors"))
						if err != nil {
							t.Fatal(err)
						}
						defer f.Close()
						weight, bias, scales := format.read(t, f)
						if scales != dtypes.Float32 {
							t.Fatalf("%s: scales %s; want bitsandbytes' float32", layerName, scales)
						}
						out, in := weight.Shape().Dim(0), weight.Shape().Dim(1)
						ctx := context.New()
						if err := qlayers.StoreBase(ctx, "/proj", weight, bias, qlayers.OutIn); err != nil {
							t.Fatalf("%+v", err)
						}
						w := readF32NPY(t, format.file+layerName+".dequantized_weight.npy") // (out, in)
						b := readF32NPY(t, layerName+".bias.npy")
						xValues := readF32NPY(t, layerName+".x.npy")
						rows := len(xValues) / in
						x, xv := halfTensor(dtype, xValues, rows, in)
						got := execLayer(t, fmt.Sprintf("%s on a bitsandbytes %s base with a %s input", name, format.name, dtype), backend, ctx, fn(out), x)
						if got.DType() != dtype {
							t.Fatalf("output %s; want %s", got.Shape(), dtype)
						}
						want := make([]float32, rows*out)
						for i := range rows {
							for j := range out {
								sum := float64(b[j])
								for k := range in {
									sum += float64(xv[i*in+k]) * float64(w[j*in+k])
								}
								want[i*out+j] = float32(sum)
							}
						}
						// The input is exact in dtype; the weight's and the output's roundings remain.
						if d, bound := maxDiff(testutil.Float32s(t, got), want), 0.02*maxAbs(want); d > bound {
							t.Errorf("y differs from x·Wᵀ + b by %g (bound %g)", d, bound)
						}
					})
				}
			}
		}
	}
}

// TestLoadAdaptersOutOfHalfRange: a float32 adapter value a bfloat16 or float16 layer cannot hold
// (1e5 past float16's 65504; 3.4e38 past bfloat16's 3.3895314e38, both rounding to infinity) is
// refused, naming the tensor, the value and the dtype's range, and the layer keeps its adapters;
// 65504 itself loads into a float16 layer.
func TestLoadAdaptersOutOfHalfRange(t *testing.T) {
	for _, tc := range []struct {
		dtype      dtypes.DType
		value      float32
		want       string
		loads      bool
		loadsValue float32
	}{
		{dtypes.Float16, 1e5, "value 100000 is outside Float16's range [-65504, 65504]", false, 0},
		{dtypes.BFloat16, -3.4e38, "value -3.4e+38 is outside BFloat16's range [-3.3895314e+38, 3.3895314e+38]", false, 0},
		{dtypes.Float16, 65504, "", true, 65504},
	} {
		t.Run(fmt.Sprintf("%s/%g", tc.dtype, tc.value), func(t *testing.T) {
			saved := floatContext()
			dense := saved.In("layer").In(qlayers.Scope)
			bv := values(6, loraCfg.Rank*outDim)
			bv[7] = tc.value
			dense.VariableWithValue(qlayers.LoRAAName, matrix(5, inDim, loraCfg.Rank))
			dense.VariableWithValue(qlayers.LoRABName, tensors.FromFlatDataAndDimensions(bv, loraCfg.Rank, outDim))
			dense.SetParam(qlayers.LoRAScaleParam, loraCfg.Scale())
			dir := savedAdapters(t, saved)
			fresh := halfQLoRAContext(t, tc.dtype)
			v := fresh.In("layer").In(qlayers.Scope).GetVariable(qlayers.LoRABName)
			before := testutil.Float32s(t, v.MustValue())
			err := qlayers.LoadAdapters(fresh, dir, qlayers.AdapterOptions{})
			after := testutil.Float32s(t, v.MustValue())
			if tc.loads {
				if err != nil {
					t.Fatalf("%+v", err)
				}
				if after[7] != tc.loadsValue {
					t.Errorf("loaded lora_B[7] = %g, want %g", after[7], tc.loadsValue)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "lora_B") {
				t.Errorf("LoadAdapters: error %v; want one naming lora_B and containing %q", err, tc.want)
			}
			if !slices.Equal(before, after) {
				t.Errorf("a refused load changed lora_B: %v, was %v", after, before)
			}
		})
	}
}
