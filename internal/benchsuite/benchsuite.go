// Package benchsuite is what the benchmarks of quantized products share: the formats measured
// against dense, weights streamed from memory, the graph contexts of real models and the read
// bandwidth the products are judged by. The suite driver (command bench, `make bench`) and the
// testing.B benchmarks beside the code (lowering's BenchmarkProducts) are built on it.
//
// Dense float weights come in two layouts, both measured as baselines: Dense stores a weight
// (K, N), GoMLX's layers.Dense layout, its products lowering.DenseMatMul's; DenseTransposed stores
// it (N, K), PyTorch's Linear.weight layout, its products x·Wᵀ by lowering.DenseMatMulTransposed.
// Neither is faster everywhere, so a speed-up is quoted against the faster of the two (DenseNames).
package benchsuite

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/ggml"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/benchflags"
	"github.com/quanta-ml/quanta/internal/cpukernels"
	"github.com/quanta-ml/quanta/internal/hostdata"
	"github.com/quanta-ml/quanta/internal/kernelreg"
	"github.com/quanta-ml/quanta/internal/parallel"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/onebit"
	"github.com/quanta-ml/quanta/runtime"
)

// The dense float baselines, by name.
const (
	// Dense stores a float weight as it is, (K, N); its products are lowering.DenseMatMul's.
	Dense = "dense"
	// DenseTransposed stores a float weight (K, N) transposed, (N, K); its products are x·Wᵀ by
	// lowering.DenseMatMulTransposed.
	DenseTransposed = "dense-t"
)

// DenseNames lists the dense layouts, Dense first: every speed-up is relative to the faster of
// them on the same context, shape and rows.
func DenseNames() []string { return []string{Dense, DenseTransposed} }

// Format is one way of storing the weights: a dense layout (no Quantize; Dense or
// DenseTransposed, told apart by Name), or a quantizer with the strategy its products are built
// with (lowering.Auto unless forced).
type Format struct {
	Name     string
	Quantize func(t *tensors.Tensor, s lowering.Strategy) (implicitarray.Array, error)
	Strategy lowering.Strategy
}

// Same reports whether f and g measure the same thing: the same format with the same strategy,
// however the strategy was spelled (nf4@Kernel is nf4@kernel, nf4@auto is nf4).
func (f Format) Same(g Format) bool {
	base := func(h Format) string { b, _, _ := strings.Cut(h.Name, "@"); return b }
	return base(f) == base(g) && f.Strategy == g.Strategy
}

func viaConfig(cfg quanta.Config) quantizer {
	return func(t *tensors.Tensor, s lowering.Strategy) (implicitarray.Array, error) {
		cfg.Strategy = s
		return quanta.Quantize(t, cfg)
	}
}

// quantizer stores a float weight in a format, its products built by the strategy.
type quantizer = func(*tensors.Tensor, lowering.Strategy) (implicitarray.Array, error)

// quantizers are the quantized formats, by name: those below and the GGML block types.
var quantizers = withGGML(map[string]quantizer{
	"nf4":     viaConfig(quanta.Config{Type: quanta.NF4}),
	"int8":    viaConfig(quanta.Config{Type: quanta.Int8}),
	"ternary": viaConfig(quanta.Config{Type: quanta.Ternary}),
	"binary1": func(t *tensors.Tensor, s lowering.Strategy) (implicitarray.Array, error) {
		a, err := onebit.QuantizeBinaryBits(t, nil)
		if err != nil {
			return nil, err
		}
		return a.WithStrategy(s), nil
	},
})

// ggmlTypes are the GGML block formats by name: stored as a GGUF file stores a linear weight,
// (N, K) with the blocks along K, so their products are x·Wᵀ.
var ggmlTypes = map[string]gguf.Type{
	"q4_0": gguf.TypeQ4_0, "q4_1": gguf.TypeQ4_1, "q5_0": gguf.TypeQ5_0, "q5_1": gguf.TypeQ5_1,
	"q8_0": gguf.TypeQ8_0, "q2_k": gguf.TypeQ2_K, "q3_k": gguf.TypeQ3_K, "q4_k": gguf.TypeQ4_K,
	"q5_k": gguf.TypeQ5_K, "q6_k": gguf.TypeQ6_K,
}

// withGGML adds the GGML block types to quantizers.
func withGGML(quantizers map[string]quantizer) map[string]quantizer {
	for name, typ := range ggmlTypes {
		quantizers[name] = quantizeGGML(typ)
	}
	return quantizers
}

