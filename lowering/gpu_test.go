package lowering_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/bnb"
	"github.com/quanta-ml/quanta/ggml"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/onebit"
)

// gpuOnly reports the strategies Choose gives GPUs and TPUs only.
func gpuOnly(s lowering.Strategy) bool { return s == lowering.PrologueDot || s == lowering.CodesDot }

// xlaQuick reports an XLA test backend without QUANTA_TEST_ALL=1: each XLA CPU product compiles
// for a good fraction of a second, so the GPU formulations' many products run in full on the
// pure-Go backend (and with QUANTA_TEST_ALL=1), a sample on XLA CPU.
func xlaQuick(t *testing.T) bool {
	return testutil.Backend(t).String() == "xla" && os.Getenv(testutil.TestAllEnv) != "1"
}

// TestGPUFormulations: the GPU and TPU formulations, forced, equal the dense product of the
// materialized weight on the shapes those platforms see: NF4 with blocks of 64 and a ragged last
// block, contracted along or across its blocks, bitsandbytes' flat blocks, int8 with a scale per
// output or per input channel, 2-bit and 1-bit weights with and without a scale; one activation
// row and 17 (a GEMM's), float32 and (at 17 rows) bfloat16. On XLA CPU without QUANTA_TEST_ALL=1:
// the GEMM forms at 17 rows in float32.
func TestGPUFormulations(t *testing.T) {
	xW := lowering.Axes{XContracting: []int{1}, WContracting: []int{0}}
	xWt := lowering.Axes{XContracting: []int{1}, WContracting: []int{1}}
	wx := lowering.Axes{XContracting: []int{0}, WContracting: []int{1}, WeightOnLeft: true}
	nf4Make := func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized {
		return nf4.MustQuantize(testutil.NormalTensor(r, dims...), 64).WithStrategy(s)
	}
	type weight struct {
		name   string
		layout string
		dims   []int
		make   func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized
	}
	weights := []weight{
		{"nf4/blocks-free", "blockwise4", []int{48, 200}, nf4Make},       // x·W: K 48, N 200 in 4 blocks, the last one 8 long
		{"nf4/blocks-contracted", "blockwise4", []int{24, 200}, nf4Make}, // x·Wᵀ: K 200
		{"nf4-dq", "blockwise4-dq", []int{24, 200}, func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized {
			return nf4.MustDoubleQuantize(nf4.MustQuantize(testutil.NormalTensor(r, dims...), 64)).WithStrategy(s)
		}},
		{"nf4-flat", "blockwise4-flat", []int{30, 50}, func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized {
			return bnb.MustQuantize4bit(testutil.NormalTensor(r, dims...), 64, false).WithStrategy(s) // blocks straddle the rows of 50
		}},
		{"int8/per-row", "int8", []int{40, 72}, func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized {
			return qint8.MustQuantize(testutil.NormalTensor(r, dims...)).WithStrategy(s) // a scale per row
		}},
		{"int8/per-column", "int8", []int{40, 72}, func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized {
			return qint8.MustQuantize(testutil.NormalTensor(r, dims...), 0).WithStrategy(s)
		}},
		{"ternary", "signs2", []int{52, 30}, func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized {
			return onebit.MustQuantizeTernary(testutil.NormalTensor(r, dims...), nil).WithStrategy(s)
		}},
		{"ternary/per-column", "signs2", []int{52, 30}, func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized {
			return onebit.MustQuantizeTernary(testutil.NormalTensor(r, dims...), &onebit.Options{Scale: true, ScaleAxes: []int{0}}).WithStrategy(s)
		}},
		{"ternary/per-row", "signs2", []int{52, 30}, func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized {
			return onebit.MustQuantizeTernary(testutil.NormalTensor(r, dims...), &onebit.Options{Scale: true, ScaleAxes: []int{1}}).WithStrategy(s)
		}},
		{"binary1", "signs1", []int{72, 18}, func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized {
			return onebit.MustQuantizeBinaryBits(testutil.NormalTensor(r, dims...), &onebit.Options{Scale: true, ScaleAxes: []int{0}}).WithStrategy(s)
		}},
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, wt := range weights {
		w := wt.make(r, wt.dims, lowering.Auto)
		k, n := wt.dims[0], wt.dims[1]
		cases := []struct {
			name  string
			axes  lowering.Axes
			xDims func(m int) []int
		}{{"x@W", xW, func(m int) []int { return []int{m, k} }}}
		if wt.name == "nf4/blocks-contracted" || wt.name == "nf4-dq" || wt.layout == "int8" {
			cases[0].name, cases[0].axes, cases[0].xDims = "x@Wt", xWt, func(m int) []int { return []int{m, n} }
		}
		if wt.name == "nf4/blocks-contracted" || wt.name == "int8/per-column" { // the weight on the left
			cases = append(cases, struct {
				name  string
				axes  lowering.Axes
				xDims func(m int) []int
			}{"W@x", wx, func(m int) []int { return []int{n, m} }})
		}
		gemm, reduction := []lowering.Strategy{lowering.PrologueDot}, lowering.MulReduce
		if wt.layout == "signs2" || wt.layout == "signs1" {
			gemm, reduction = append(gemm, lowering.CodesDot), lowering.SlicedSum
		}
		for _, c := range cases {
			for _, m := range []int{1, 17} {
				for _, xDType := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
					if xDType == dtypes.BFloat16 && m == 1 { // bfloat16 operands: TestGPUProgram
						continue
					}
					if xlaQuick(t) && (m == 1 || xDType != dtypes.Float32) {
						continue
					}
					strategies := gemm
					if m == 1 && xDType == dtypes.Float32 { // the GPU's reduction forms, on the same shapes
						strategies = append(slices.Clone(gemm), reduction)
					}
					pc := productCase{name: c.name, xDims: c.xDims(m), wDims: wt.dims, axes: c.axes, rank2: true, kMajor: !c.axes.WeightOnLeft && c.axes.WContracting[0] == 0}
					x := activations(t, r, pc.xDims, xDType)
					want := denseProduct(t, w, x, pc)
					for _, s := range strategies {
						t.Run(fmt.Sprintf("%s/%s/m=%d/%s/%s", wt.name, c.name, m, xDType, s), func(t *testing.T) {
							lowering.ResetBuilt()
							got, err := runProduct(t, withComponentsOf(wt.make(rand.New(rand.NewPCG(0, 0)), wt.dims, s), w), x, pc)
							if err != nil {
								t.Fatalf("%+v", err)
							}
							if lowering.Built()[lowering.Choice{Layout: wt.layout, Strategy: s}] == 0 {
								t.Errorf("Built() = %v, want a product recorded as %s/%s", lowering.Built(), wt.layout, s)
							}
							compare(t, got, want, pc.k(), xDType)
						})
					}
				}
			}
		}
	}
}

