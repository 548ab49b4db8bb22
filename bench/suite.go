package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/benchflags"
	"github.com/quanta-ml/quanta/internal/benchsuite"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/runtime"
)

// parseFormats reads -formats: benchsuite formats, each optionally "@strategy", each once. The
// dense layouts (benchsuite.DenseNames) are always measured first (naming one is an error): every
// speed-up is relative to the faster of them.
func parseFormats(s string) ([]benchsuite.Format, error) {
	var out []benchsuite.Format
	for _, name := range benchsuite.DenseNames() {
		out = append(out, benchsuite.Format{Name: name})
	}
	for _, name := range strings.Split(s, ",") {
		f, err := benchsuite.ParseFormat(name)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(out, f.Same) {
			return nil, fmt.Errorf("%q measured twice (%s are always measured, first)", f.Name,
				strings.Join(benchsuite.DenseNames(), " and "))
		}
		out = append(out, f)
	}
	return out, nil
}

// measure compiles the context's graph for m rows and returns the median time per product and
// the formulations its products were built with (lowering.Built), so that a cell served by
// another formulation than the expected one says so.
func measure(backend backends.Backend, context string, w *benchsuite.Weights, m, k int, dtype dtypes.DType) (time.Duration, string, error) {
	lowering.ResetBuilt()
	e, err := implicitarray.NewExec(backend, benchsuite.Graph(context))
	if err != nil {
		return 0, "", err
	}
	defer e.Finalize()
	x := benchsuite.Activations(backend, m, k, dtype)
	times, err := benchsuite.Median(*flagMinTime, func() error {
		out, err := e.Call1(x, w.Values)
		if err != nil {
			return err
		}
		// The call returns when the device is done; the result stays there, as a model's next
		// layer would take it (copying it to the host would time the transfer).
		return out.(*tensors.Tensor).FinalizeAll()
	})
	if err != nil {
		return 0, "", err
	}
	return times / time.Duration(len(w.Values)), builtNames(), nil
}

// builtNames lists lowering.Built's choices, sorted: "layout/strategy" with the number of
// products built, e.g. "blockwise4/kernel×48".
func builtNames() string {
	var names []string
	for c, n := range lowering.Built() {
		names = append(names, fmt.Sprintf("%s×%d", c, n))
	}
	slices.Sort(names)
	return strings.Join(names, " ")
}