// quantizeGGML stores the (K, N) weight t transposed, in typ, materializing in t's dtype.
func quantizeGGML(typ gguf.Type) quantizer {
	return func(t *tensors.Tensor, s lowering.Strategy) (implicitarray.Array, error) {
		values, ok := hostdata.Float32s(t)
		if !ok || t.Rank() != 2 {
			return nil, fmt.Errorf("benchsuite: GGML weights are float matrices, got %s", t.Shape())
		}
		k, n := t.Shape().Dim(0), t.Shape().Dim(1)
		transposed := tensors.FromShape(shapes.Make(dtypes.Float32, n, k))
		defer func() { _ = transposed.FinalizeAll() }()
		tensors.MustMutableFlatData(transposed, func(out []float32) { hostdata.Transpose(values, out, k, n, nil) })
		a, err := ggml.Quantize(transposed, typ)
		if err != nil {
			return nil, err
		}
		return a.WithDType(t.DType()).WithStrategy(s), nil
	}
}

// QuantizedNames lists the quantized formats measured by default: nf4, int8, ternary (2-bit),
// binary1 (1-bit).
func QuantizedNames() []string { return []string{"nf4", "int8", "ternary", "binary1"} }

// GGMLNames lists the GGML block formats (q4_0 … q6_k), measured when named.
func GGMLNames() []string {
	names := slices.Collect(maps.Keys(ggmlTypes))
	slices.Sort(names)
	return names
}

// IsDense reports whether f is one of the dense layouts (DenseNames).
func (f Format) IsDense() bool { return f.Quantize == nil }

// ParseFormat reads "name" or "name@strategy" (a lowering.Strategy name), or a dense layout
// (DenseNames, without a strategy).
func ParseFormat(s string) (Format, error) {
	s = strings.TrimSpace(s)
	if slices.Contains(DenseNames(), s) {
		return Format{Name: s}, nil
	}
	base, strategy, forced := strings.Cut(s, "@")
	quantize, ok := quantizers[base]
	if !ok {
		return Format{}, fmt.Errorf("unknown format %q; accepted: %s, each with an optional @strategy",
			s, strings.Join(append(QuantizedNames(), GGMLNames()...), ", "))
	}
	f := Format{Name: s, Quantize: quantize}
	if forced {
		st, err := lowering.ParseStrategy(strategy)
		if err != nil {
			return Format{}, err
		}
		f.Strategy = st
	}
	return f, nil
}

// Check returns the error f's quantizer gives for a weight of shape s in dtype, nil for a dense
// layout: a shape the format cannot store (a dimension that is not a multiple of its block or of
// the values its layout packs a byte), found before anything is measured. It quantizes one zero
// weight of that shape.
func Check(f Format, s benchflags.Shape, dtype dtypes.DType) error {
	if f.IsDense() {
		return nil
	}
	t := tensors.FromShape(shapes.Make(dtype, s.K, s.N))
	defer func() { _ = t.FinalizeAll() }()
	a, err := f.Quantize(t, f.Strategy)
	if err != nil {
		return err
	}
	if d, ok := a.(interface{ Delete() }); ok {
		d.Delete()
	}
	return nil
}

// Weights are the distinct weights of one format for one measurement: the values the graph takes
// and the stored bytes per product (averaged over the products).
type Weights struct {
	Values []implicitarray.Value
	Bytes  float64
}

// WithStrategy returns the same weights (sharing their storage) with products built by strategy
// s; dense weights are returned as they are.
func (w *Weights) WithStrategy(s lowering.Strategy) *Weights {
	out := &Weights{Bytes: w.Bytes, Values: make([]implicitarray.Value, len(w.Values))}
	for i, v := range w.Values {
		switch a := v.(type) {
		case *nf4.Array:
			v = a.WithStrategy(s)
		case *qint8.Array:
			v = a.WithStrategy(s)
		case *onebit.Array:
			v = a.WithStrategy(s)
		case *onebit.BitArray:
			v = a.WithStrategy(s)
		case *ggml.Array:
			v = a.WithStrategy(s)
		}
		out.Values[i] = v
	}
	return out
}

// Release frees the weights' host memory.
func (w *Weights) Release() {
	for _, v := range w.Values {
		switch x := v.(type) {
		case *tensors.Tensor:
			_ = x.FinalizeAll()
		case interface{ Delete() }:
			x.Delete()
		}
	}
}

