package lowering_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/bnb"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/onebit"
)

// format builds a host-side quantized array of a random weight, with a strategy.
type format struct {
	name   string
	layout string // the Choice layout name
	// ints: the format multiplies integer activations (unscaled signs).
	ints bool
	make func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized
}

func formats() []format {
	return []format{
		{name: "nf4", layout: "blockwise4", make: func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized {
			return nf4.MustQuantize(testutil.NormalTensor(r, dims...), 4).WithStrategy(s)
		}},
		{name: "nf4-dq", layout: "blockwise4-dq", make: func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized {
			return nf4.MustDoubleQuantize(nf4.MustQuantize(testutil.NormalTensor(r, dims...), 4)).WithStrategy(s)
		}},
		{name: "nf4-flat", layout: "blockwise4-flat", make: func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized {
			// Blocks of 8 over the flattened weight: they straddle the rows of 12 or 6.
			return bnb.MustQuantize4bit(testutil.NormalTensor(r, dims...), 8, false).WithStrategy(s)
		}},
		{name: "nf4-flat-dq", layout: "blockwise4-flat-dq", make: func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized {
			return bnb.MustQuantize4bit(testutil.NormalTensor(r, dims...), 8, true).WithStrategy(s)
		}},
		{name: "int8/last-axis", layout: "int8", make: func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized {
			return qint8.MustQuantize(testutil.NormalTensor(r, dims...)).WithStrategy(s)
		}},
		{name: "int8/first-axis", layout: "int8", make: func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized {
			return qint8.MustQuantize(testutil.NormalTensor(r, dims...), 0).WithStrategy(s)
		}},
		{name: "ternary", layout: "signs2", ints: true, make: func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized {
			return onebit.MustQuantizeTernary(testutil.NormalTensor(r, dims...), nil).WithStrategy(s)
		}},
		{name: "ternary/scaled", layout: "signs2", make: func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized {
			return onebit.MustQuantizeTernary(testutil.NormalTensor(r, dims...), &onebit.Options{Scale: true, ScaleAxes: []int{0}}).WithStrategy(s)
		}},
		{name: "binary/1bit", layout: "signs1", ints: true, make: func(r *rand.Rand, dims []int, s lowering.Strategy) lowering.Quantized {
			return onebit.MustQuantizeBinaryBits(testutil.NormalTensor(r, dims...), nil).WithStrategy(s)
		}},
	}
}

// productCase is a product with a weight whose first dimension is 16 (packable by every format).
type productCase struct {
	name  string
	xDims []int
	wDims []int
	axes  lowering.Axes
	// rank2: one contracting axis, no batch axes; kMajor: rank2 contracted on axis 0 (x·W).
	rank2, kMajor bool
}

// k is the number of products summed per output element.
func (c productCase) k() int {
	k := 1
	for _, a := range normalizeAll(c.axes.WContracting, len(c.wDims)) {
		k *= c.wDims[a]
	}
	return k
}

func productCases() []productCase {
	return []productCase{
		{name: "x@W/m=1", xDims: []int{1, 16}, wDims: []int{16, 12}, axes: lowering.Axes{XContracting: []int{1}, WContracting: []int{0}},
			rank2: true, kMajor: true},
		{name: "x@W/m=3", xDims: []int{3, 16}, wDims: []int{16, 12}, axes: lowering.Axes{XContracting: []int{-1}, WContracting: []int{0}},
			rank2: true, kMajor: true},
		{name: "x@Wt", xDims: []int{2, 12}, wDims: []int{16, 12}, axes: lowering.Axes{XContracting: []int{1}, WContracting: []int{1}},
			rank2: true},
		{name: "W@x", xDims: []int{12, 3}, wDims: []int{16, 12}, axes: lowering.Axes{XContracting: []int{0}, WContracting: []int{1},
			WeightOnLeft: true}, rank2: true},
		{name: "Wt@x", xDims: []int{16, 2}, wDims: []int{16, 12}, axes: lowering.Axes{XContracting: []int{0}, WContracting: []int{0},
			WeightOnLeft: true}, rank2: true, kMajor: true},
		{name: "vector", xDims: []int{16}, wDims: []int{16, 12}, axes: lowering.Axes{XContracting: []int{0}, WContracting: []int{0}},
			rank2: true, kMajor: true},
		{name: "batched", xDims: []int{16, 2, 8}, wDims: []int{16, 8, 6}, axes: lowering.Axes{XContracting: []int{2},
			XBatch: []int{0}, WContracting: []int{1}, WBatch: []int{0}}},
		{name: "rank3-free", xDims: []int{2, 8}, wDims: []int{16, 8, 6}, axes: lowering.Axes{XContracting: []int{1},
			WContracting: []int{1}}},
		{name: "two-contracting", xDims: []int{2, 16, 8}, wDims: []int{16, 8, 6}, axes: lowering.Axes{XContracting: []int{1, 2},
			WContracting: []int{0, 1}}},
	}
}

