package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/benchflags"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/onebit"
	"github.com/quanta-ml/quanta/runtime"
)

const (
	contextChain = "chain"
	contextAdd   = "add"
	denseName    = "dense"
)

// format is one way of storing the weights: dense (quantize nil), or a quantizer.
type format struct {
	name     string
	quantize func(t *tensors.Tensor, s lowering.Strategy) (implicitarray.Array, error)
	strategy lowering.Strategy
}

func viaConfig(cfg quanta.Config) func(*tensors.Tensor, lowering.Strategy) (implicitarray.Array, error) {
	return func(t *tensors.Tensor, s lowering.Strategy) (implicitarray.Array, error) {
		cfg.Strategy = s
		return quanta.Quantize(t, cfg)
	}
}

// baseFormats are the quantized formats -formats names.
var baseFormats = map[string]func(*tensors.Tensor, lowering.Strategy) (implicitarray.Array, error){
	"nf4":     viaConfig(quanta.Config{Type: quanta.NF4}),
	"int8":    viaConfig(quanta.Config{Type: quanta.Int8}),
	"ternary": viaConfig(quanta.Config{Type: quanta.Ternary}),
	"binary1": func(t *tensors.Tensor, s lowering.Strategy) (implicitarray.Array, error) {
		a, err := onebit.QuantizeBinaryBits(t)
		if err != nil {
			return nil, err
		}
		return a.WithStrategy(s), nil
	},
}

// parseFormats reads -formats: names of baseFormats, each optionally "@strategy". Dense is
// always measured first: every speed-up is relative to it.
func parseFormats(s string) ([]format, error) {
	out := []format{{name: denseName}}
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		base, strategy, forced := strings.Cut(name, "@")
		quantize, ok := baseFormats[base]
		if !ok {
			return nil, fmt.Errorf("unknown format %q; accepted: nf4, int8, ternary, binary1, each with an optional @strategy", name)
		}
		f := format{name: name, quantize: quantize}
		if forced {
			s, err := lowering.ParseStrategy(strategy)
			if err != nil {
				return nil, err
			}
			f.strategy = s
		}
		out = append(out, f)
	}
	return out, nil
}

// weights holds the distinct weights of one format for one measurement: the values the graph
// takes and the stored bytes per product.
type weights struct {
	values []implicitarray.Value
	bytes  float64 // stored bytes per product, averaged over the products
}

func (w *weights) release() {
	for _, v := range w.values {
		switch x := v.(type) {
		case *tensors.Tensor:
			_ = x.FinalizeAll()
		case interface{ Delete() }:
			x.Delete()
		}
	}
}

// randomWeight is a (K, N) weight of uniform values with variance 2/K (He's, so a relu chain
// keeps its scale), seeded by its shape and index: the same in every run.
func randomWeight(s benchflags.Shape, index int) *tensors.Tensor {
	rng := rand.New(rand.NewPCG(uint64(s.K)<<32|uint64(s.N), uint64(index)))
	bound := float32(math.Sqrt(6 / float64(s.K)))
	t := tensors.FromShape(shapes.Make(dtypes.Float32, s.K, s.N))
	t.MustMutableFlatData(func(flat any) {
		for j, f := 0, flat.([]float32); j < len(f); j++ {
			f[j] = bound * (2*rng.Float32() - 1)
		}
	})
	return t
}

// prepare makes enough distinct weights of f, cycling through shapes, that one call streams at
// least -stream-bytes (at most -max-layers weights, an even count so a chain ends where it began).
func prepare(backend backends.Backend, f format, shapes []benchflags.Shape, dtype dtypes.DType) (*weights, error) {
	w := &weights{}
	var total float64
	for i := 0; i < *flagMaxLayers && (total < float64(*flagStreamBytes) || i%len(shapes) != 0 || i < 2); i++ {
		s := shapes[i%len(shapes)]
		float := randomWeight(s, i/len(shapes))
		var v implicitarray.Value
		var bytes int64
		if f.quantize == nil {
			v, bytes = float, int64(s.K*s.N*dtype.Size())
			if dtype != dtypes.Float32 {
				v = convertOnHost(backend, float, dtype)
				_ = float.FinalizeAll()
			}
		} else {
			if dtype != dtypes.Float32 {
				// A bfloat16 model stores (and quantizes) bfloat16 weights.
				half := convertOnHost(backend, float, dtype)
				_ = float.FinalizeAll()
				float = half
			}
			a, err := f.quantize(float, f.strategy)
			_ = float.FinalizeAll()
			if err != nil {
				w.release()
				return nil, err
			}
			v, bytes = a, a.(interface{ Bytes() int64 }).Bytes()
		}
		w.values = append(w.values, v)
		total += float64(bytes)
	}
	w.bytes = total / float64(len(w.values))
	return w, nil
}

func convertOnHost(backend backends.Backend, x *tensors.Tensor, dtype dtypes.DType) *tensors.Tensor {
	e := graph.MustNewExec(backend, func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtype) })
	defer e.Finalize()
	return e.MustExec1(x)
}

