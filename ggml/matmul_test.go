package ggml_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/ggml"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
)

// product is a dot_general given as an einsum equation, for the implicit weight and the host
// reference: the activations' and the weight's dims (blocks along the weight's last axis).
type product struct {
	name  string
	eq    string // operands: activations, weight
	x, w  []int
	rank2 bool
}

func (p product) op(x, w implicitarray.Value) implicitarray.Value {
	if p.eq == "mk,kn->mn" {
		return implicitarray.MatMul(x, w)
	}
	return implicitarray.Einsum(p.eq, x, w)
}

func products() []product {
	return []product{
		// GGUF's linear weight: N rows of K, the product x·Wᵀ.
		{name: "x@Wt", eq: "mk,nk->mn", x: []int{3, 256}, w: []int{5, 256}, rank2: true},
		{name: "x@Wt/m=1", eq: "mk,nk->mn", x: []int{1, 512}, w: []int{4, 512}, rank2: true},
		{name: "Wt@x", eq: "mk,nk->nm", x: []int{2, 256}, w: []int{3, 256}, rank2: true},
		{name: "vector", eq: "k,nk->n", x: []int{256}, w: []int{3, 256}, rank2: true},
		{name: "x@W", eq: "mk,kn->mn", x: []int{2, 6}, w: []int{6, 256}, rank2: true},
		{name: "batched", eq: "bmk,bnk->bmn", x: []int{2, 3, 256}, w: []int{2, 4, 256}},
	}
}

// hostEinsum computes a two-operand einsum of single-letter labels in float64 on the host.
func hostEinsum(eq string, x []float64, xDims []int, w []float64, wDims []int) []float64 {
	in, out, _ := strings.Cut(eq, "->")
	xl, wl, _ := strings.Cut(in, ",")
	size := map[byte]int{}
	for i := range xl {
		size[xl[i]] = xDims[i]
	}
	for i := range wl {
		size[wl[i]] = wDims[i]
	}
	var labels []byte // output labels first, then the summed ones
	labels = append(labels, out...)
	for l := range size {
		if !strings.ContainsRune(out, rune(l)) {
			labels = append(labels, l)
		}
	}
	offset := func(ls string, dims []int, at map[byte]int) int {
		o := 0
		for i := range ls {
			o = o*dims[i] + at[ls[i]]
		}
		return o
	}
	outSize := 1
	for i := range out {
		outSize *= size[out[i]]
	}
	result := make([]float64, outSize)
	at := map[byte]int{}
	var walk func(i int)
	walk = func(i int) {
		if i == len(labels) {
			oDims := make([]int, len(out))
			for j := range out {
				oDims[j] = size[out[j]]
			}
			result[offset(out, oDims, at)] += x[offset(xl, xDims, at)] * w[offset(wl, wDims, at)]
			return
		}
		for v := range size[labels[i]] {
			at[labels[i]] = v
			walk(i + 1)
		}
	}
	walk(0)
	return result
}

// asDType returns x's values as the backend rounds them to dtype (GoMLX's pure-Go backend
// truncates to bfloat16 where XLA rounds to nearest), as float64.
func asDType(t *testing.T, x *tensors.Tensor, dtype dtypes.DType) []float64 {
	return testutil.Float64s(t, graph.MustExecOnce(testutil.Backend(t), func(x *graph.Node) *graph.Node {
		return graph.ConvertDType(graph.ConvertDType(x, dtype), dtypes.Float64)
	}, x))
}

// contractsBlocks reports a rank-2 product contracting the weight's block axis (x·Wᵀ).
func (p product) contractsBlocks() bool {
	return p.rank2 && strings.HasSuffix(p.eq[:strings.Index(p.eq, "-")], "nk")
}

// served restates which strategies serve a GGML weight (package lowering's documentation), with
// or without quanta's kernels on the backend.
func served(s lowering.Strategy, p product, kernels bool) bool {
	switch s {
	case lowering.Auto, lowering.Materialize, lowering.DecodeDot:
		return true
	case lowering.MulReduce:
		return p.rank2
	case lowering.Kernel:
		return kernels && p.contractsBlocks()
	}
	return false // SlicedSum, ProductTable
}

// integerRoute lists the types whose kernels multiply 8-bit activations for a few rows (in groups
// of one block).
var integerRoute = []gguf.Type{gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K, gguf.TypeQ4_0, gguf.TypeQ4_1,
	gguf.TypeQ5_0, gguf.TypeQ5_1}