// served restates which products each strategy serves (package lowering's documentation).
func served(s lowering.Strategy, f format, c productCase, xDType dtypes.DType, kernels bool) bool {
	switch s {
	case lowering.Kernel:
		if !kernels || !c.rank2 || (xDType != dtypes.Float32 && xDType != dtypes.BFloat16) {
			return false
		}
		switch f.layout {
		case "blockwise4", "blockwise4-dq", "int8":
			return true
		case "blockwise4-flat", "blockwise4-flat-dq": // blocks over the flattened weight: no kernel
			return false
		}
		return c.kMajor
	case lowering.Auto, lowering.Materialize, lowering.DecodeDot:
		return true
	case lowering.PrologueDot: // every layout; signs with float activations
		return !strings.HasPrefix(f.layout, "signs") || xDType.IsFloat()
	case lowering.CodesDot:
		return strings.HasPrefix(f.layout, "signs") && xDType.IsFloat()
	case lowering.MulReduce:
		return c.rank2
	case lowering.ProductTable:
		return (f.layout == "blockwise4" || f.layout == "blockwise4-dq") && c.rank2
	case lowering.SlicedSum:
		switch f.layout {
		case "blockwise4", "blockwise4-dq":
			return c.kMajor
		case "int8": // the scale must be constant along one side of x·W: always for a rank-2 weight
			return c.kMajor
		case "blockwise4-flat", "blockwise4-flat-dq": // blocks over the flattened weight: decoded products only
			return false
		}
		// Signs: float activations, the packed axis contracted, and a per-output-column scale (or
		// none) in every case here except a scale varying along the contracted packed axis.
		return xDType.IsFloat() && slices.Contains(normalizeAll(c.axes.WContracting, len(c.wDims)), 0) &&
			!(f.name == "ternary/scaled" && len(c.axes.WContracting) > 1)
	}
	return false
}

func normalizeAll(axes []int, rank int) []int {
	out := make([]int, len(axes))
	for i, a := range axes {
		out[i] = (a + rank) % rank
	}
	return out
}

// TestStrategies: for every format, product and activation dtype, Auto runs; each explicit
// strategy either runs (recorded by lowering.Built) and equals the dense product of the
// materialized weight, or panics with ErrUnsupported naming the strategy and what it serves.
func TestStrategies(t *testing.T) {
	kernels := lowering.PlatformOf(testutil.Backend(t))&lowering.Kernels != 0
	r := rand.New(rand.NewPCG(1, 2))
	strategies := append([]lowering.Strategy{lowering.Auto}, lowering.Strategies()...)
	for _, f := range formats() {
		for _, c := range productCases() {
			xDTypes := []dtypes.DType{dtypes.Float32}
			if c.name == "x@W/m=3" || c.name == "x@Wt" || c.name == "batched" {
				xDTypes = append(xDTypes, dtypes.BFloat16)
			}
			if f.ints && (c.name == "x@W/m=1" || c.name == "two-contracting") {
				xDTypes = append(xDTypes, dtypes.Int32)
			}
			for _, xDType := range xDTypes {
				w := f.make(r, c.wDims, lowering.Auto)
				x := activations(t, r, c.xDims, xDType)
				want := denseProduct(t, w, x, c)
				for _, s := range strategies {
					t.Run(fmt.Sprintf("%s/%s/%s/%s", f.name, c.name, xDType, s), func(t *testing.T) {
						if gpuOnly(s) && served(s, f, c, xDType, kernels) && xlaQuick(t) {
							t.Skip("GPU formulation: every product on the pure-Go backend, a sample on XLA CPU (TestGPUFormulations); all with " + testutil.TestAllEnv + "=1")
						}
						ws := f.make(rand.New(rand.NewPCG(0, 0)), c.wDims, s)
						ws = withComponentsOf(ws, w)
						lowering.ResetBuilt()
						got, err := runProduct(t, ws, x, c)
						if !served(s, f, c, xDType, kernels) {
							if err == nil || !errors.Is(err, lowering.ErrUnsupported) || !strings.Contains(err.Error(), s.String()+" serves") {
								t.Fatalf("want a panic with ErrUnsupported naming %s, got %v", s, err)
							}
							return
						}
						if err != nil {
							t.Fatalf("%+v", err)
						}
						if s != lowering.Auto && lowering.Built()[lowering.Choice{Layout: f.layout, Strategy: s}] == 0 {
							t.Errorf("Built() = %v, want a product recorded as %s/%s", lowering.Built(), f.layout, s)
						}
						compare(t, got, want, c.k(), xDType)
					})
				}
			}
		}
	}
}

