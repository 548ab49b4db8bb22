package lowering_test

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
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/bnb"
	"github.com/quanta-ml/quanta/ggml"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/cpukernels"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/onebit"
)

// randomFormat quantizes a float weight in one format, with the constraints the format puts on
// the weight's dimensions.
type randomFormat struct {
	format // name and layout as served() reads them
	// firstMultiple: the first dimension must be a multiple of it (the signs' packed axis).
	firstMultiple int
	// lastMultiple: the last dimension must be a multiple of it (ggml's blocks).
	lastMultiple int
	// rank2Only: the format stores rank-2 weights only (bitsandbytes' flat blocks).
	rank2Only bool
	// ggmlType is the GGML block type (0 for the other formats).
	ggmlType gguf.Type
	// signsScale is the scale's dimensions of a signs weight of dims (nil: no scale).
	signsScale func(dims []int) []int
	quantize   func(w *tensors.Tensor) (lowering.Quantized, error)
}

// nf4BlockSize is block, or the largest block nf4 accepts on a last axis of dim.
func nf4BlockSize(block, dim int) int { return min(block, nf4.MaxBlockSize(dim)) }

func randomFormats() []randomFormat {
	var out []randomFormat
	for _, block := range []int{64, 32, 128, 16, 6, 34} {
		out = append(out, randomFormat{format: format{name: fmt.Sprintf("nf4/b%d", block), layout: "blockwise4"},
			quantize: func(w *tensors.Tensor) (lowering.Quantized, error) {
				return nf4.Quantize(w, nf4BlockSize(block, w.Shape().Dim(-1)))
			}})
	}
	for _, block := range []int{64, 32, 6} {
		out = append(out, randomFormat{format: format{name: fmt.Sprintf("nf4-dq/b%d", block), layout: "blockwise4-dq"},
			quantize: func(w *tensors.Tensor) (lowering.Quantized, error) {
				a, err := nf4.Quantize(w, nf4BlockSize(block, w.Shape().Dim(-1)))
				if err != nil {
					return nil, err
				}
				return nf4.DoubleQuantize(a)
			}})
	}
	for _, dq := range []bool{false, true} {
		name, layout := "bnb/b64", "blockwise4-flat"
		if dq {
			name, layout = name+"-dq", layout+"-dq"
		}
		out = append(out, randomFormat{format: format{name: name, layout: layout}, rank2Only: true,
			quantize: func(w *tensors.Tensor) (lowering.Quantized, error) {
				a, err := bnb.Quantize4bit(w, 64, dq)
				if err != nil {
					return nil, err
				}
				if !a.Format().FlatBlocks { // rows a multiple of the block: nf4's blocks, all strategies
					return nil, errSkipShape
				}
				return a, nil
			}})
	}
	out = append(out,
		randomFormat{format: format{name: "int8/last-axis", layout: "int8"},
			quantize: func(w *tensors.Tensor) (lowering.Quantized, error) { return qint8.Quantize(w) }},
		randomFormat{format: format{name: "int8/first-axis", layout: "int8"},
			quantize: func(w *tensors.Tensor) (lowering.Quantized, error) { return qint8.Quantize(w, 0) }},
		randomFormat{format: format{name: "int8/per-tensor", layout: "int8"},
			quantize: func(w *tensors.Tensor) (lowering.Quantized, error) {
				axes := make([]int, w.Shape().Rank())
				for i := range axes {
					axes[i] = i
				}
				return qint8.Quantize(w, axes...)
			}},
	)
	// The signs weights: unscaled, or with a scale per tensor, per output column ({0}: constant
	// along the packed first axis) or per (packed, free) pair ({1}).
	scaleDims := func(axes []int) func(dims []int) []int {
		return func(dims []int) []int {
			out := slices.Clone(dims)
			for i := range out {
				if len(axes) == 0 || slices.Contains(axes, i) {
					out[i] = 1
				}
			}
			return out
		}
	}
	signs := []struct {
		name, layout string
		opts         *onebit.Options
		quantize     func(*tensors.Tensor, *onebit.Options) (lowering.Quantized, error)
	}{
		{"ternary", "signs2", nil, ternary},
		{"ternary/scaled", "signs2", &onebit.Options{Scale: true, ScaleAxes: []int{0}}, ternary},
		{"ternary/scaled-tensor", "signs2", &onebit.Options{Scale: true}, ternary},
		{"ternary/scaled-rows", "signs2", &onebit.Options{Scale: true, ScaleAxes: []int{1}}, ternary},
		{"ternary/bitnet", "signs2", &onebit.Options{BitNet: true, ScaleAxes: []int{0}}, ternary},
		{"binary", "signs2", nil, func(w *tensors.Tensor, o *onebit.Options) (lowering.Quantized, error) {
			return onebit.QuantizeBinary(w, o)
		}},
		{"binary/1bit", "signs1", nil, binaryBits},
		{"binary/1bit/scaled", "signs1", &onebit.Options{Scale: true, ScaleAxes: []int{0}}, binaryBits},
	}
	for _, sg := range signs {
		f := randomFormat{format: format{name: sg.name, layout: sg.layout}, firstMultiple: 4,
			quantize: func(w *tensors.Tensor) (lowering.Quantized, error) { return sg.quantize(w, sg.opts) }}
		if sg.layout == "signs1" {
			f.firstMultiple = 8
		}
		if sg.opts != nil {
			f.signsScale = scaleDims(sg.opts.ScaleAxes)
		}
		out = append(out, f)
	}
	for _, typ := range gguf.BlockTypes() {
		out = append(out, randomFormat{format: format{name: "ggml/" + strings.ToLower(typ.String()),
			layout: "ggml-" + strings.ToLower(typ.String())}, lastMultiple: typ.BlockSize(), ggmlType: typ,
			quantize: func(w *tensors.Tensor) (lowering.Quantized, error) { return ggml.Quantize(w, typ) }})
	}
	return out
}

