// Command bench measures quanta's quantized products against the dense float products, in one run
// on one backend, on a suite of real layer shapes and in two graph contexts, and writes the tables
// `make bench` prints (markdown), the figures as JSON and a PNG chart of the speed-ups.
//
// Dense is measured in both layouts a model's float projection may have (benchsuite.DenseNames):
// "dense", the weight stored (K, N) as GoMLX's layers.Dense stores it, multiplied by
// lowering.DenseMatMul (quanta's float32 kernel up to 16 rows on a backend with the kernels, XLA's
// dot beyond), and "dense-t", the weight stored (N, K) as PyTorch's Linear.weight, multiplied by
// lowering.DenseMatMulTransposed (on such a backend quanta's kernel at every row count). Every
// speed-up is over the faster of the two in the same context, shape and M, named per cell in the
// JSON (dense_baseline).
//
// Shapes are the products' K×N (dense-t and the GGML block types store each weight transposed):
// Llama-7B 4096×4096, 4096×11008, 11008×4096; Qwen2.5-0.5B-like 2048×8192, 8192×2048 and
// 896×4864, 4864×896; SmolLM2-135M 576×1536, 1536×576. Contexts:
//
//   - chain: y = relu(y·W_i) through distinct weights alternating (K, N) and (N, K), as the
//     up- and down-projections of an MLP (a square shape chains with itself);
//   - add: y = Σ_i x·W_i over distinct (K, N) weights, every product's output feeding an add, as
//     a residual connection's does.
//
// Every call streams at least -stream-bytes of stored weights (128 MiB, 4× the last-level cache)
// in every format, dense included: the number of distinct weights per call is chosen per format
// and shape. Times are medians per product, each cell's speed-up is the faster dense layout's time
// over the format's in the same run, and the achieved fraction of the bandwidth limit is the
// stored bytes per second over the read bandwidth of a large buffer measured in the same run.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/quanta-ml/quanta/internal/benchflags"
	"github.com/quanta-ml/quanta/internal/benchsuite"
	"github.com/quanta-ml/quanta/internal/cmdflags"
	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/quanta-ml/quanta/internal/kernelreg"
	"github.com/quanta-ml/quanta/runtime"
)

// The default suite: pairs (K, N) whose chain alternates W (K, N) and W (N, K).
const defaultPairs = "4096x4096,4096x11008,2048x8192,896x4864,576x1536"

var (
	flagM           = flag.String("m", benchflags.DefaultRows, "comma-separated activation rows M")
	flagPairs       = flag.String("shapes", defaultPairs, "comma-separated weight shapes KxN; the add context also measures each transposed (NxK), the chain alternates them")
	flagContexts    = flag.String("contexts", "chain,add", "graph contexts: chain (relu between products) and/or add (products feeding an add)")
	flagFormats     = flag.String("formats", "nf4,int8,ternary,binary1", "formats measured against the faster of dense and dense-t (both always measured): nf4, int8, ternary (2-bit), binary1 (1-bit), and the GGML block types q4_0 ... q6_k (stored as a GGUF file stores a linear weight, products x·Wᵀ); FORMAT@STRATEGY forces a lowering.Strategy")
	flagDType       = flag.String("dtype", "float32", "activation dtype: float32 or bfloat16 (dense weights take it too)")
	flagStreamBytes = flag.Int64("stream-bytes", 128<<20, "stored weight bytes each call streams, at least, in every format")
	flagMaxLayers   = flag.Int("max-layers", 2048, "most distinct weights per call (bounds the graph size for tiny layers)")
	flagMinTime     = flag.Duration("min-time", time.Second, "minimum measuring time per cell")
	flagJSON        = flag.String("json", "", "write the results as JSON to this file")
	flagMarkdown    = flag.String("markdown", "", "write the markdown tables to this file (stdout always gets them)")
	flagPNG         = flag.String("png", "", "write a chart of the speed-ups to this PNG file")
	flagPeakGBps    = flag.Float64("peak-gbps", 0, "the device's peak memory bandwidth in GB/s, when known (accelerators): the bandwidth limit instead of the measured read bandwidth")
	flagNoKernels   = flag.Bool("allow-no-kernels", false, "measure even when quanta's CPU kernels cannot serve an XLA CPU backend (the figures are then the HLO formulations')")
)