// graphOf returns the graph function of a context: the chain or the sum of products.
func graphOf(context string) func(x *graph.Node, ws []implicitarray.Value) *graph.Node {
	product := func(x *graph.Node, w implicitarray.Value) *graph.Node {
		return implicitarray.Materialize(implicitarray.MatMul(x, w))
	}
	if context == contextChain {
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

// measure compiles the context's graph for m rows and returns the median time per product.
func measure(backend backends.Backend, context string, w *weights, m, k int, dtype dtypes.DType) (time.Duration, error) {
	e, err := implicitarray.NewExec(backend, graphOf(context))
	if err != nil {
		return 0, err
	}
	defer e.Finalize()
	x := tensors.FromShape(shapes.Make(dtypes.Float32, m, k))
	x.MustMutableFlatData(func(flat any) {
		for i, f := 0, flat.([]float32); i < len(f); i++ {
			f[i] = float32(i%13)/13 - 0.5
		}
	})
	if dtype != dtypes.Float32 {
		x = convertOnHost(backend, x, dtype)
	}
	times, err := timeCalls(func() error {
		out, err := e.Call1(x, w.values)
		if err != nil {
			return err
		}
		y := out.(*tensors.Tensor)
		y.MustConstFlatData(func(any) {}) // wait for the result on the host
		return y.FinalizeAll()
	})
	if err != nil {
		return 0, err
	}
	return times / time.Duration(len(w.values)), nil
}

// timeCalls runs call once to compile and warm up, then repeatedly for at least -min-time (and
// three calls), and returns the median duration.
func timeCalls(call func() error) (time.Duration, error) {
	if err := call(); err != nil {
		return 0, err
	}
	var times []time.Duration
	for total := time.Duration(0); total < *flagMinTime || len(times) < 3; {
		start := time.Now()
		if err := call(); err != nil {
			return 0, err
		}
		d := time.Since(start)
		times = append(times, d)
		total += d
	}
	slices.Sort(times)
	return times[len(times)/2], nil
}

// readBandwidth measures the bytes per second the backend reads from a large buffer (a sum of
// 1 GiB of float32), the bandwidth limit the products are judged by.
func readBandwidth(backend backends.Backend) (float64, error) {
	const n = 1 << 28 // 1 GiB of float32
	buf := tensors.FromShape(shapes.Make(dtypes.Float32, n))
	defer func() { _ = buf.FinalizeAll() }()
	e := graph.MustNewExec(backend, func(x *graph.Node) *graph.Node { return graph.ReduceAllSum(x) })
	defer e.Finalize()
	median, err := timeCalls(func() error {
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

// shapeSets returns, per context, the weight shapes of each measurement: the chain alternates a
// pair, the add context takes each shape alone (both orientations of the pairs).
func shapeSets(context string, pairs []benchflags.Shape) [][]benchflags.Shape {
	var sets [][]benchflags.Shape
	for _, p := range pairs {
		if context == contextChain {
			if p.K == p.N {
				sets = append(sets, []benchflags.Shape{p})
			} else {
				sets = append(sets, []benchflags.Shape{p, p.Transposed()})
			}
			continue
		}
		sets = append(sets, []benchflags.Shape{p})
		if p.K != p.N {
			sets = append(sets, []benchflags.Shape{p.Transposed()})
		}
	}
	return sets
}

// run measures every context, shape set, format and M.
func run(backend backends.Backend, cfg config) (*report, error) {
	rep := &report{Backend: backend.Description(), Environment: runtime.MustEnvironment(), DType: cfg.dtype.String(),
		StartedUTC: time.Now().UTC().Format(time.RFC3339), StreamMiB: *flagStreamBytes >> 20}
	bw, err := readBandwidth(backend)
	if err != nil {
		return nil, fmt.Errorf("measuring the read bandwidth: %w", err)
	}
	rep.ReadGBps = bw / 1e9
	if *flagPeakGBps > 0 {
		rep.LimitGBps, rep.LimitSource = *flagPeakGBps, "-peak-gbps"
	} else {
		rep.LimitGBps, rep.LimitSource = rep.ReadGBps, "measured read bandwidth"
	}
	fmt.Fprintf(os.Stderr, "bench: read bandwidth %.1f GB/s\n", rep.ReadGBps)
	for _, context := range cfg.contexts {
		for _, set := range shapeSets(context, cfg.pairs) {
			name := shapeName(set)
			for _, f := range cfg.formats {
				w, err := prepare(backend, f, set, cfg.dtype)
				if err != nil {
					return nil, fmt.Errorf("%s %s %s: %w", context, name, f.name, err)
				}
				for _, m := range cfg.rows {
					d, err := measure(backend, context, w, m, set[0].K, cfg.dtype)
					if err != nil {
						w.release()
						return nil, fmt.Errorf("%s %s %s m=%d: %w", context, name, f.name, m, err)
					}
					r := result{Context: context, Shape: name, Format: f.name, M: m, Layers: len(w.values),
						MsPerProduct: d.Seconds() * 1e3, BytesPerProduct: w.bytes}
					r.LimitFraction = w.bytes / d.Seconds() / (rep.LimitGBps * 1e9)
					rep.Results = append(rep.Results, r)
					fmt.Fprintf(os.Stderr, "bench: %-5s %-24s %-16s m=%-4d %4d layers %9.4f ms/product %5.1f%% of the limit\n",
						context, name, f.name, m, len(w.values), r.MsPerProduct, 100*r.LimitFraction)
				}
				w.release()
			}
		}
	}
	rep.fillSpeedups()
	return rep, nil
}

func shapeName(set []benchflags.Shape) string {
	names := make([]string, len(set))
	for i, s := range set {
		names[i] = s.String()
	}
	return strings.Join(names, "↔")
}