func ternary(w *tensors.Tensor, o *onebit.Options) (lowering.Quantized, error) {
	return onebit.QuantizeTernary(w, o)
}

func binaryBits(w *tensors.Tensor, o *onebit.Options) (lowering.Quantized, error) {
	return onebit.QuantizeBinaryBits(w, o)
}

// errSkipShape: the format stores this weight as another format of the table does.
var errSkipShape = errors.New("shape served by another format")

// withStrategy returns a (graph-side) array of any format of the table with strategy s.
func withStrategy(a implicitarray.Array, s lowering.Strategy) implicitarray.Array {
	switch a := a.(type) {
	case *nf4.Array:
		return a.WithStrategy(s)
	case *qint8.Array:
		return a.WithStrategy(s)
	case *onebit.Array:
		return a.WithStrategy(s)
	case *onebit.BitArray:
		return a.WithStrategy(s)
	case *ggml.Array:
		return a.WithStrategy(s)
	}
	panic(fmt.Sprintf("withStrategy: unexpected %T", a))
}

// randomProduct is a dot_general of activations x with a weight w, as a GoMLX user writes it.
type randomProduct struct {
	kind         string
	xDims, wDims []int
	axes         lowering.Axes
	// dtype is the activations'; wDType the float weight's that is quantized.
	dtype, wDType dtypes.DType
	// via is how the user writes it: dot_general, einsum, matmul (x·W, W·x, batched) or matmul-t
	// (x·Wᵀ as MatMul(x, Transpose(W))).
	via string
}

func (p randomProduct) String() string {
	return fmt.Sprintf("%s/x=%v/w=%v/%s/w-%s/%s", p.kind, p.xDims, p.wDims, p.dtype, p.wDType, p.via)
}

// rows is the number of activation rows (the product of x's free dimensions).
func (p randomProduct) rows() int {
	m := 1
	for i, d := range p.xDims {
		if !slices.Contains(normalizeAll(p.axes.XContracting, len(p.xDims)), i) &&
			!slices.Contains(normalizeAll(p.axes.XBatch, len(p.xDims)), i) {
			m *= d
		}
	}
	return m
}

// asCase describes p as productCase for served().
func (p randomProduct) asCase() productCase {
	rank2 := len(p.wDims) == 2 && len(p.axes.WContracting) == 1 && len(p.axes.WBatch) == 0
	return productCase{name: p.kind, xDims: p.xDims, wDims: p.wDims, axes: p.axes, rank2: rank2,
		kMajor: rank2 && normalizeAll(p.axes.WContracting, 2)[0] == 0}
}

var (
	randomRows = []int{1, 2, 3, 5, 8, 9, 17, 64, 513}
	// randomK: contracting sizes that are multiples of none of 16, 32, 64, 128, 256.
	randomK = []int{1, 3, 7, 33, 65, 100, 129, 257, 300}
	randomN = []int{1, 3, 5, 7, 13, 31}
	// randomKinds: x·W, x·Wᵀ, the weight on the left (W·x, Wᵀ·x) and a dot_general with batch axes.
	randomKinds = []string{"x@W", "x@Wt", "W@x", "Wt@x", "batched", "batched-t", "xt@W", "x-mid@Wt", "two-contracting", "rank3-free"}
)