// randomWeight is a (K, N) weight of uniform values with variance 2/K (He's, so a relu chain
// keeps its scale), seeded by its shape, index and stretch of randomBlock values: the same in
// every run, whatever the number of goroutines filling it.
func randomWeight(s benchflags.Shape, index int) *tensors.Tensor {
	const randomBlock = 1 << 16
	bound := float32(math.Sqrt(6 / float64(s.K)))
	t := tensors.FromShape(shapes.Make(dtypes.Float32, s.K, s.N))
	t.MustMutableFlatData(func(flat any) {
		f := flat.([]float32)
		blocks := (len(f) + randomBlock - 1) / randomBlock
		parallel.Chunks(blocks, parallel.Workers(blocks, 16), func(from, to int) {
			for b := from; b < to; b++ {
				rng := rand.New(rand.NewPCG(uint64(s.K)<<32|uint64(s.N), uint64(index)<<32|uint64(b)))
				for j := b * randomBlock; j < min(len(f), (b+1)*randomBlock); j++ {
					f[j] = bound * (2*rng.Float32() - 1)
				}
			}
		})
	})
	return t
}

// Prepare makes enough distinct weights of f, cycling through shapes, that one call streams at
// least streamBytes of stored weights (every call then reads them from memory, not a cache): at
// most maxLayers weights, an even count so that a chain ends where it began.
func Prepare(backend backends.Backend, f Format, shapes []benchflags.Shape, dtype dtypes.DType, streamBytes int64,
	maxLayers int) (*Weights, error) {
	w := &Weights{}
	convert := converter(backend, dtype)
	defer convert.Finalize()
	var total float64
	for i := 0; i < maxLayers && (total < float64(streamBytes) || i%len(shapes) != 0 || i < 2); i++ {
		s := shapes[i%len(shapes)]
		float := randomWeight(s, i/len(shapes))
		var v implicitarray.Value
		var bytes int64
		if f.IsDense() {
			v, bytes = denseWeight(f, float, dtype, convert), int64(s.K*s.N*dtype.Size())
		} else {
			if dtype != dtypes.Float32 {
				// A bfloat16 model stores (and quantizes) bfloat16 weights.
				half := convert.MustExec1(float)
				_ = float.FinalizeAll()
				float = half
			}
			a, err := f.Quantize(float, f.Strategy)
			_ = float.FinalizeAll()
			if err != nil {
				w.Release()
				return nil, err
			}
			v, bytes = a, a.(interface{ Bytes() int64 }).Bytes()
		}
		w.Values = append(w.Values, v)
		total += float64(bytes)
	}
	w.Bytes = total / float64(len(w.Values))
	return w, nil
}

// denseWeight stores the float32 weight float (K, N) in the dense layout f and in dtype, converted
// by convert, taking float over: the stored tensor, or for DenseTransposed the tensor (N, K)
// wrapped as a transposedDense.
func denseWeight(f Format, float *tensors.Tensor, dtype dtypes.DType, convert *graph.Exec) implicitarray.Value {
	if f.Name == DenseTransposed {
		transposed := hostdata.Transposed(float)
		_ = float.FinalizeAll()
		float = transposed
	}
	if dtype != dtypes.Float32 {
		converted := convert.MustExec1(float)
		_ = float.FinalizeAll()
		float = converted
	}
	if f.Name == DenseTransposed {
		return &transposedDense{stored: implicitarray.TensorComponent(float)}
	}
	return float
}

// transposedDense is a float weight W (K, N) stored transposed, (N, K), as DenseTransposed stores
// it: an implicit array only so that Graph can tell it from a Dense weight, its products x·Wᵀ of
// the stored tensor (lowering.DenseMatMulTransposed).
type transposedDense struct {
	stored implicitarray.Component
}

var _ implicitarray.Array = (*transposedDense)(nil)

// Shape is W's, (K, N).
func (t *transposedDense) Shape() shapes.Shape {
	s := t.stored.Shape()
	return shapes.Make(s.DType, s.Dim(1), s.Dim(0))
}

// Components is the stored tensor (N, K).
func (t *transposedDense) Components() []implicitarray.Component {
	return []implicitarray.Component{t.stored}
}

// Metadata is empty: the layout is the type.
func (t *transposedDense) Metadata() string { return "" }

// WithComponents returns the weight stored in components[0].
func (t *transposedDense) WithComponents(components []implicitarray.Component) implicitarray.Array {
	return &transposedDense{stored: components[0]}
}

// Materialize is W, the stored tensor transposed.
func (t *transposedDense) Materialize() implicitarray.Value {
	return graph.Transpose(t.stored.Node(), 0, 1)
}

// Delete frees the stored host tensor.
func (t *transposedDense) Delete() { _ = t.stored.Tensor().FinalizeAll() }