// x8Bound returns, per output of the product eq, what quantizing the activations to 8 bits in
// groups of g along their last axis (the kernels' integer route) may change it by: Σ |w|·amax/254
// over the contracted elements, amax the largest magnitude of the element's group.
func x8Bound(eq string, x []float64, xDims []int, w []float64, wDims []int, g int) []float64 {
	half := make([]float64, len(x))
	for c := 0; c < len(x); c += g {
		amax := 0.0
		for _, v := range x[c : c+g] {
			amax = math.Max(amax, math.Abs(v))
		}
		for l := c; l < c+g; l++ {
			half[l] = amax / 254
		}
	}
	absW := make([]float64, len(w))
	for i, v := range w {
		absW[i] = math.Abs(v)
	}
	return hostEinsum(eq, half, xDims, absW, wDims)
}

// TestDotGeneral: for every block type, product and strategy, the product equals the host
// product of gguf.Decode's values with the activations (as the backend rounds them), within
// float32 accumulation, and for the kernels of the types of integerRoute (x·Wᵀ on a backend with
// quanta's kernels) within the change 8-bit activations may make; strategies that cannot serve
// a GGML weight panic with lowering.ErrUnsupported; only Materialize materializes. Q4_K runs
// every product, strategy and activation dtype, the other types x·Wᵀ with Auto on float32 activations (their decode is what
// differs); QUANTA_TEST_ALL=1 runs the whole table (each case compiles a graph).
func TestDotGeneral(t *testing.T) {
	kernels := lowering.PlatformOf(testutil.Backend(t))&lowering.Kernels != 0
	r := rand.New(rand.NewPCG(7, 8))
	strategies := append([]lowering.Strategy{lowering.Auto}, lowering.Strategies()...)
	all := os.Getenv(testutil.TestAllEnv) == "1"
	for _, typ := range gguf.BlockTypes() {
		full := all || typ == gguf.TypeQ4_K
		for _, p := range products() {
			if p.name != "x@Wt" && !full {
				continue
			}
			w := ggml.MustQuantize(testutil.NormalTensor(r, p.w...), typ)
			xValues := testutil.Normals(r, testutil.Size(p.x...))
			x := tensors.FromFlatDataAndDimensions(xValues, p.x...)
			decoded := make([]float32, testutil.Size(p.w...))
			if err := gguf.Decode(typ, testutil.TensorBytes(t, w.Blocks().Tensor()), decoded); err != nil {
				t.Fatal(err)
			}
			wf := make([]float64, len(decoded))
			for i, v := range decoded {
				wf[i] = float64(v)
			}
			for _, actDType := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
				if actDType == dtypes.BFloat16 && !full {
					continue
				}
				xf := make([]float64, len(xValues))
				for i, v := range xValues {
					xf[i] = float64(v)
				}
				if actDType != dtypes.Float32 {
					xf = asDType(t, x, actDType)
				}
				want := hostEinsum(p.eq, xf, p.x, wf, p.w)
				var bound8 []float64 // where a kernel may serve the product on 8-bit activations
				if kernels && p.contractsBlocks() && slices.Contains(integerRoute, typ) {
					bound8 = x8Bound(p.eq, xf, p.x, wf, p.w, typ.BlockSize())
				}
				for _, s := range strategies {
					if s != lowering.Auto && (actDType == dtypes.BFloat16 || !full) {
						continue
					}
					t.Run(fmt.Sprintf("%s/%s/%s/%s", typ, p.name, actDType, s), func(t *testing.T) {
						lowering.ResetBuilt()
						implicitarray.ResetStats()
						got, err := run(t, p, x, w.WithStrategy(s), actDType)
						if !served(s, p, kernels) {
							if err == nil || !errors.Is(err, lowering.ErrUnsupported) || !strings.Contains(err.Error(), s.String()+" serves") {
								t.Fatalf("want a panic with ErrUnsupported naming %s, got %v", s, err)
							}
							return
						}
						if err != nil {
							t.Fatalf("%+v", err)
						}
						layout := "ggml-" + strings.ToLower(typ.String())
						if s != lowering.Auto && lowering.Built()[lowering.Choice{Layout: layout, Strategy: s}] == 0 {
							t.Errorf("Built() = %v, want a product recorded as %s/%s", lowering.Built(), layout, s)
						}
						st := implicitarray.CurrentStats()
						if len(st.Fallbacks) != 0 || (s != lowering.Materialize) != (st.Materializations["*ggml.Array"] == 0) {
							t.Errorf("fallbacks %v, materializations %v with %s", st.Fallbacks, st.Materializations, s)
						}
						tol := 1e-4 + 1e-6*float64(p.w[len(p.w)-1])
						if actDType == dtypes.BFloat16 {
							tol = 3e-2 // the result is rounded to bfloat16
						}
						if bound8 == nil || (s != lowering.Auto && s != lowering.Kernel) {
							testutil.Close(t, "product", got, want, testutil.Mixed(tol))
							return
						}
						for i := range want {
							if d := math.Abs(got[i] - want[i]); !(d <= tol*math.Max(1, math.Abs(want[i]))+bound8[i]) {
								t.Fatalf("product[%d] = %v, want %v (8-bit activation bound %g)", i, got[i], want[i], bound8[i])
							}
						}
					})
				}
			}
		}
	}
}