// withComponentsOf returns a copy of template (its strategy) holding w's components.
func withComponentsOf(template, w lowering.Quantized) lowering.Quantized {
	return template.WithComponents(w.Components()).(lowering.Quantized)
}

func activations(t *testing.T, r *rand.Rand, dims []int, dtype dtypes.DType) *tensors.Tensor {
	n := testutil.Size(dims...)
	if dtype == dtypes.Int32 {
		data := make([]int32, n)
		for i := range data {
			data[i] = int32(r.IntN(9) - 4)
		}
		return tensors.FromFlatDataAndDimensions(data, dims...)
	}
	x := testutil.NormalTensor(r, dims...)
	if dtype == dtypes.Float32 {
		return x
	}
	return graph.MustExecOnce(testutil.Backend(t), func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtype) }, x)
}

// denseProduct is the reference: the weight materialized on the host in float32 (float64 for
// integer activations, exact), times x in float64.
func denseProduct(t *testing.T, w lowering.Quantized, x *tensors.Tensor, c productCase) []float64 {
	t.Helper()
	backend := testutil.Backend(t)
	dense := testutil.Materialize(t, w)
	out := graph.MustExecOnce(backend, func(x, w *graph.Node) *graph.Node {
		x, w = graph.ConvertDType(x, dtypes.Float64), graph.ConvertDType(w, dtypes.Float64)
		if c.axes.WeightOnLeft {
			return graph.DotGeneral(w, c.axes.WContracting, c.axes.WBatch, x, c.axes.XContracting, c.axes.XBatch)
		}
		return graph.DotGeneral(x, c.axes.XContracting, c.axes.XBatch, w, c.axes.WContracting, c.axes.WBatch)
	}, x, dense)
	return tensors.MustCopyFlatData[float64](out)
}

// runProduct builds lowering.DotGeneral in a graph and runs it, returning a panic as an error.
func runProduct(t *testing.T, w lowering.Quantized, x *tensors.Tensor, c productCase) (got []float64, err error) {
	t.Helper()
	defer testutil.RecoverError(&err)
	e := implicitarray.MustNewExec(testutil.Backend(t), func(x *graph.Node, w implicitarray.Array) *graph.Node {
		return graph.ConvertDType(lowering.DotGeneral(x, w.(lowering.Quantized), c.axes), dtypes.Float64)
	})
	defer e.Finalize()
	out, err := e.Call1(x, w)
	if err != nil {
		return nil, err
	}
	return tensors.MustCopyFlatData[float64](out.(*tensors.Tensor)), nil
}

// compare checks got against want within the float32 accumulation error of k products (the
// packed-signs formulation sums prefixes of up to 255 times the activations before cancelling
// them), or bfloat16 rounding of the result.
func compare(t *testing.T, got, want []float64, k int, xDType dtypes.DType) {
	t.Helper()
	tol := max(1e-4, 6.25e-6*float64(k))
	if xDType == dtypes.BFloat16 {
		tol = 3e-2 // the result is rounded to bfloat16
	}
	testutil.Close(t, "product ("+xDType.String()+" activations)", got, want, testutil.Mixed(tol))
}

// TestSlabbed: DecodeDot decodes a weight larger than two slabs a slab at a time for a few rows,
// with the same result as the dense product (NF4 with blocks free, also double-quantized; int8).
func TestSlabbed(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	c := productCase{name: "slabbed", xDims: []int{4, 2048}, wDims: []int{2048, 1100},
		axes: lowering.Axes{XContracting: []int{1}, WContracting: []int{0}}, rank2: true, kMajor: true}
	for _, f := range formats() {
		if !slices.Contains([]string{"nf4", "nf4-dq", "int8/last-axis", "int8/first-axis"}, f.name) {
			continue
		}
		t.Run(f.name, func(t *testing.T) {
			w := f.make(r, c.wDims, lowering.DecodeDot)
			x := activations(t, r, c.xDims, dtypes.Float32)
			got, err := runProduct(t, w, x, c)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			compare(t, got, denseProduct(t, w, x, c), c.k(), dtypes.Float32)
		})
	}
}

// chooseFixture holds the layouts, axes and activation shapes the tables of Choose use: parameters
// of a graph that is never compiled (Choose reads shapes only).
type chooseFixture struct {
	blockwise, blockwiseBatched, blockwiseDQ, flat, int8Rows, signs, signs1, signs1Scaled, q4k lowering.Layout
	xW, xWt                                                                                    lowering.Axes
}