// TestPrologueCodebook: PrologueDot's select decode gives every NF4 code value exactly, in both
// nibbles of a byte (the reference is the codebook itself): one-hot activations pick rows of the
// decoded weight, so the product is the weight.
func TestPrologueCodebook(t *testing.T) {
	codebook := nf4.Codebook()
	w := codebookWeight(0.5, lowering.PrologueDot)
	e := implicitarray.MustNewExec(testutil.Backend(t), func(x *graph.Node, w *nf4.Array) *graph.Node {
		return implicitarray.Materialize(implicitarray.MatMul(x, w))
	})
	defer e.Finalize()
	got := tensors.MustCopyFlatData[float32](e.MustCall1(tensors.FromFlatDataAndDimensions([]float32{1, 0, 0, 1}, 2, 2), w).(*tensors.Tensor))
	for i := range 16 {
		if got[i] != codebook[i] || got[16+i] != 0.5*codebook[15-i] {
			t.Errorf("position %d: rows decode to %v and %v, want %v and %v", i, got[i], got[16+i], codebook[i], 0.5*codebook[15-i])
		}
	}
}

// TestBitField: the fields of every byte value, against Go's shifts and masks.
func TestBitField(t *testing.T) {
	all := make([]uint8, 256)
	for i := range all {
		all[i] = uint8(i)
	}
	for _, tc := range []struct {
		shifts []int
		width  int
	}{{[]int{4, 0}, 4}, {[]int{0, 2, 4, 6}, 2}, {[]int{0, 1, 2, 3, 4, 5, 6, 7}, 1}} {
		t.Run(fmt.Sprint(tc.shifts), func(t *testing.T) {
			out := graph.MustExecOnce(testutil.Backend(t), func(b *graph.Node) *graph.Node {
				return lowering.BitField(lowering.AsInt8(b), 1, tc.shifts, tc.width)
			}, tensors.FromFlatDataAndDimensions(all, 256))
			got := tensors.MustCopyFlatData[int32](out)
			for b := range all {
				for i, sh := range tc.shifts {
					if want := int32(b>>sh) & (1<<tc.width - 1); got[b*len(tc.shifts)+i] != want {
						t.Fatalf("byte %#02x, field at bit %d: %d, want %d", b, sh, got[b*len(tc.shifts)+i], want)
					}
				}
			}
		})
	}
}

