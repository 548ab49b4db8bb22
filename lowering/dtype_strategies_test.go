package lowering_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/ggml"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/onebit"
	qruntime "github.com/quanta-ml/quanta/runtime"
	"github.com/x448/float16"
)

// TestStrategiesAgreeAcrossDTypes: whatever the array's materialization dtype (float32, bfloat16,
// float16) and its scales' dtype, every strategy that serves a product of float32 activations
// computes the same values: the weight decoded exactly from its components (never rounded to the
// array's dtype first), multiplied and accumulated in float32. The reference is the float64
// product of the weight decoded in the test from the components, by the formats' documented rules.
func TestStrategiesAgreeAcrossDTypes(t *testing.T) {
	const rows, cols = 16, 64 // rows: packable by ternary; cols: 4 NF4 blocks of 16, 2 Q8_0 blocks
	r := rand.New(rand.NewPCG(31, 9))
	values := testutil.Normals(r, rows*cols)
	type weight struct {
		a     lowering.Quantized
		dense []float64 // the reference decode, row-major (rows, cols)
	}
	nf4Dense := func(t *testing.T, a *nf4.Array) []float64 {
		packed := testutil.TensorBytes(t, a.Packed().Tensor())
		absmax := testutil.Float64s(t, a.Absmax().Tensor())
		codebook, bs := nf4.Codebook(), a.BlockSize()
		out := make([]float64, rows*cols)
		for i := range out {
			code := packed[i/2] >> 4
			if i%2 == 1 {
				code = packed[i/2] & 15
			}
			out[i] = float64(codebook[code]) * absmax[i/bs]
		}
		return out
	}
	int8Dense := func(t *testing.T, a *qint8.Array) []float64 {
		codes := testutil.TensorBytes(t, a.Weight().Tensor())
		scale := testutil.Float64s(t, a.Scale().Tensor()) // (rows, 1): default axes (-1,)
		out := make([]float64, rows*cols)
		for i := range out {
			out[i] = float64(int8(codes[i])) * scale[i/cols]
		}
		return out
	}
	formats := []struct {
		name string
		make func(t *testing.T, dtype dtypes.DType, s lowering.Strategy) weight
	}{
		{"nf4/with-dtype", func(t *testing.T, dtype dtypes.DType, s lowering.Strategy) weight {
			a := nf4.MustQuantize(testutil.InDType(dtypes.Float32, values, rows, cols), 16)
			return weight{a.WithDType(dtype).WithStrategy(s), nf4Dense(t, a)}
		}},
		{"nf4/quantized-in-dtype", func(t *testing.T, dtype dtypes.DType, s lowering.Strategy) weight {
			a := nf4.MustQuantize(testutil.InDType(dtype, values, rows, cols), 16)
			return weight{a.WithStrategy(s), nf4Dense(t, a)}
		}},
		{"int8/with-dtype", func(t *testing.T, dtype dtypes.DType, s lowering.Strategy) weight {
			a := qint8.MustQuantize(testutil.InDType(dtypes.Float32, values, rows, cols))
			return weight{a.WithDType(dtype).WithStrategy(s), int8Dense(t, a)}
		}},
		{"int8/quantized-in-dtype", func(t *testing.T, dtype dtypes.DType, s lowering.Strategy) weight {
			a := qint8.MustQuantize(testutil.InDType(dtype, values, rows, cols))
			return weight{a.WithStrategy(s), int8Dense(t, a)}
		}},
		{"ternary/scaled", func(t *testing.T, dtype dtypes.DType, s lowering.Strategy) weight {
			a := onebit.MustQuantizeTernary(testutil.InDType(dtypes.Float32, values, rows, cols),
				&onebit.Options{Scale: true, ScaleAxes: []int{0}, DType: dtype})
			packed := testutil.TensorBytes(t, a.Packed().Tensor()) // (rows/4, cols)
			sc, ok := a.Scale()
			if !ok {
				t.Fatal("scaled ternary array without a scale")
			}
			scale := testutil.Float64s(t, sc.Tensor()) // (1, cols)
			out := make([]float64, rows*cols)
			q := rows / 4
			for i := range out {
				row, col := i/cols, i%cols
				code := packed[(row%q)*cols+col] >> (2 * (row / q)) & 3
				out[i] = float64(int(code)-1) * scale[col]
			}
			return weight{a.WithStrategy(s), out}
		}},
		{"ggml-q8_0", func(t *testing.T, dtype dtypes.DType, s lowering.Strategy) weight {
			a := ggml.MustQuantize(testutil.InDType(dtypes.Float32, values, rows, cols), gguf.TypeQ8_0)
			blocks := testutil.TensorBytes(t, a.Blocks().Tensor()) // per block of 32: float16 d, 32 int8 codes
			out := make([]float64, rows*cols)
			for i := range out {
				b := blocks[(i/32)*34:]
				d := float16.Frombits(uint16(b[0]) | uint16(b[1])<<8).Float32()
				out[i] = float64(d) * float64(int8(b[2+i%32]))
			}
			return weight{a.WithDType(dtype).WithStrategy(s), out}
		}},
	}
	products := []struct {
		name  string
		xDims []int
		axes  lowering.Axes
	}{
		{"x·W", []int{3, rows}, lowering.Axes{XContracting: []int{1}, WContracting: []int{0}}},
		{"x·Wᵀ", []int{3, cols}, lowering.Axes{XContracting: []int{1}, WContracting: []int{1}}},
	}
	backend := testutil.Backend(t)
	strategies := append([]lowering.Strategy{lowering.Auto}, lowering.Strategies()...)
	for _, f := range formats {
		for _, dtype := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16, dtypes.Float16} {
			if dtype == dtypes.Float16 && qruntime.IsGo(backend) {
				continue // the pure-Go backend has no float16
			}
			for _, pc := range products {
				x := testutil.Normals(r, 3*pc.xDims[1])
				// want[m, n] and its bound Σ|x||w| in float64, from the reference decode.
				wContr := pc.axes.WContracting[0]
				free := cols
				if wContr == 1 {
					free = rows
				}
				k := pc.xDims[1]
				for _, s := range strategies {
					for _, xdt := range []dtypes.DType{dtypes.Float32, dtypes.Float64} {
						t.Run(fmt.Sprintf("%s/%s/%s/x=%s/%s", f.name, dtype, pc.name, xdt, s), func(t *testing.T) {
							w := f.make(t, dtype, s)
							want, bound := make([]float64, 3*free), make([]float64, 3*free)
							for m := range 3 {
								for n := range free {
									for kk := range k {
										var wv float64
										if wContr == 0 {
											wv = w.dense[kk*cols+n]
										} else {
											wv = w.dense[n*cols+kk]
										}
										xv := float64(x[m*k+kk])
										want[m*free+n] += xv * wv
										bound[m*free+n] += math.Abs(xv * wv)
									}
								}
							}
							e := implicitarray.MustNewExec(backend, func(x *graph.Node, w implicitarray.Array) *graph.Node {
								return lowering.DotGeneral(x, w.(lowering.Quantized), pc.axes)
							})
							defer e.Finalize()
							xt := tensors.FromFlatDataAndDimensions(x, pc.xDims...)
							if xdt == dtypes.Float64 {
								xt = tensors.FromFlatDataAndDimensions(testutil.Converted[float64](x), pc.xDims...)
							}
							out, err := e.Call1(xt, w.a)
							if errors.Is(err, lowering.ErrUnsupported) {
								t.Skipf("%s does not serve this product", s)
							}
							if err != nil {
								t.Fatalf("%+v", err)
							}
							got := testutil.Float64s(t, out.(*tensors.Tensor))
							for i := range want {
								// Accumulation in x's dtype: 8 ulps of Σ|x||w|, as conformance/README.md.
								ulp := 0x1p-23
								if xdt == dtypes.Float64 {
									ulp = 0x1p-52
								}
								if d := math.Abs(got[i] - want[i]); d > 8*ulp*bound[i] {
									t.Fatalf("element %d: got %.7g, want %.7g (float64 from the components): off by %.3g, "+
										"%.3g·Σ|x||w|", i, got[i], want[i], d, d/bound[i])
								}
							}
						})
					}
				}
			}
		}
	}
}