func newChooseFixture(t *testing.T) chooseFixture {
	g := graph.NewGraph(testutil.Backend(t), "choose")
	param := func(name string, dtype dtypes.DType, dims ...int) *graph.Node {
		return graph.Parameter(g, name, shapes.Make(dtype, dims...))
	}
	nested := lowering.NestedScales{Codes: param("sc", dtypes.Uint8, 16, 3), Absmax: param("na", dtypes.Float32, 1),
		Offset: param("no", dtypes.Float32), Map: nf4.DynamicMap(), BlockSize: nf4.NestedBlockSize}
	return chooseFixture{
		blockwise:        lowering.Blockwise4{Packed: param("p", dtypes.Uint8, 16, 3, 2), Scales: param("s", dtypes.Float32, 16, 3), Dim: 12},
		blockwiseBatched: lowering.Blockwise4{Packed: param("p3", dtypes.Uint8, 2, 16, 3, 2), Scales: param("s3", dtypes.Float32, 2, 16, 3), Dim: 12},
		blockwiseDQ:      lowering.Blockwise4DQ{Packed: param("pdq", dtypes.Uint8, 16, 3, 2), Scales: nested, Dim: 12},
		flat:             lowering.FlatBlockwise4{Packed: param("pf", dtypes.Uint8, 24, 4), Scales: param("sf", dtypes.Float32, 24), Dims: []int{16, 12}},
		int8Rows:         lowering.Int8{Codes: param("c", dtypes.Int8, 16, 12), Scale: param("sr", dtypes.Float32, 16, 1)},
		signs:            lowering.Signs{Packed: param("b", dtypes.Uint8, 4, 12), Bits: 2},
		signs1:           lowering.Signs{Packed: param("b1", dtypes.Uint8, 2, 12), Bits: 1},
		signs1Scaled:     lowering.Signs{Packed: param("b1s", dtypes.Uint8, 2, 12), Scale: param("s1", dtypes.Float32, 1, 12), Bits: 1},
		q4k:              lowering.GGML{Blocks: param("g", dtypes.Uint8, 16, 2, gguf.TypeQ4_K.BlockBytes()), Type: gguf.TypeQ4_K},
		xW:               lowering.Axes{XContracting: []int{1}, WContracting: []int{0}},
		xWt:              lowering.Axes{XContracting: []int{1}, WContracting: []int{1}},
	}
}

// rows is the shape of m float32 activation rows of width k.
func rows(m, k int) shapes.Shape { return shapes.Make(dtypes.Float32, m, k) }

// chooseCase is a row of a policy table: Choose(platform, w, x, axes) must be want.
type chooseCase struct {
	name     string
	platform lowering.Platform
	w        lowering.Layout
	x        shapes.Shape
	axes     lowering.Axes
	want     lowering.Strategy
}