// TestChooseAccelerators restates the policy's GPU and TPU rows, and checks that no CPU platform
// ever gets a GPU formulation (TestChoose pins the CPU choices themselves).
func TestChooseAccelerators(t *testing.T) {
	f := newChooseFixture(t)
	blockwise, blockwiseDQ, flat, int8Rows, signs, signs1 := f.blockwise, f.blockwiseDQ, f.flat, f.int8Rows, f.signs, f.signs1Scaled
	xW, xWt := f.xW, f.xWt
	batched := lowering.Axes{XContracting: []int{2}, XBatch: []int{0}, WContracting: []int{2}, WBatch: []int{0}}
	gpu, tpu := lowering.XLAGPU, lowering.XLATPU
	checkChoose(t, []chooseCase{
		{"nf4 x@W m=1 gpu", gpu, blockwise, rows(1, 16), xW, lowering.MulReduce},
		{"nf4 x@Wt m=15 gpu", gpu, blockwise, rows(15, 12), xWt, lowering.MulReduce},
		{"nf4 x@Wt m=16 gpu", gpu, blockwise, rows(16, 12), xWt, lowering.PrologueDot},
		{"nf4 x@W m=256 gpu", gpu, blockwise, rows(256, 16), xW, lowering.PrologueDot},
		{"nf4 batched m=1 gpu", gpu, f.blockwiseBatched,
			shapes.Make(dtypes.Float32, 2, 1, 12), batched, lowering.PrologueDot},
		{"nf4-dq x@W m=1 gpu", gpu, blockwiseDQ, rows(1, 16), xW, lowering.MulReduce},
		{"nf4-dq x@W m=64 gpu", gpu, blockwiseDQ, rows(64, 16), xW, lowering.PrologueDot},
		{"nf4-flat x@Wt m=8 gpu", gpu, flat, rows(8, 12), xWt, lowering.MulReduce},
		{"nf4-flat x@Wt m=16 gpu", gpu, flat, rows(16, 12), xWt, lowering.PrologueDot},
		{"int8 x@W m=1 gpu", gpu, int8Rows, rows(1, 16), xW, lowering.PrologueDot},
		{"int8 x@Wt m=8 gpu", gpu, int8Rows, rows(8, 12), xWt, lowering.PrologueDot},
		{"int8 x@Wt m=16 gpu", gpu, int8Rows, rows(16, 12), xWt, lowering.PrologueDot},
		{"signs x@W m=1 gpu", gpu, signs, rows(1, 16), xW, lowering.SlicedSum},
		{"signs x@W m=15 gpu", gpu, signs, rows(15, 16), xW, lowering.SlicedSum},
		{"signs x@W m=16 gpu", gpu, signs, rows(16, 16), xW, lowering.PrologueDot},
		{"signs x@Wt m=1 gpu", gpu, signs, rows(1, 12), xWt, lowering.MulReduce},
		{"1-bit signs x@W m=1 gpu", gpu, signs1, rows(1, 16), xW, lowering.SlicedSum},
		{"1-bit signs x@W m=256 gpu", gpu, signs1, rows(256, 16), xW, lowering.PrologueDot},
		{"signs integer x m=1 gpu", gpu, signs, shapes.Make(dtypes.Int32, 1, 16), xW, lowering.DecodeDot},
		{"signs integer x m=16 gpu", gpu, signs, shapes.Make(dtypes.Int32, 16, 16), xW, lowering.DecodeDot},
		{"q4_k x@Wt m=1 gpu", gpu, f.q4k, rows(1, 512), xWt, lowering.MulReduce},
		{"q4_k x@Wt m=2 gpu", gpu, f.q4k, rows(2, 512), xWt, lowering.DecodeDot},
		{"q4_k x@W m=1 gpu", gpu, f.q4k, rows(1, 16), xW, lowering.DecodeDot},
		{"q4_k x@Wt m=1 tpu", tpu, f.q4k, rows(1, 512), xWt, lowering.DecodeDot},
		{"nf4 x@W m=1 tpu", tpu, blockwise, rows(1, 16), xW, lowering.PrologueDot},
		{"int8 x@Wt m=1 tpu", tpu, int8Rows, rows(1, 12), xWt, lowering.PrologueDot},
		{"signs x@W m=1 tpu", tpu, signs, rows(1, 16), xW, lowering.PrologueDot},
		{"nf4-flat x@W m=256 tpu", tpu, flat, rows(256, 16), xW, lowering.PrologueDot},
		{"nf4 x@W m=1 other accelerator", lowering.XLAAccelerator, blockwise, rows(1, 16), xW, lowering.ProductTable},
		{"nf4 x@W m=64 other backend", lowering.OtherBackend, blockwise, rows(64, 16), xW, lowering.DecodeDot},
	})

	cpus := []lowering.Platform{lowering.PureGo, lowering.XLACPU, lowering.XLACPUFusedLoops, lowering.XLACPU | lowering.Kernels,
		lowering.XLACPUFusedLoops | lowering.Kernels}
	layouts := []lowering.Layout{blockwise, blockwiseDQ, flat, int8Rows, signs, signs1}
	for _, platform := range cpus {
		for _, w := range layouts {
			for _, axes := range []lowering.Axes{xW, xWt} {
				k := 16
				if slices.Equal(axes.WContracting, []int{1}) {
					k = 12
				}
				for _, m := range []int{1, 2, 8, 15, 16, 17, 64, 256, 512, 513, 4096} {
					if got := lowering.Choose(platform, w, rows(m, k), axes); got == lowering.PrologueDot || got == lowering.CodesDot {
						t.Errorf("Choose(%s, %s, m=%d, %v) = %s: a GPU formulation on a CPU platform", platform, w, m, axes.WContracting, got)
					}
				}
			}
		}
	}
}