// fitDim returns a size for axis i of a rank-r weight drawn from the ones given, made to meet
// f's constraints: a multiple of firstMultiple (an odd one) on the first axis, of lastMultiple on
// the last.
func (f randomFormat) fitDim(r *rand.Rand, i, rank int, sizes []int) int {
	d := sizes[r.IntN(len(sizes))]
	if i == rank-1 && f.lastMultiple > 1 {
		return f.lastMultiple * []int{1, 3}[r.IntN(2)]
	}
	if i == 0 && f.firstMultiple > 1 {
		return f.firstMultiple * []int{1, 3, 5, 17, 33}[r.IntN(5)]
	}
	return d
}

// newRandomProduct draws a product of kind with m activation rows for format f.
func newRandomProduct(r *rand.Rand, f randomFormat, kind string, m int, dtype dtypes.DType) randomProduct {
	p := randomProduct{kind: kind, dtype: dtype, wDType: dtypes.Float32}
	if r.IntN(3) == 0 {
		p.wDType = []dtypes.DType{dtypes.BFloat16, dtypes.Float16, dtypes.Float64}[r.IntN(3)]
	}
	// A few products with many rows of the weight for the kernels' threads to split.
	bigN := m <= 17 && r.IntN(4) == 0
	randomN := randomN
	if bigN {
		randomN = []int{1031}
	}
	lead := func() []int { // x's free dimensions, m rows in all: [m], [b, s] or none (a vector)
		switch {
		case m == 1 && r.IntN(3) == 0:
			return nil
		case r.IntN(2) == 0:
			for _, b := range []int{2, 3, 4, 8, 19} {
				if m%b == 0 && m > b {
					return []int{b, m / b}
				}
			}
		}
		return []int{m}
	}
	switch kind {
	case "x@W", "Wt@x": // W (K, N) contracted on its first axis
		k, n := f.fitDim(r, 0, 2, randomK), f.fitDim(r, 1, 2, randomN)
		p.wDims = []int{k, n}
		if kind == "x@W" {
			p.xDims = append(lead(), k)
			p.axes = lowering.Axes{XContracting: []int{-1}, WContracting: []int{0}}
		} else {
			p.xDims = []int{k, m}
			p.axes = lowering.Axes{XContracting: []int{0}, WContracting: []int{0}, WeightOnLeft: true}
		}
	case "x@Wt", "W@x": // W (N, K) contracted on its last axis
		n, k := f.fitDim(r, 0, 2, randomN), f.fitDim(r, 1, 2, randomK)
		p.wDims = []int{n, k}
		if kind == "x@Wt" {
			p.xDims = append(lead(), k)
			p.axes = lowering.Axes{XContracting: []int{-1}, WContracting: []int{1}}
		} else {
			p.xDims = []int{k, m}
			p.axes = lowering.Axes{XContracting: []int{0}, WContracting: []int{1}, WeightOnLeft: true}
		}
	case "xt@W": // x (K, M) contracted on its first axis, W (K, N)
		k, n := f.fitDim(r, 0, 2, randomK), f.fitDim(r, 1, 2, randomN)
		p.wDims, p.xDims = []int{k, n}, []int{k, m}
		p.axes = lowering.Axes{XContracting: []int{0}, WContracting: []int{0}}
	case "x-mid@Wt": // x (B, K, S) contracted on its middle axis, W (N, K)
		n, k := f.fitDim(r, 0, 2, randomN), f.fitDim(r, 1, 2, randomK)
		b := 1
		for _, d := range []int{2, 3, 8} {
			if m%d == 0 && m > d {
				b = d
				break
			}
		}
		p.wDims, p.xDims = []int{n, k}, []int{b, k, m / b}
		p.axes = lowering.Axes{XContracting: []int{1}, WContracting: []int{-1}}
	case "two-contracting": // x (M, K1, K2), W (K1, K2, N)
		k1, k2, n := f.fitDim(r, 0, 3, []int{1, 3, 5}), f.fitDim(r, 1, 3, randomK), f.fitDim(r, 2, 3, randomN)
		p.wDims, p.xDims = []int{k1, k2, n}, append(lead(), k1, k2)
		nx := len(p.xDims)
		p.axes = lowering.Axes{XContracting: []int{nx - 2, nx - 1}, WContracting: []int{0, 1}}
	case "rank3-free": // x (M, K), W (K, N1, N2)
		k, n1, n2 := f.fitDim(r, 0, 3, randomK), f.fitDim(r, 1, 3, []int{2, 3}), f.fitDim(r, 2, 3, randomN)
		p.wDims, p.xDims = []int{k, n1, n2}, append(lead(), k)
		p.axes = lowering.Axes{XContracting: []int{-1}, WContracting: []int{0}}
	case "batched": // x (B, M, K), W (B, K, N): batch on the first axes
		b := f.fitDim(r, 0, 3, []int{2, 3})
		k, n := f.fitDim(r, 1, 3, randomK), f.fitDim(r, 2, 3, randomN)
		p.wDims, p.xDims = []int{b, k, n}, []int{b, m, k}
		p.axes = lowering.Axes{XContracting: []int{2}, XBatch: []int{0}, WContracting: []int{1}, WBatch: []int{0}}
	case "batched-t": // x (M, B, K), W (K, B, N)... as x·Wᵀ: W (N, B, K), batch on the middle axes
		n := f.fitDim(r, 0, 3, randomN)
		b, k := 3, f.fitDim(r, 2, 3, randomK)
		p.wDims, p.xDims = []int{n, b, k}, []int{m, b, k}
		p.axes = lowering.Axes{XContracting: []int{-1}, XBatch: []int{1}, WContracting: []int{-1}, WBatch: []int{1}}
	}
	// Axes as the user may write them: negative or not.
	signed := func(axes []int, rank int) []int {
		out := normalizeAll(axes, rank)
		for i := range out {
			if r.IntN(2) == 0 {
				out[i] -= rank
			}
		}
		return out
	}
	a := &p.axes
	a.XContracting, a.XBatch = signed(a.XContracting, len(p.xDims)), signed(a.XBatch, len(p.xDims))
	a.WContracting, a.WBatch = signed(a.WContracting, len(p.wDims)), signed(a.WBatch, len(p.wDims))
	vias := []string{"dot_general", "einsum"}
	switch kind {
	case "x@W", "W@x", "batched":
		vias = append(vias, "matmul")
	case "x@Wt":
		if f.firstMultiple == 0 { // a signs weight transposed re-packs its first axis, or materializes
			vias = append(vias, "matmul-t")
		}
	}
	p.via = vias[r.IntN(len(vias))]
	return p
}