// converter returns an executable converting tensors to dtype, compiled once per shape (a
// compilation per weight costs an accelerator's preparation more than the weights themselves).
func converter(backend backends.Backend, dtype dtypes.DType) *graph.Exec {
	return graph.MustNewExec(backend, func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtype) })
}

// The graph contexts of real models.
const (
	// Chain is y = relu(y·W_i) through the weights, as the up- and down-projections of an MLP.
	Chain = "chain"
	// Add is y = Σ_i x·W_i, every product's output feeding an add, as a residual connection's.
	Add = "add"
)

// Graph returns the graph function of a context.
func Graph(context string) func(x *graph.Node, ws []implicitarray.Value) *graph.Node {
	product := func(x *graph.Node, w implicitarray.Value) *graph.Node {
		switch w := w.(type) {
		case *graph.Node:
			return lowering.DenseMatMul(x, w) // the dense product of a float projection stored (K, N)
		case *transposedDense:
			return lowering.DenseMatMulTransposed(x, w.stored.Node()) // of one stored (N, K)
		case *ggml.Array:
			return implicitarray.Materialize(implicitarray.Einsum("mk,nk->mn", x, w))
		}
		return implicitarray.Materialize(implicitarray.MatMul(x, w))
	}
	if context == Chain {
		return func(x *graph.Node, ws []implicitarray.Value) *graph.Node {
			y := x
			for _, w := range ws {
				y = graph.Max(product(y, w), graph.ScalarZero(y.Graph(), y.DType()))
			}
			return y
		}
	}
	return func(x *graph.Node, ws []implicitarray.Value) *graph.Node {
		var y *graph.Node
		for _, w := range ws {
			if p := product(x, w); y == nil {
				y = p
			} else {
				y = graph.Add(y, p)
			}
		}
		return y
	}
}

// Activations returns fixed (m, k) activations in dtype.
func Activations(backend backends.Backend, m, k int, dtype dtypes.DType) *tensors.Tensor {
	x := tensors.FromShape(shapes.Make(dtypes.Float32, m, k))
	x.MustMutableFlatData(func(flat any) {
		for i, f := 0, flat.([]float32); i < len(f); i++ {
			f[i] = float32(i%13)/13 - 0.5
		}
	})
	if dtype != dtypes.Float32 {
		convert := converter(backend, dtype)
		defer convert.Finalize()
		x = convert.MustExec1(x)
	}
	return x
}

// Median runs call once to compile and warm up, then repeatedly for at least minTime (and three
// calls), and returns the median duration (of an even count of calls, the mean of the two middle
// ones).
func Median(minTime time.Duration, call func() error) (time.Duration, error) {
	if err := call(); err != nil {
		return 0, err
	}
	var times []time.Duration
	for total := time.Duration(0); total < minTime || len(times) < 3; {
		start := time.Now()
		if err := call(); err != nil {
			return 0, err
		}
		d := time.Since(start)
		times = append(times, d)
		total += d
	}
	return MedianOf(times), nil
}

// MedianOf returns the median of xs (not empty), left unsorted: the middle value, or the mean of
// the two middle values of an even count, as Python's statistics.median (llamacpp_speed.py's).
// Every median of the benchmarks (go run ./bench, examples/smollm) is this one.
func MedianOf[T float64 | time.Duration](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// ReadBandwidth measures the bytes per second the backend reads from a large buffer, the
// bandwidth limit the products are judged by: on the host's backends (XLA CPU, pure Go) the
// kernels' streaming read of 1 GiB (cpukernels.ReadBandwidth; a sum compiled by XLA CPU reads
// at well under half of what the products stream), elsewhere a sum of 1 GiB of float32 on the
// device, median over minTime.
func ReadBandwidth(backend backends.Backend, minTime time.Duration) (float64, error) {
	if _, cpu := kernelreg.XLACPU(backend); cpu || runtime.IsGo(backend) {
		return cpukernels.ReadBandwidth(1 << 30), nil
	}
	const n = 1 << 28 // 1 GiB of float32
	buf := tensors.FromShape(shapes.Make(dtypes.Float32, n))
	defer func() { _ = buf.FinalizeAll() }()
	e := graph.MustNewExec(backend, func(x *graph.Node) *graph.Node { return graph.ReduceAllSum(x) })
	defer e.Finalize()
	median, err := Median(minTime, func() error {
		out, err := e.Exec1(buf)
		if err != nil {
			return err
		}
		return out.FinalizeAll()
	})
	if err != nil {
		return 0, err
	}
	return float64(n*4) / median.Seconds(), nil
}
