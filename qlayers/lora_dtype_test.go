package qlayers_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/internal/testutil"
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
			dir := t.TempDir()
			if err := qlayers.SaveAdapters(ctx, dir, qlayers.AdapterOptions{}); err != nil {
				t.Fatalf("%+v", err)
			}
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
			var got []float32
			err := func() (err error) {
				defer testutil.RecoverError(&err)
				got = flat(t, context.MustExecOnce(backend, ctx, halfLoRALayer(dtype), x))
				return nil
			}()
			if err != nil {
				t.Fatalf("LoRADense after MergeLoRA: %v", err)
			}
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
				dir := t.TempDir()
				if err := qlayers.SaveAdapters(ctx, dir, qlayers.AdapterOptions{}); err != nil {
					t.Fatalf("%+v", err)
				}
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
				var got []float32
				err := func() (err error) {
					defer testutil.RecoverError(&err)
					got = flat(t, context.MustExecOnce(backend, fresh, halfLoRALayer(dtype), x))
					return nil
				}()
				if err != nil {
					t.Fatalf("LoRADense with loaded adapters: %v", err)
				}
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
					var got []float32
					err := func() (err error) {
						defer testutil.RecoverError(&err)
						got = flat(t, context.MustExecOnce(backend, ctx, halfLoRALayer(dtype, cfg), x))
						return nil
					}()
					if err != nil {
						t.Fatalf("LoRADense after MergeLoRA: %v", err)
					}
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