// TestPluginPlatform: plugins are classified by name, or by file name when loaded by path.
func TestPluginPlatform(t *testing.T) {
	for plugin, want := range map[string]lowering.Platform{
		"cpu": lowering.XLACPU,
		"/root/.local/lib/go-xla/pjrt_c_api_cpu_plugin.so": lowering.XLACPU,
		"/cache/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so":  lowering.XLACPU,
		"cuda": lowering.XLAGPU,
		"/usr/lib/python3/site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so": lowering.XLAGPU,
		"rocm":                                 lowering.XLAGPU,
		"tpu":                                  lowering.XLATPU,
		"/venv/site-packages/libtpu/libtpu.so": lowering.XLATPU,
		"metal":                                lowering.XLAAccelerator,
	} {
		if got := lowering.PluginPlatform(plugin); got != want {
			t.Errorf("PluginPlatform(%q) = %s, want %s", plugin, got, want)
		}
	}
}

// TestPrologueInfiniteActivations: an infinite activation gives what the dense product gives
// through PrologueDot too (the select decode keeps the codebook's zero exactly zero).
func TestPrologueInfiniteActivations(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	c := productCases()[1] // x@W, m = 3
	for _, f := range formats() {
		w := f.make(r, c.wDims, lowering.Auto)
		x := activations(t, r, c.xDims, dtypes.Float32)
		values := tensors.MustCopyFlatData[float32](x)
		values[3] = float32(math.Inf(1))
		values[16+5], values[16+6] = values[3], -values[3]
		x = tensors.FromFlatDataAndDimensions(values, c.xDims...)
		want := denseProduct(t, w, x, c)
		t.Run(f.name, func(t *testing.T) {
			got, err := runProduct(t, withComponentsOf(f.make(r, c.wDims, lowering.PrologueDot), w), x, c)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			for i := range got {
				if math.IsNaN(want[i]) != math.IsNaN(got[i]) || (math.IsInf(want[i], 0) && got[i] != want[i]) {
					t.Errorf("element %d: %v, want %v", i, got[i], want[i])
				}
			}
		})
	}
}