func main() {
	flag.Parse()
	cfg, err := parseConfig()
	if err == nil {
		err = checkStorable(cfg)
	}
	cmdflags.Exit("bench", cmdflags.ExitUsage, err)
	backend, err := runtime.Backend()
	if err != nil {
		fail(err)
	}
	env, err := runtime.Environment()
	if err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "bench: %s\n", env)
	report, err := runtime.Kernels()
	if err != nil {
		fail(err)
	}
	if _, cpu := kernelreg.XLACPU(backend); cpu && report.Err() != nil && !*flagNoKernels {
		fail(fmt.Errorf("%v; the products would run without quanta's kernels (run make setup; -allow-no-kernels measures anyway)",
			report.Err()))
	}
	if err := checkStrategies(backend, cfg); err != nil {
		fail(err)
	}
	rep, err := run(backend, cfg)
	if err != nil {
		fail(err)
	}
	tables := markdown(rep)
	fmt.Print(tables)
	if err := writeOutputs(rep, tables); err != nil {
		fail(err)
	}
}

// writeOutputs writes the -json, -markdown and -png files: all are encoded before any is written,
// the JSON first (an error leaves no table without its data), and each is replaced whole
// (fileio.WriteAtomic), so that an interrupted run leaves no truncated file.
func writeOutputs(rep *report, tables string) error {
	var outs []fileio.Output
	if *flagJSON != "" {
		data, err := jsonOf(rep)
		if err != nil {
			return err
		}
		outs = append(outs, fileio.Output{Name: "-json", Path: *flagJSON, Data: data})
	}
	if *flagMarkdown != "" {
		outs = append(outs, fileio.Output{Name: "-markdown", Path: *flagMarkdown, Data: []byte(tables)})
	}
	if *flagPNG != "" {
		data, err := chart(rep)
		if err != nil {
			return err
		}
		outs = append(outs, fileio.Output{Name: "-png", Path: *flagPNG, Data: data})
	}
	return fileio.WriteOutputs(outs...)
}

// config is the parsed command line.
type config struct {
	rows     []int
	pairs    []benchflags.Shape
	contexts []string
	formats  []benchsuite.Format
	dtype    dtypes.DType
}

func parseConfig() (config, error) {
	var c config
	var err error
	if err := cmdflags.NoArguments(); err != nil {
		return c, err
	}
	if c.rows, err = benchflags.ParseInts(*flagM); err != nil {
		return c, fmt.Errorf("-m: %w", err)
	}
	if c.pairs, err = benchflags.ParseShapes(*flagPairs); err != nil {
		return c, fmt.Errorf("-shapes: %w", err)
	}
	for _, ctx := range strings.Split(*flagContexts, ",") {
		switch ctx = strings.TrimSpace(ctx); ctx {
		case benchsuite.Chain, benchsuite.Add:
			if slices.Contains(c.contexts, ctx) {
				return c, fmt.Errorf("-contexts: %q listed twice", ctx)
			}
			c.contexts = append(c.contexts, ctx)
		default:
			return c, fmt.Errorf("-contexts: %q; accepted: %s, %s", ctx, benchsuite.Chain, benchsuite.Add)
		}
	}
	if c.formats, err = parseFormats(*flagFormats); err != nil {
		return c, fmt.Errorf("-formats: %w", err)
	}
	switch *flagDType {
	case "float32":
		c.dtype = dtypes.Float32
	case "bfloat16":
		c.dtype = dtypes.BFloat16
	default:
		return c, fmt.Errorf("-dtype %q: accepted float32 or bfloat16", *flagDType)
	}
	switch {
	case *flagStreamBytes <= 0:
		return c, fmt.Errorf("-stream-bytes %d; accepted: > 0 (stored weight bytes each call streams)", *flagStreamBytes)
	case *flagMaxLayers < 2:
		return c, fmt.Errorf("-max-layers %d; accepted: >= 2 (distinct weights per call, an even count)", *flagMaxLayers)
	case *flagMinTime <= 0:
		return c, fmt.Errorf("-min-time %v; accepted: > 0 (measuring time per cell)", *flagMinTime)
	}
	if g := *flagPeakGBps; math.IsNaN(g) || math.IsInf(g, 0) || g < 0 {
		return c, fmt.Errorf("-peak-gbps %v; accepted: a finite bandwidth in GB/s, or 0 (unknown: the measured read bandwidth)", g)
	}
	// The outputs are written after the measurements: check now that they can be, each to its
	// own file (the later would replace the earlier).
	outs := []struct{ key, path string }{{"-json", *flagJSON}, {"-markdown", *flagMarkdown}, {"-png", *flagPNG}}
	for i, out := range outs {
		if out.path == "" {
			continue
		}
		for _, prev := range outs[:i] {
			if prev.path != "" && filepath.Clean(prev.path) == filepath.Clean(out.path) {
				return c, fmt.Errorf("%s and %s both %s; accepted: a file each (the %s would replace the %s)", prev.key, out.key,
					out.path, out.key[1:], prev.key[1:])
			}
		}
		if err := fileio.CheckOutput(out.key, out.path); err != nil {
			return c, err
		}
	}
	return c, nil
}

func fail(err error) {
	cmdflags.Exit("bench", cmdflags.ExitFailure, err)
}