// shapeSets returns, per context, the weight shapes of each measurement: the chain alternates a
// pair, the add context takes each shape alone (both orientations of the pairs).
func shapeSets(context string, pairs []benchflags.Shape) [][]benchflags.Shape {
	var sets [][]benchflags.Shape
	for _, p := range pairs {
		if context == benchsuite.Chain {
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

// checkStorable checks, before anything is measured, that every format can store every weight
// the contexts measure (each pair of -shapes and its transpose); the error names both.
func checkStorable(cfg config) error {
	for _, f := range cfg.formats {
		var checked []benchflags.Shape
		for _, p := range cfg.pairs {
			for _, context := range cfg.contexts {
				for _, set := range shapeSets(context, []benchflags.Shape{p}) {
					for _, s := range set {
						if slices.Contains(checked, s) {
							continue
						}
						checked = append(checked, s)
						if err := benchsuite.Check(f, s, cfg.dtype); err != nil {
							return fmt.Errorf("-formats %s cannot store the %s weight of -shapes %s (a pair is measured in both orientations): %w",
								f.Name, s, p, err)
						}
					}
				}
			}
		}
	}
	return nil
}

// checkStrategies checks, before anything is measured, that every forced strategy (-formats
// FORMAT@STRATEGY) serves the product of every weight the contexts measure with every -m rows:
// it builds, without compiling, one graph per format, weight and row count with the weight as
// parameters (a zero weight of that shape, quantized once). The error names the format, the
// strategy, the weight, the rows and what the strategy serves (lowering's refusal).
func checkStrategies(backend backends.Backend, cfg config) error {
	for _, f := range cfg.formats {
		if f.IsDense() || f.Strategy == lowering.Auto {
			continue
		}
		var checked []benchflags.Shape
		for _, context := range cfg.contexts {
			for _, set := range shapeSets(context, cfg.pairs) {
				for _, s := range set {
					if slices.Contains(checked, s) {
						continue
					}
					checked = append(checked, s)
					if err := checkStrategy(backend, f, s, cfg.rows, cfg.dtype); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// checkStrategy builds the product of f's weight of shape s with m activation rows, for each m
// of rows, and returns lowering's refusal, if any, as an error naming f, its strategy, s and m.
func checkStrategy(backend backends.Backend, f benchsuite.Format, s benchflags.Shape, rows []int, dtype dtypes.DType) error {
	t := tensors.FromShape(shapes.Make(dtype, s.K, s.N))
	defer func() { _ = t.FinalizeAll() }()
	a, err := f.Quantize(t, f.Strategy)
	if err != nil {
		return fmt.Errorf("-formats %s cannot store the %s weight: %w", f.Name, s, err)
	}
	if d, ok := a.(interface{ Delete() }); ok {
		defer d.Delete()
	}
	product := benchsuite.Graph(benchsuite.Add)
	for _, m := range rows {
		err := func() (err error) {
			g := graph.NewGraph(backend, "bench-check")
			defer g.Finalize()
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("%v", r)
				}
			}()
			x := graph.Parameter(g, "x", shapes.Make(dtype, m, s.K))
			product(x, []implicitarray.Value{asParameters(g, a, new(int))})
			return nil
		}()
		if err != nil {
			return fmt.Errorf("-formats %s: strategy %s cannot serve the product of %d activation rows (-m) and the %s weight (-shapes): %w",
				f.Name, f.Strategy, m, s, err)
		}
	}
	return nil
}

// asParameters returns a copy of the host array a whose tensor components (nested ones included)
// are parameters of g, numbered from *n.
func asParameters(g *graph.Graph, a implicitarray.Array, n *int) implicitarray.Array {
	comps := a.Components()
	out := make([]implicitarray.Component, len(comps))
	for i, c := range comps {
		switch {
		case c.IsTensor():
			out[i] = implicitarray.NodeComponent(graph.Parameter(g, fmt.Sprintf("w%d", *n), c.Tensor().Shape()))
			*n++
		case c.IsArray():
			out[i] = implicitarray.ArrayComponent(asParameters(g, c.Array(), n))
		default:
			out[i] = c
		}
	}
	return a.WithComponents(out)
}

// run measures every context, shape set, format and M.
func run(backend backends.Backend, cfg config) (*report, error) {
	rep := &report{Backend: backend.Description(), Environment: runtime.MustEnvironment(), DType: cfg.dtype.String(),
		StartedUTC: time.Now().UTC().Format(time.RFC3339), StreamMiB: *flagStreamBytes >> 20}
	bw, err := benchsuite.ReadBandwidth(backend, *flagMinTime)
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
				start := time.Now()
				w, err := benchsuite.Prepare(backend, f, set, cfg.dtype, *flagStreamBytes, *flagMaxLayers)
				if err != nil {
					return nil, fmt.Errorf("%s %s %s: %w", context, name, f.Name, err)
				}
				fmt.Fprintf(os.Stderr, "bench: %-5s %-24s %-16s %d layers prepared in %.1f s\n", context, name, f.Name,
					len(w.Values), time.Since(start).Seconds())
				for _, m := range cfg.rows {
					start = time.Now()
					d, built, err := measure(backend, context, w, m, set[0].K, cfg.dtype)
					if err != nil {
						w.Release()
						return nil, fmt.Errorf("%s %s %s m=%d: %w", context, name, f.Name, m, err)
					}
					r := result{Context: context, Shape: name, Format: f.Name, M: m, Layers: len(w.Values),
						MsPerProduct: d.Seconds() * 1e3, BytesPerProduct: w.Bytes, Built: built}
					r.LimitFraction = w.Bytes / d.Seconds() / (rep.LimitGBps * 1e9)
					rep.Results = append(rep.Results, r)
					fmt.Fprintf(os.Stderr, "bench: %-5s %-24s %-16s m=%-4d %4d layers %9.4f ms/product %5.1f%% of the limit (%.1f s with compiling) %s\n",
						context, name, f.Name, m, len(w.Values), r.MsPerProduct, 100*r.LimitFraction, time.Since(start).Seconds(), built)
				}
				w.Release()
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