// equation writes p as an einsum equation whose output has DotGeneral's layout.
func (p randomProduct) equation() string {
	letters := "abcdefghijklmnopqrstuvwxyz"
	next := 0
	label := func() byte { next++; return letters[next-1] }
	a := p.axes
	xl, wl := make([]byte, len(p.xDims)), make([]byte, len(p.wDims))
	xc, xb := normalizeAll(a.XContracting, len(p.xDims)), normalizeAll(a.XBatch, len(p.xDims))
	wc, wb := normalizeAll(a.WContracting, len(p.wDims)), normalizeAll(a.WBatch, len(p.wDims))
	var batch []byte
	for i := range xb {
		xl[xb[i]] = label()
		wl[wb[i]] = xl[xb[i]]
		batch = append(batch, xl[xb[i]])
	}
	for i := range xc {
		xl[xc[i]] = label()
		wl[wc[i]] = xl[xc[i]]
	}
	var xFree, wFree []byte
	for i := range xl {
		if xl[i] == 0 {
			xl[i] = label()
			xFree = append(xFree, xl[i])
		}
	}
	for i := range wl {
		if wl[i] == 0 {
			wl[i] = label()
			wFree = append(wFree, wl[i])
		}
	}
	if a.WeightOnLeft {
		return fmt.Sprintf("%s,%s->%s%s%s", wl, xl, batch, wFree, xFree)
	}
	return fmt.Sprintf("%s,%s->%s%s%s", xl, wl, batch, xFree, wFree)
}