// TestGPUProgram builds products as for a GPU on the test backend: Auto gives a reduction to one
// activation row (int8 its GEMM form) and PrologueDot to 17, and PrologueDot with bfloat16 activations multiplies
// bfloat16 operands (as a GPU's dense bfloat16 product does), within twice the error of the dense
// bfloat16 product of the materialized weight, plus the output's rounding.
func TestGPUProgram(t *testing.T) {
	backend := testutil.Backend(t)
	r := rand.New(rand.NewPCG(15, 16))
	xWt := lowering.Axes{XContracting: []int{1}, WContracting: []int{1}}
	xW := lowering.Axes{XContracting: []int{1}, WContracting: []int{0}}
	for _, tc := range []struct {
		name, layout string
		w            implicitarray.Array
		axes         lowering.Axes
		k            int
		fewRows      lowering.Strategy // below 16 rows (m = 1)
		manyRows     lowering.Strategy // from 16 (m = 17)
	}{
		{"nf4", "blockwise4", nf4.MustQuantize(testutil.NormalTensor(r, 24, 200), 64), xWt, 200, lowering.MulReduce, lowering.PrologueDot},
		{"int8/per-column", "int8", qint8.MustQuantize(testutil.NormalTensor(r, 40, 72), 0), xWt, 72, lowering.PrologueDot, lowering.PrologueDot},
		{"ternary/per-row", "signs2", onebit.MustQuantizeTernary(testutil.NormalTensor(r, 52, 30), &onebit.Options{Scale: true, ScaleAxes: []int{1}}), xW, 52, lowering.SlicedSum, lowering.PrologueDot},
		{"binary1", "signs1", onebit.MustQuantizeBinaryBits(testutil.NormalTensor(r, 72, 18), &onebit.Options{Scale: true, ScaleAxes: []int{0}}), xW, 72, lowering.SlicedSum, lowering.PrologueDot},
		{"q4_k", "ggml-q4_k", ggml.MustQuantize(testutil.NormalTensor(r, 20, 512), gguf.TypeQ4_K).WithDType(dtypes.BFloat16), xWt, 512, lowering.MulReduce, lowering.DecodeDot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dense := testutil.Materialize(t, tc.w)
			for _, m := range []int{1, 17} {
				x := activations(t, r, []int{m, tc.k}, dtypes.BFloat16)
				lowering.ResetBuilt()
				e := implicitarray.MustNewExec(backend, func(x *graph.Node, w implicitarray.Array, dense *graph.Node) (*graph.Node, *graph.Node, *graph.Node) {
					got := lowering.DotGeneralAs(lowering.XLAGPU, x, w.(lowering.Quantized), tc.axes)
					x64, d64 := graph.ConvertDType(x, dtypes.Float64), graph.ConvertDType(dense, dtypes.Float64)
					exact := graph.DotGeneral(x64, tc.axes.XContracting, nil, d64, tc.axes.WContracting, nil)
					dense16 := graph.DotGeneral(x, tc.axes.XContracting, nil, graph.ConvertDType(dense, dtypes.BFloat16), tc.axes.WContracting, nil)
					return got, exact, dense16
				})
				out := e.MustCall(x, tc.w, dense)
				e.Finalize()
				want := tc.manyRows
				if m < 16 {
					want = tc.fewRows
				}
				if lowering.Built()[lowering.Choice{Layout: tc.layout, Strategy: want}] != 1 {
					t.Fatalf("m=%d: Built() = %v, want one %s/%s", m, lowering.Built(), tc.layout, want)
				}
				got, exact, dense16 := testutil.Float64s(t, out[0].(*tensors.Tensor)), testutil.Float64s(t, out[1].(*tensors.Tensor)),
					testutil.Float64s(t, out[2].(*tensors.Tensor))
				denseErr, scale := testutil.MaxAbsDiff(dense16, exact)
				if diff, _ := testutil.MaxAbsDiff(got, exact); diff > 2*denseErr+scale/128 {
					t.Errorf("m=%d: %s differs from the exact product by %g; the dense bfloat16 product by %g (outputs up to %g)",
						m, want, diff, denseErr, scale)
				}
			}
		})
	}
}