// run builds the product with the weight in a graph and runs it, returning a panic as an error.
func run(t *testing.T, p product, x *tensors.Tensor, w *ggml.Array, actDType dtypes.DType) (got []float64, err error) {
	t.Helper()
	defer testutil.RecoverError(&err)
	e := implicitarray.MustNewExec(testutil.Backend(t), func(x *graph.Node, w *ggml.Array) *graph.Node {
		out := p.op(graph.ConvertDType(x, actDType), w).(*graph.Node)
		if out.DType() != actDType {
			panic(fmt.Errorf("result %s, want %s", out.Shape(), actDType))
		}
		return out
	})
	defer e.Finalize()
	out, err := e.Call1(x, w)
	if err != nil {
		return nil, err
	}
	return testutil.Float64s(t, out.(*tensors.Tensor)), nil
}

// TestChooseDecodeDot: without kernels, Auto decodes a GGML weight in the graph for any rows.
func TestChooseDecodeDot(t *testing.T) {
	g := graph.NewGraph(testutil.Backend(t), "choose")
	w := lowering.GGML{Blocks: graph.Parameter(g, "w", ggml.BlocksShape(gguf.TypeQ4_K, 640, 2048)), Type: gguf.TypeQ4_K}
	for _, platform := range []lowering.Platform{lowering.PureGo, lowering.XLACPU, lowering.XLACPUFusedLoops, lowering.XLAAccelerator} {
		for _, m := range []int{1, 8, 512} {
			x := ggml.BlocksShape(gguf.TypeQ4_K, 640, 2048) // any shape of the right rank: only its dims matter
			x.DType, x.Dimensions = dtypes.Float32, []int{m, 2048}
			got := lowering.Choose(platform, w, x, lowering.Axes{XContracting: []int{1}, WContracting: []int{1}})
			if got != lowering.DecodeDot {
				t.Errorf("Choose(%s, m=%d) = %s, want decode-dot", platform, m, got)
			}
		}
	}
	if !slices.Equal(w.Dimensions(), []int{640, 2048}) {
		t.Errorf("Dimensions() = %v", w.Dimensions())
	}
}

// TestSlabbed: DecodeDot decodes a weight larger than two slabs, contracted on a leading axis
// (x·W), a slab of whole rows at a time for a few activation rows, with the dense product's result.
func TestSlabbed(t *testing.T) {
	backend := testutil.Backend(t)
	r := rand.New(rand.NewPCG(9, 10))
	p := product{name: "x@W", eq: "mk,kn->mn", x: []int{4, 2048}, w: []int{2048, 1152}, rank2: true}
	w := ggml.MustQuantize(testutil.NormalTensor(r, p.w...), gguf.TypeQ8_0).WithStrategy(lowering.DecodeDot)
	x := testutil.NormalTensor(r, p.x...)
	decoded := make([]float32, testutil.Size(p.w...))
	if err := gguf.Decode(gguf.TypeQ8_0, testutil.TensorBytes(t, w.Blocks().Tensor()), decoded); err != nil {
		t.Fatal(err)
	}
	want := testutil.Float64s(t, graph.MustExecOnce(backend, func(x, w *graph.Node) *graph.Node {
		return graph.MatMul(graph.ConvertDType(x, dtypes.Float64), graph.ConvertDType(w, dtypes.Float64))
	}, x, tensors.FromFlatDataAndDimensions(decoded, p.w...)))
	got, err := run(t, p, x, w, dtypes.Float32)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	testutil.Close(t, "slabbed product", got, want, testutil.Mixed(1e-4+1e-6*2048))
}