// servedBy restates which strategies serve p for f (package lowering's documentation; GGML's as
// package ggml's tests restate it).
func servedBy(s lowering.Strategy, f randomFormat, p randomProduct, kernels bool) bool {
	c := p.asCase()
	if p.via == "matmul-t" && f.layout == "int8" { // int8's transpose moves the codes: x·W
		c.kMajor = true
	}
	if f.ggmlType != 0 {
		switch s {
		case lowering.Auto, lowering.Materialize, lowering.DecodeDot:
			return true
		case lowering.MulReduce:
			return c.rank2
		case lowering.Kernel:
			return kernels && c.rank2 && !c.kMajor && (p.dtype == dtypes.Float32 || p.dtype == dtypes.BFloat16)
		}
		return false
	}
	if s == lowering.Kernel && p.wDType == dtypes.Float64 && (f.layout == "blockwise4" || f.layout == "int8") {
		return false // a float64 scale accumulates in float64: not the kernels' float32
	}
	if strings.HasPrefix(f.layout, "signs") {
		var scale []int
		if f.signsScale != nil {
			scale = f.signsScale(p.wDims)
		}
		contracting := normalizeAll(p.axes.WContracting, len(p.wDims))
		free := freeOf(len(p.wDims), contracting, normalizeAll(p.axes.WBatch, len(p.wDims)))
		varies := func(axes []int) bool {
			return slices.ContainsFunc(axes, func(a int) bool { return scale[a] != 1 })
		}
		switch s {
		case lowering.SlicedSum: // the packed axis contracted, a scale constant along one side
			return p.dtype.IsFloat() && slices.Contains(contracting, 0) && (scale == nil || !varies(contracting) || !varies(free))
		case lowering.Kernel: // x·W, no scale or one per tensor or per output column
			return kernels && c.kMajor && (p.dtype == dtypes.Float32 || p.dtype == dtypes.BFloat16) &&
				(scale == nil || scale[0] == 1)
		}
	}
	return served(s, f.format, c, p.dtype, kernels)
}

// hostDotGeneral is graph.DotGeneral of a and b in float64 on the host, with Σ|a||b| per output.
func hostDotGeneral(a []float64, aDims, aContracting, aBatch []int, b []float64, bDims, bContracting, bBatch []int) (out, mag []float64, dims []int) {
	aC, aB := normalizeAll(aContracting, len(aDims)), normalizeAll(aBatch, len(aDims))
	bC, bB := normalizeAll(bContracting, len(bDims)), normalizeAll(bBatch, len(bDims))
	aF, bF := freeOf(len(aDims), aC, aB), freeOf(len(bDims), bC, bB)
	strides := func(dims []int) []int {
		s := make([]int, len(dims))
		acc := 1
		for i := len(dims) - 1; i >= 0; i-- {
			s[i] = acc
			acc *= dims[i]
		}
		return s
	}
	aS, bS := strides(aDims), strides(bDims)
	size := func(dims, axes []int) int {
		n := 1
		for _, ax := range axes {
			n *= dims[ax]
		}
		return n
	}
	// offsets enumerates the flat offsets of the index space of axes (row-major).
	offsets := func(dims, str, axes []int) []int {
		offs := []int{0}
		for _, ax := range axes {
			next := make([]int, 0, len(offs)*dims[ax])
			for _, o := range offs {
				for i := range dims[ax] {
					next = append(next, o+i*str[ax])
				}
			}
			offs = next
		}
		return offs
	}
	for _, ax := range aB {
		dims = append(dims, aDims[ax])
	}
	for _, ax := range aF {
		dims = append(dims, aDims[ax])
	}
	for _, ax := range bF {
		dims = append(dims, bDims[ax])
	}
	aBO, bBO := offsets(aDims, aS, aB), offsets(bDims, bS, bB)
	aFO, bFO := offsets(aDims, aS, aF), offsets(bDims, bS, bF)
	aCO, bCO := offsets(aDims, aS, aC), offsets(bDims, bS, bC)
	n := size(aDims, aB) * len(aFO) * len(bFO)
	out, mag = make([]float64, 0, n), make([]float64, 0, n)
	for bi := range aBO {
		for _, af := range aFO {
			for _, bf := range bFO {
				sum, m := 0.0, 0.0
				for ci := range aCO {
					x, y := a[aBO[bi]+af+aCO[ci]], b[bBO[bi]+bf+bCO[ci]]
					sum += x * y
					m += math.Abs(x * y)
				}
				out, mag = append(out, sum), append(mag, m)
			}
		}
	}
	return out, mag, dims
}

func freeOf(rank int, contracting, batch []int) []int {
	var free []int
	for a := range rank {
		if !slices.Contains(contracting, a) && !slices.Contains(batch, a) {
			free = append(free, a)
		}
	}
	return free
}

// x8RouteRows is how many rows GGML's kernels multiply with 8-bit activations, per type (package
// cpukernels' numerical contract).
func x8RouteRows(t gguf.Type) int {
	switch {
	case !slices.Contains(integerRouteTypes, t):
		return 0
	case t == gguf.TypeQ4_0:
		return 2
	}
	return integerRouteRows
}