func checkChoose(t *testing.T, cases []chooseCase) {
	t.Helper()
	for _, tc := range cases {
		if got := lowering.Choose(tc.platform, tc.w, tc.x, tc.axes); got != tc.want {
			t.Errorf("%s: Choose = %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestEmptyActivations: a product whose activations have no rows is an empty array for every
// format and every strategy that serves it (Auto included), on either side of the weight; a
// strategy's slicing or broadcasting of the empty activations must not panic.
func TestEmptyActivations(t *testing.T) {
	kernels := lowering.PlatformOf(testutil.Backend(t))&lowering.Kernels != 0
	r := rand.New(rand.NewPCG(5, 6))
	cases := []productCase{
		{name: "x@W", xDims: []int{0, 16}, wDims: []int{16, 12}, axes: lowering.Axes{XContracting: []int{1}, WContracting: []int{0}},
			rank2: true, kMajor: true},
		{name: "x@Wt", xDims: []int{0, 12}, wDims: []int{16, 12}, axes: lowering.Axes{XContracting: []int{1}, WContracting: []int{1}},
			rank2: true},
		{name: "W@x", xDims: []int{12, 0}, wDims: []int{16, 12}, axes: lowering.Axes{XContracting: []int{0}, WContracting: []int{1},
			WeightOnLeft: true}, rank2: true},
	}
	strategies := append([]lowering.Strategy{lowering.Auto}, lowering.Strategies()...)
	for _, f := range formats() {
		for _, c := range cases {
			for _, xDType := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
				w := f.make(r, c.wDims, lowering.Auto)
				x := activations(t, r, c.xDims, xDType)
				for _, s := range strategies {
					if !served(s, f, c, xDType, kernels) {
						continue
					}
					t.Run(fmt.Sprintf("%s/%s/%s/%s", f.name, c.name, xDType, s), func(t *testing.T) {
						got, err := runProduct(t, withComponentsOf(f.make(r, c.wDims, s), w), x, c)
						if err != nil {
							t.Fatalf("%+v", err)
						}
						if len(got) != 0 {
							t.Errorf("got %d values, want none", len(got))
						}
					})
				}
			}
		}
	}
}

// TestChoose restates the policy table for each platform.
func TestChoose(t *testing.T) {
	f := newChooseFixture(t)
	blockwise, blockwiseDQ, flat, int8Rows, signs, signs1, q4k := f.blockwise, f.blockwiseDQ, f.flat, f.int8Rows, f.signs, f.signs1, f.q4k
	xW, xWt := f.xW, f.xWt
	checkChoose(t, []chooseCase{
		{"nf4 x@W m=1 fused loops", lowering.XLACPUFusedLoops, blockwise, rows(1, 16), xW, lowering.SlicedSum},
		{"nf4 x@W m=1 pure Go", lowering.PureGo, blockwise, rows(1, 16), xW, lowering.SlicedSum},
		{"nf4 x@W m=1 library fusions", lowering.XLACPU, blockwise, rows(1, 16), xW, lowering.ProductTable},
		{"nf4 x@W m=1 accelerator", lowering.XLAAccelerator, blockwise, rows(1, 16), xW, lowering.ProductTable},
		{"nf4 x@Wt m=1", lowering.XLACPUFusedLoops, blockwise, rows(1, 12), xWt, lowering.ProductTable},
		{"nf4 x@W m=2", lowering.XLACPUFusedLoops, blockwise, rows(2, 16), xW, lowering.DecodeDot},
		{"nf4-dq x@W m=1 fused loops", lowering.XLACPUFusedLoops, blockwiseDQ, rows(1, 16), xW, lowering.SlicedSum},
		{"nf4-dq x@Wt m=1", lowering.XLACPUFusedLoops, blockwiseDQ, rows(1, 12), xWt, lowering.ProductTable},
		{"nf4-dq x@W m=2", lowering.XLACPUFusedLoops, blockwiseDQ, rows(2, 16), xW, lowering.DecodeDot},
		{"nf4-flat x@Wt m=1", lowering.XLACPUFusedLoops, flat, rows(1, 12), xWt, lowering.DecodeDot},
		{"int8 x@W m=2 fused loops", lowering.XLACPUFusedLoops, int8Rows, rows(2, 16), xW, lowering.SlicedSum},
		{"int8 x@W m=2 library fusions", lowering.XLACPU, int8Rows, rows(2, 16), xW, lowering.DecodeDot},
		{"int8 x@W m=3", lowering.XLACPUFusedLoops, int8Rows, rows(3, 16), xW, lowering.DecodeDot},
		{"int8 x@Wt m=8", lowering.XLACPU, int8Rows, rows(8, 12), xWt, lowering.MulReduce},
		{"int8 x@Wt m=9", lowering.XLACPU, int8Rows, rows(9, 12), xWt, lowering.DecodeDot},
		{"signs x@W m=16", lowering.PureGo, signs, rows(16, 16), xW, lowering.SlicedSum},
		{"signs x@W m=17", lowering.PureGo, signs, rows(17, 16), xW, lowering.DecodeDot},
		{"signs x@Wt", lowering.XLACPUFusedLoops, signs, rows(1, 12), xWt, lowering.DecodeDot},
		{"signs integer x", lowering.XLACPUFusedLoops, signs, shapes.Make(dtypes.Int32, 1, 16), xW, lowering.DecodeDot},
		{"nf4 x@W m=1 kernels", lowering.XLACPUFusedLoops | lowering.Kernels, blockwise, rows(1, 16), xW, lowering.Kernel},
		{"nf4 x@Wt m=512 kernels", lowering.XLACPU | lowering.Kernels, blockwise, rows(512, 12), xWt, lowering.Kernel},
		{"nf4 x@W m=513 kernels", lowering.XLACPUFusedLoops | lowering.Kernels, blockwise, rows(513, 16), xW, lowering.DecodeDot},
		{"nf4-dq x@W m=64 kernels", lowering.XLACPUFusedLoops | lowering.Kernels, blockwiseDQ, rows(64, 16), xW, lowering.Kernel},
		{"nf4-flat x@W m=1 kernels", lowering.XLACPUFusedLoops | lowering.Kernels, flat, rows(1, 16), xW, lowering.DecodeDot},
		{"int8 x@Wt m=512 kernels", lowering.XLACPUFusedLoops | lowering.Kernels, int8Rows, rows(512, 12), xWt, lowering.Kernel},
		{"int8 x@Wt m=513 kernels", lowering.XLACPU | lowering.Kernels, int8Rows, rows(513, 12), xWt, lowering.DecodeDot},
		{"signs x@W m=512 kernels", lowering.XLACPUFusedLoops | lowering.Kernels, signs, rows(512, 16), xW, lowering.Kernel},
		{"signs x@W m=513 kernels", lowering.XLACPUFusedLoops | lowering.Kernels, signs, rows(513, 16), xW, lowering.DecodeDot},
		{"1-bit signs x@W m=512 kernels", lowering.XLACPUFusedLoops | lowering.Kernels, signs1, rows(512, 16), xW, lowering.Kernel},
		{"1-bit signs x@W m=513 kernels", lowering.XLACPUFusedLoops | lowering.Kernels, signs1, rows(513, 16), xW, lowering.DecodeDot},
		{"signs x@Wt kernels", lowering.XLACPUFusedLoops | lowering.Kernels, signs, rows(1, 12), xWt, lowering.DecodeDot},
		{"signs integer x kernels", lowering.XLACPUFusedLoops | lowering.Kernels, signs, shapes.Make(dtypes.Int32, 1, 16), xW, lowering.DecodeDot},
		{"ggml x@Wt m=1 kernels", lowering.XLACPUFusedLoops | lowering.Kernels, q4k, rows(1, 512), xWt, lowering.Kernel},
		{"ggml x@Wt m=512 kernels", lowering.XLACPU | lowering.Kernels, q4k, rows(512, 512), xWt, lowering.Kernel},
		{"ggml x@Wt m=513 kernels", lowering.XLACPU | lowering.Kernels, q4k, rows(513, 512), xWt, lowering.DecodeDot},
		{"ggml x@W kernels", lowering.XLACPU | lowering.Kernels, q4k, rows(1, 16), xW, lowering.DecodeDot},
		{"ggml x@Wt m=1 no kernels", lowering.XLACPUFusedLoops, q4k, rows(1, 512), xWt, lowering.DecodeDot},
	})
}

// TestPlatformOf: the test backend is classified, and XLA_FLAGS decides between the XLA CPU
// platforms.
func TestPlatformOf(t *testing.T) {
	backend := testutil.Backend(t)
	t.Setenv("XLA_FLAGS", "--xla_cpu_foo=1 "+lowering.LibraryFusionFlag)
	got := lowering.PlatformOf(backend)
	switch backend.String() {
	case "go":
		if got != lowering.PureGo {
			t.Errorf("PlatformOf(%s) = %s, want pure-go", backend.String(), got)
		}
	case "xla":
		// quanta's runtime started the test backend: on XLA CPU it registered the kernels.
		accelerators := []lowering.Platform{lowering.XLAAccelerator, lowering.XLAGPU, lowering.XLATPU}
		if got != lowering.XLACPUFusedLoops|lowering.Kernels && !slices.Contains(accelerators, got) {
			t.Errorf("PlatformOf(%s) with the flag = %s", backend.Description(), got)
		}
		t.Setenv("XLA_FLAGS", "")
		if got := lowering.PlatformOf(backend); got != lowering.XLACPU|lowering.Kernels && !slices.Contains(accelerators, got) {
			t.Errorf("PlatformOf(%s) without the flag = %s", backend.Description(), got)
		}
	default:
		t.Errorf("unexpected test backend %q (%s)", backend.String(), backend.Description())
	}
	if got := lowering.PlatformOf(nil); got != lowering.OtherBackend {
		t.Errorf("PlatformOf(nil) = %s", got)
	}
}

// codebookWeight is an NF4 weight (2, 16) in one block of 16 a row: row 0 holds codes 0..15 in
// order with scale 1, row 1 codes 15..0 with scale scale1; its products run with strategy s.
func codebookWeight(scale1 float32, s lowering.Strategy) *nf4.Array {
	packed := make([]uint8, 16)
	for j := range 8 {
		packed[j] = uint8(2*j)<<4 | uint8(2*j+1)
		packed[8+j] = uint8(15-2*j)<<4 | uint8(14-2*j)
	}
	w := nf4.MustQuantize(tensors.FromShape(shapes.Make(dtypes.Float32, 2, 16)), 16)
	return w.WithComponents([]implicitarray.Component{
		implicitarray.TensorComponent(tensors.FromFlatDataAndDimensions(packed, 2, 1, 8)),
		implicitarray.TensorComponent(tensors.FromFlatDataAndDimensions([]float32{1, scale1}, 2, 1)),
	}).(*nf4.Array).WithStrategy(s)
}

// TestSlicedSumCodebook: the Blockwise4 SlicedSum's arithmetic decode reproduces every NF4 code
// value to float32 rounding (the reference is the codebook itself), for both nibbles and with the
// block scale.
func TestSlicedSumCodebook(t *testing.T) {
	backend := testutil.Backend(t)
	codebook := nf4.Codebook()
	w := codebookWeight(3, lowering.SlicedSum)
	for _, tc := range []struct {
		name  string
		x     []float32
		scale float64 // |x|·block scale: the decode error is at most 4e-7 of it
		value func(i int) float64
	}{
		{"row0", []float32{1, 0}, 1, func(i int) float64 { return float64(codebook[i]) }},
		{"row1x2", []float32{0, 2}, 6, func(i int) float64 { return 6 * float64(codebook[15-i]) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := implicitarray.MustNewExec(backend, func(x *graph.Node, w *nf4.Array) *graph.Node {
				return implicitarray.Materialize(implicitarray.MatMul(x, w))
			})
			defer e.Finalize()
			got := tensors.MustCopyFlatData[float32](e.MustCall1(tensors.FromFlatDataAndDimensions(tc.x, 1, 2), w).(*tensors.Tensor))
			for i, g := range got {
				if want := tc.value(i); math.Abs(float64(g)-want) > 4e-7*tc.scale {
					t.Errorf("code position %d: %v, want %v", i, g, want)
				}
			}
		})
	}
}

// FuzzPack: Pack puts each pair of codes in one byte, the even element in the high nibble.
func FuzzPack(f *testing.F) {
	f.Add([]byte{0x3C, 0x77, 0xFF, 0x00})
	f.Add([]byte{0x01, 0x10, 0xF0, 0x0F, 0xAB})
	pack := graph.MustNewExec(testutil.Backend(f), lowering.Pack)
	f.Fuzz(func(t *testing.T, data []byte) {
		want := make([]uint8, 2*2*4) // (2 rows, 2 blocks, 4 bytes): blocks of 8
		copy(want, data)
		codes := make([]uint8, 2*len(want))
		for i, b := range want {
			codes[2*i], codes[2*i+1] = b>>4, b&15
		}
		got := tensors.MustCopyFlatData[uint8](pack.MustExec(tensors.FromFlatDataAndDimensions(codes, 2, 2, 8))[0])
		if !slices.Equal(got, want) {
			t.Fatalf("Pack(%d) = %02X, want %02X", codes, got, want)
		}
	})
}

// TestInfiniteActivations: an infinite activation gives what the dense product of the
// materialized weight gives (±Inf where every weight it meets is ±1, NaN where it meets a 0 or
// both signs of infinity meet), for every strategy that serves x·W.
func TestInfiniteActivations(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	c := productCases()[1] // x@W, m = 3
	kernels := lowering.PlatformOf(testutil.Backend(t))&lowering.Kernels != 0
	for _, f := range formats() {
		w := f.make(r, c.wDims, lowering.Auto)
		x := activations(t, r, c.xDims, dtypes.Float32)
		values := tensors.MustCopyFlatData[float32](x)
		values[3] = float32(math.Inf(1))                   // row 0
		values[16+5], values[16+6] = values[3], -values[3] // row 1: +Inf and -Inf
		x = tensors.FromFlatDataAndDimensions(values, c.xDims...)
		want := denseProduct(t, w, x, c)
		for _, s := range []lowering.Strategy{lowering.Auto, lowering.DecodeDot, lowering.MulReduce, lowering.SlicedSum, lowering.Kernel} {
			if !served(s, f, c, dtypes.Float32, kernels) {
				continue
			}
			t.Run(f.name+"/"+s.String(), func(t *testing.T) {
				got, err := runProduct(t, withComponentsOf(f.make(r, c.wDims, s), w), x, c)
				if err != nil {
					t.Fatalf("%+v", err)
				}
				if diff, scale := testutil.MaxAbsDiff(got, want); diff > 1e-4*math.Max(1, scale) {
					t.Errorf("got %v\nwant %v", got, want)
				}
			})
		}
	}
}

// needKernels skips the test where its backend runs without quanta's kernels, and returns the
// backend.
func needKernels(t *testing.T) backends.Backend {
	t.Helper()
	backend := testutil.Backend(t)
	if lowering.PlatformOf(backend)&lowering.Kernels == 0 {
		t.Skipf("no kernels on %s", backend.Name())
	}
	return backend
}

// TestKernelGradient: a product that Auto gives to a kernel keeps the DecodeDot formulation for
// GoMLX's gradients, so differentiating through it gives the dense product's gradient.
func TestKernelGradient(t *testing.T) {
	needKernels(t)
	r := rand.New(rand.NewPCG(7, 8))
	c := productCases()[1] // x@W, m = 3
	for _, f := range formats() {
		if !served(lowering.Kernel, f, c, dtypes.Float32, true) {
			continue
		}
		t.Run(f.name, func(t *testing.T) {
			w := f.make(r, c.wDims, lowering.Auto)
			checkKernelGradient(t, activations(t, r, c.xDims, dtypes.Float32), w, c.axes, f.layout)
		})
	}
}

// checkKernelGradient checks that Auto gives the product of float32 activations x and w on axes
// (the weight on the right) to the kernel of layout, and that differentiating the sum of the
// product's squares with respect to x gives what it gives through the dense product with w's
// materialization in float32.
func checkKernelGradient(t *testing.T, x *tensors.Tensor, w lowering.Quantized, axes lowering.Axes, layout string) {
	t.Helper()
	backend := testutil.Backend(t)
	dense := testutil.Materialize(t, w)
	dense = graph.MustExecOnce(backend, func(d *graph.Node) *graph.Node { return graph.ConvertDType(d, dtypes.Float32) }, dense)
	lowering.ResetBuilt()
	e := implicitarray.MustNewExec(backend, func(x *graph.Node, w implicitarray.Array, dense *graph.Node) (*graph.Node, *graph.Node) {
		loss := func(y *graph.Node) *graph.Node { return graph.ReduceAllSum(graph.Mul(y, y)) }
		got := graph.Gradient(loss(lowering.DotGeneral(x, w.(lowering.Quantized), axes)), x)[0]
		want := graph.Gradient(loss(graph.DotGeneral(x, axes.XContracting, axes.XBatch, dense, axes.WContracting, axes.WBatch)), x)[0]
		return got, want
	})
	defer e.Finalize()
	out := e.MustCall(x, w, dense)
	if lowering.Built()[lowering.Choice{Layout: layout, Strategy: lowering.Kernel}] == 0 {
		t.Fatalf("Auto did not call the kernel: %v", lowering.Built())
	}
	got, want := testutil.Float64s(t, out[0].(*tensors.Tensor)), testutil.Float64s(t, out[1].(*tensors.Tensor))
	if diff, scale := testutil.MaxAbsDiff(got, want); diff > 1e-4*math.Max(1, scale) {
		t.Errorf("gradient through the kernel's product differs from the dense one by %g (scale %g)", diff, scale)
	}
}

// TestIntegerActivationsWrap: an unscaled signs weight times integer activations gives the exact
// integer sums in the activations' dtype, wrapped as a dense integer product wraps them (two's
// complement), on every backend and with every strategy that serves it: 8 activations of 20
// against a column of -1s sum to -160 and against a column of +1s to 160, which int8 and uint8
// do not hold.
func TestIntegerActivationsWrap(t *testing.T) {
	values := make([]float32, 8*2) // (8, 2): column 0 all -1, column 1 all +1
	for i := range values {
		values[i] = float32(2*(i%2) - 1)
	}
	weight := tensors.FromFlatDataAndDimensions(values, 8, 2)
	weights := map[string]func(s lowering.Strategy) lowering.Quantized{
		"ternary": func(s lowering.Strategy) lowering.Quantized {
			return onebit.MustQuantizeTernary(weight, nil).WithStrategy(s)
		},
		"binary/1bit": func(s lowering.Strategy) lowering.Quantized {
			return onebit.MustQuantizeBinaryBits(weight, nil).WithStrategy(s)
		},
	}
	axes := lowering.Axes{XContracting: []int{1}, WContracting: []int{0}}
	cases := []struct {
		x, want any
	}{
		{[][]int8{{20, 20, 20, 20, 20, 20, 20, 20}}, [][]int8{{96, -96}}},
		{[][]uint8{{20, 20, 20, 20, 20, 20, 20, 20}}, [][]uint8{{96, 160}}},
		{[][]uint32{{20, 20, 20, 20, 20, 20, 20, 20}}, [][]uint32{{1<<32 - 160, 160}}},
		{[][]int32{{20, 20, 20, 20, 20, 20, 20, 20}}, [][]int32{{-160, 160}}},
	}
	for name, w := range weights {
		for _, tc := range cases {
			x := tensors.FromAnyValue(tc.x)
			for _, s := range []lowering.Strategy{lowering.Auto, lowering.Materialize, lowering.DecodeDot, lowering.MulReduce} {
				t.Run(fmt.Sprintf("%s/%s/%s", name, x.DType(), s), func(t *testing.T) {
					e := implicitarray.MustNewExec(testutil.Backend(t), func(x *graph.Node, w implicitarray.Array) *graph.Node {
						return lowering.DotGeneral(x, w.(lowering.Quantized), axes)
					})
					defer e.Finalize()
					out, err := e.Call1(x, w(s))
					if err != nil {
						t.Fatalf("%+v", err)
					}
					if got := out.(*tensors.Tensor).Value(); fmt.Sprint(got) != fmt.Sprint(tc.want) {
						t.Errorf("got %v, want %v", got, tc.want)
					}
				})
			}
		}
	}
}