// TestRandomProducts: quantized products on shapes nobody chose, against the float64 product of
// the weight as the format materializes it. For every format of the table (NF4 with block sizes
// 6 to 128, double-quantized, bitsandbytes' flat blocks; int8 per row, per column and per tensor;
// ternary, binary and 1-bit signs, unscaled and with a scale per tensor, per column or per
// element pair, BitNet's; every GGML block type), a seeded draw of products: x·W, x·Wᵀ, xᵀ·W, the
// weight on the left, x contracted on a middle axis, two contracting axes, a rank-3 weight,
// dot_general with batch axes, axes negative or not; 1 to 513 activation rows as a matrix, a [B, S, K] batch or a vector;
// contracting sizes that are multiples of no block size where the format allows a partial block,
// 1, 3 or 1031 output columns; float32, bfloat16 and float16 activations (bfloat16 for float16 on
// the pure-Go backend, which has none), a weight quantized from float32, bfloat16, float16 or
// float64; written as the user would (DotGeneral, Einsum, MatMul, MatMul of a transpose). Auto
// and every strategy run in one graph: each strategy the documentation says serves the product
// must build and be within a tolerance relative to Σ|x||w| per output (the result's dtype, float32
// accumulation, a 16-bit weight's rounding, the GGML kernels' 8-bit activations), the others must
// refuse it with ErrUnsupported naming what they serve; the outputs keep their bits with 1 and 2
// kernel threads and on every call. QUANTA_TEST_ALL=1 draws four times as many products.
func TestRandomProducts(t *testing.T) {
	backend := testutil.Backend(t)
	kernels := lowering.PlatformOf(backend)&lowering.Kernels != 0
	isGo := backend.String() == "go"
	perFormat := 3
	if os.Getenv(testutil.TestAllEnv) == "1" {
		perFormat = 12
	}
	defer cpukernels.SetThreads(0)
	strategies := append([]lowering.Strategy{lowering.Auto}, lowering.Strategies()...)
	xDTypes := []dtypes.DType{dtypes.Float32, dtypes.BFloat16, dtypes.Float16}
	for fi, f := range randomFormats() {
		r := rand.New(rand.NewPCG(uint64(fi)+1, 77))
		for i := range perFormat {
			kinds := randomKinds
			if f.rank2Only {
				kinds = []string{"x@W", "x@Wt", "W@x", "Wt@x", "xt@W", "x-mid@Wt"}
			}
			kind := kinds[(fi+i)%len(kinds)]
			m := randomRows[(3*fi+i*5)%len(randomRows)]
			dtype := xDTypes[(fi+2*i)%len(xDTypes)]
			p := newRandomProduct(r, f, kind, m, dtype)
			if isGo { // the pure-Go backend runs no float16 products
				p.dtype, p.wDType = noFloat16(p.dtype), noFloat16(p.wDType)
			}
			t.Run(fmt.Sprintf("%s/%s", f.name, p), func(t *testing.T) {
				checkRandomProduct(t, f, p, strategies, kernels, r)
			})
		}
	}
}

// xRows returns the activations of a product with one contracting axis and no batch axes as
// rows of the contracting axis: (M, K), the rows in the order of x's free axes.
func xRows(x []float64, p randomProduct) []float64 {
	c := normalizeAll(p.axes.XContracting, len(p.xDims))[0]
	stride := 1
	for _, d := range p.xDims[c+1:] {
		stride *= d
	}
	k, inner := p.xDims[c], stride
	out := make([]float64, 0, len(x))
	for outer := 0; outer < len(x); outer += k * inner {
		for i := range inner {
			for l := range k {
				out = append(out, x[outer+l*inner+i])
			}
		}
	}
	return out
}

// transposed returns the (r, c) row-major matrix a as (c, r).
func transposed(a []float64, r, c int) []float64 {
	out := make([]float64, len(a))
	for i := range r {
		for j := range c {
			out[j*r+i] = a[i*c+j]
		}
	}
	return out
}

func checkRandomProduct(t *testing.T, f randomFormat, p randomProduct, strategies []lowering.Strategy, kernels bool, r *rand.Rand) {
	backend := testutil.Backend(t)
	isGo := backend.String() == "go"
	weight := asDType(testutil.NormalTensor(r, p.wDims...), p.wDType)
	q, err := f.quantize(weight)
	if errors.Is(err, errSkipShape) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("quantize %v: %+v", p.wDims, err)
	}
	x32 := testutil.NormalTensor(r, p.xDims...)

	// Which strategies build: a graph per strategy, never compiled.
	var built []lowering.Strategy
	for _, s := range strategies {
		err := buildOnly(t, q, x32, p, s)
		want := servedBy(s, f, p, kernels)
		switch {
		case err == nil && want:
			built = append(built, s)
		case err == nil:
			t.Errorf("%s: built, but the documentation says it does not serve this product", s)
		case want:
			t.Errorf("%s: refused a product the documentation says it serves: %v", s, err)
		case !errors.Is(err, lowering.ErrUnsupported) || !strings.Contains(err.Error(), s.String()+" serves"):
			t.Errorf("%s: want a panic with ErrUnsupported naming %s and what it serves, got %v", s, s, err)
		}
	}

	t.Logf("strategies built: %v", built)

	// One graph: the activations in their dtype, the weight materialized, every product that builds.
	e, err := implicitarray.NewExec(backend, func(x *graph.Node, w implicitarray.Array) []*graph.Node {
		x = graph.ConvertDType(x, p.dtype)
		outs := []*graph.Node{graph.ConvertDType(x, dtypes.Float64), graph.ConvertDType(implicitarray.Materialize(w), dtypes.Float64)}
		for _, s := range built {
			outs = append(outs, randomDot(x, withStrategy(w, s), p))
		}
		return outs
	})
	if err != nil {
		t.Fatalf("%+v", err)
	}
	defer e.Finalize()
	call := func() []*tensors.Tensor {
		out, err := e.Call1(x32, q)
		if err != nil {
			t.Fatalf("%+v", err)
		}
		return out.([]*tensors.Tensor)
	}
	outs := call()
	x, w := testutil.Float64s(t, outs[0]), testutil.Float64s(t, outs[1])
	var want, mag []float64
	var dims []int
	if p.axes.WeightOnLeft {
		want, mag, dims = hostDotGeneral(w, p.wDims, p.axes.WContracting, p.axes.WBatch, x, p.xDims, p.axes.XContracting, p.axes.XBatch)
	} else {
		want, mag, dims = hostDotGeneral(x, p.xDims, p.axes.XContracting, p.axes.XBatch, w, p.wDims, p.axes.WContracting, p.axes.WBatch)
	}
	k := 1
	for _, a := range normalizeAll(p.axes.WContracting, len(p.wDims)) {
		k *= p.wDims[a]
	}
	// Tolerance relative to Σ|x||w|: the result's rounding to its dtype, and float32 accumulation.
	// float16 results below 2^-14 are subnormal: their rounding is absolute, up to 2^-25.
	rel, abs := 0x1p-22*float64(k), 1e-30
	switch p.dtype {
	case dtypes.BFloat16:
		rel += 0x1p-7
	case dtypes.Float16:
		rel, abs = rel+0x1p-9, 0x1p-24
	default:
		rel += 0x1p-21
	}
	// A weight that materializes in 16 bits is its values rounded to them (the codebook value and
	// the product, for NF4; the pure-Go backend truncates to bfloat16), which the fused formulations
	// (scales on the output, decodes in float32) need not do.
	switch p.wDType {
	case dtypes.BFloat16:
		rel += 0x1p-7
		if isGo {
			rel += 0x1p-7
		}
	case dtypes.Float16:
		rel += 0x1p-10
	}
	var slack []float64 // GGML's kernels round a few rows of activations to 8 bits
	if n := x8RouteRows(f.ggmlType); kernels && n > 0 && p.rows() <= n && servedBy(lowering.Kernel, f, p, kernels) {
		slack = x8Bound(xRows(x, p), w, p.rows(), k, p.wDims[0], f.ggmlType.BlockSize())
		if p.axes.WeightOnLeft { // the output is (N, M)
			slack = transposed(slack, p.rows(), p.wDims[0])
		}
	}
	for i, s := range built {
		got := outs[2+i]
		if got.DType() != p.dtype || !slices.Equal(got.Shape().Dimensions, dims) {
			t.Errorf("%s: result %s, want %s%v", s, got.Shape(), p.dtype, dims)
			continue
		}
		values := testutil.Float64s(t, got)
		bad := 0
		for j := range want {
			tol := rel*mag[j] + abs
			if slack != nil && (s == lowering.Kernel || s == lowering.Auto) {
				tol += slack[j]
			}
			if d := math.Abs(values[j] - want[j]); !(d <= tol) {
				if bad < 3 {
					t.Errorf("%s: output %d = %g, want %g (diff %.3g, tolerance %.3g, Σ|x||w| %.3g)", s, j, values[j], want[j], d, tol, mag[j])
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d outputs out of tolerance", s, bad, len(want))
		}
	}

	// The same bits with 1 and 2 kernel threads and on every call.
	for _, threads := range []int{1, 2, 2, 0} {
		cpukernels.SetThreads(threads)
		again := call()
		for i, s := range built {
			if !sameBits(t, outs[2+i], again[2+i]) {
				t.Errorf("%s: result with %d kernel threads differs from the first call's", s, cpukernels.Threads())
			}
		}
	}
}

// randomDot is the user's product: implicitarray.DotGeneral with the weight on its side.
func randomDot(x *graph.Node, w implicitarray.Array, p randomProduct) *graph.Node {
	a := p.axes
	switch p.via {
	case "einsum":
		if a.WeightOnLeft {
			return implicitarray.Materialize(implicitarray.Einsum(p.equation(), w, x))
		}
		return implicitarray.Materialize(implicitarray.Einsum(p.equation(), x, w))
	case "matmul":
		if a.WeightOnLeft {
			return implicitarray.Materialize(implicitarray.MatMul(w, x))
		}
		return implicitarray.Materialize(implicitarray.MatMul(x, w))
	case "matmul-t":
		return implicitarray.Materialize(implicitarray.MatMul(x, implicitarray.TransposeAllAxes(w, 1, 0)))
	}
	if a.WeightOnLeft {
		return implicitarray.Materialize(implicitarray.DotGeneral(w, a.WContracting, a.WBatch, x, a.XContracting, a.XBatch))
	}
	return implicitarray.Materialize(implicitarray.DotGeneral(x, a.XContracting, a.XBatch, w, a.WContracting, a.WBatch))
}

// buildOnly builds p with strategy s in a graph that is never compiled, returning its panic.
func buildOnly(t *testing.T, q lowering.Quantized, x *tensors.Tensor, p randomProduct, s lowering.Strategy) (err error) {
	defer testutil.RecoverError(&err)
	g := graph.NewGraph(testutil.Backend(t), "build-only")
	xn := graph.ConvertDType(graph.Parameter(g, "x", shapes.Make(dtypes.Float32, x.Shape().Dimensions...)), p.dtype)
	randomDot(xn, withStrategy(implicitarray.OnGraph(g, q), s), p)
	return nil
}

func noFloat16(dtype dtypes.DType) dtypes.DType {
	if dtype == dtypes.Float16 {
		return dtypes.BFloat16
	}
	return dtype
}

// asDType returns the float32 tensor x in dtype (testutil.InDType).
func asDType(x *tensors.Tensor, dtype dtypes.DType) *tensors.Tensor {
	return testutil.InDType(dtype, tensors.MustCopyFlatData[float32](x), x.Shape().Dimensions...)
}

func sameBits(t *testing.T, a, b *tensors.Tensor) bool {
	x, y := testutil.Float64s(t, a), testutil.Float64s(t, b)
	for i := range x {
		if math.Float64bits(x[i]) != math.Float64bits(y[i]) && !(math.IsNaN(x[i]) && math.IsNaN(y[i])) {
			return false
		}
	}
	return len(x) == len(y)
}

// TestKernelScaleDType: a Blockwise4 or Int8 weight with float64 scales accumulates in float64,
// which the kernels do not: Kernel, forced, refuses it with a message naming the scales it takes,
// and Auto serves it.
func TestKernelScaleDType(t *testing.T) {
	needKernels(t)
	weight := asDType(testutil.RandomTensor(3, 65, 7), dtypes.Float64)
	x := testutil.RandomTensor(4, 3, 65)
	p := randomProduct{kind: "x@W", xDims: []int{3, 65}, wDims: []int{65, 7}, dtype: dtypes.Float32, wDType: dtypes.Float64,
		via: "dot_general", axes: lowering.Axes{XContracting: []int{1}, WContracting: []int{0}}}
	for name, w := range map[string]lowering.Quantized{"nf4": nf4.MustQuantize(weight, 64), "int8": qint8.MustQuantize(weight)} {
		t.Run(name, func(t *testing.T) {
			err := buildOnly(t, w, x, p, lowering.Kernel)
			if !errors.Is(err, lowering.ErrUnsupported) || !strings.Contains(err.Error(), "float32, bfloat16 or float16 scales") {
				t.Errorf("Kernel with float64 scales: want ErrUnsupported naming the scales accepted, got %v", err)
			}
			if err := buildOnly(t, w, x, p, lowering.Auto); err != nil {
				t.Errorf("Auto: %v", err)
			}
		})
	}
}
