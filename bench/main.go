// Command bench measures quantized matrix products against the dense baseline, in one run on one
// backend, and writes the table `make bench` prints (markdown) and the same figures as JSON.
//
// Each measurement chains L layers y = y @ W_i with distinct K×N weights, so decode-size products
// (small M) stream their weights from memory as a model does each token: with the default 8
// layers of 4096×4096 the weights of every format exceed the 32 MiB last-level cache (NF4: 75 MiB,
// int8: 128 MiB, dense f32: 512 MiB). Large M is compute-bound; it uses fewer layers (see -layers-large).
// Times are per layer.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/runtime"
)

var (
	flagM           = flag.String("m", "1,8,64,512,2048", "comma-separated batch sizes M")
	flagK           = flag.Int("k", 4096, "contracting dimension K")
	flagN           = flag.Int("n", 4096, "output dimension N")
	flagLayers      = flag.Int("layers", 8, "minimum layers chained for M < 512 (weights streamed from memory)")
	flagStreamBytes = flag.Int64("stream-bytes", 128<<20, "for M < 512, chain enough layers that the weights of one call total at least this (4x the 32 MiB last-level cache by default)")
	flagLayersLarge = flag.Int("layers-large", 2, "layers chained for M >= 512 (compute-bound)")
	flagDType       = flag.String("dtype", "float32", "activation dtype: float32 or bfloat16")
	flagMinTime     = flag.Duration("min-time", 2*time.Second, "minimum measuring time per cell")
	flagVariants    = flag.String("variants", "", "comma-separated variant names to run (default: all)")
	flagJSON        = flag.String("json", "", "write the results as JSON to this file")
	flagMarkdown    = flag.String("markdown", "", "write the markdown table to this file (stdout always gets it)")
	flagPeakGBps    = flag.Float64("peak-gbps", 0, "the device's peak memory bandwidth in GB/s: adds a table of achieved weight bandwidth as a fraction of it")
)

// result is one measured cell.
type result struct {
	Variant     string  `json:"variant"`
	M           int     `json:"m"`
	K           int     `json:"k"`
	N           int     `json:"n"`
	Layers      int     `json:"layers"`
	MsPerLayer  float64 `json:"ms_per_layer"`
	WeightBytes int64   `json:"weight_bytes_per_layer"`
	// SpeedupVsDense is dense time / this time, from the same run.
	SpeedupVsDense float64 `json:"speedup_vs_dense"`
	// WeightGBps is the bytes of one layer's stored weight over the time per layer.
	WeightGBps float64 `json:"weight_gbps"`
}

type report struct {
	Backend    string   `json:"backend"`
	PeakGBps   float64  `json:"peak_gbps,omitempty"`
	XLAFlags   string   `json:"xla_flags"`
	DType      string   `json:"activation_dtype"`
	Results    []result `json:"results"`
	Note       string   `json:"note"`
	StartedUTC string   `json:"started_utc"`
}

func main() {
	flag.Parse()
	backend := runtime.MustBackend()
	dtype := dtypes.Float32
	if *flagDType == "bfloat16" {
		dtype = dtypes.BFloat16
	} else if *flagDType != "float32" {
		fail(fmt.Errorf("-dtype %q: accepted float32 or bfloat16", *flagDType))
	}
	ms, err := parseInts(*flagM)
	if err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "bench: backend %s, %dx%d weights\n", backend.Name(), *flagK, *flagN)
	pool := &weightPool{backend: backend, k: *flagK, n: *flagN, dtype: dtype}

	rep := report{Backend: backend.Description(), XLAFlags: os.Getenv("XLA_FLAGS"), PeakGBps: *flagPeakGBps, DType: dtype.String(), StartedUTC: time.Now().UTC().Format(time.RFC3339),
		Note: fmt.Sprintf("time per layer of a chain of distinct %dx%d weights: for M<512 at least %d layers and at least %d MiB "+
			"of stored weights per call (so every format streams them from memory), %d layers for M>=512; median over "+
			"repeated calls after a warm-up; ratios from this run only", *flagK, *flagN, *flagLayers, *flagStreamBytes>>20, *flagLayersLarge)}
	for _, v := range selectedVariants() {
		fmt.Fprintf(os.Stderr, "bench: preparing %s...\n", v.name)
		first, bytes, err := v.prepare(pool.get(1))
		if err != nil {
			fail(fmt.Errorf("%s: %w", v.name, err))
		}
		releaseArrays(first)
		streamLayers := max(*flagLayers, int((*flagStreamBytes+bytes-1)/bytes))
		args, _, err := v.prepare(pool.get(max(streamLayers, *flagLayersLarge)))
		if err != nil {
			fail(fmt.Errorf("%s: %w", v.name, err))
		}
		for _, m := range ms {
			layers := streamLayers
			if m >= 512 {
				layers = *flagLayersLarge
			}
			msPerLayer, err := measure(backend, v, args[:layers], m, dtype)
			if err != nil {
				fail(fmt.Errorf("%s m=%d: %w", v.name, m, err))
			}
			fmt.Fprintf(os.Stderr, "bench: %-28s m=%-5d %9.3f ms/layer\n", v.name, m, msPerLayer)
			rep.Results = append(rep.Results, result{Variant: v.name, M: m, K: *flagK, N: *flagN, Layers: layers,
				MsPerLayer: msPerLayer, WeightBytes: bytes, WeightGBps: float64(bytes) / (msPerLayer * 1e6)})
		}
		releaseArrays(args)
	}
	fillSpeedups(rep.Results)
	table := markdown(rep)
	fmt.Print(table)
	if *flagMarkdown != "" {
		writeFile(*flagMarkdown, []byte(table))
	}
	if *flagJSON != "" {
		data, _ := json.MarshalIndent(rep, "", "  ")
		writeFile(*flagJSON, append(data, '\n'))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

func writeFile(path string, data []byte) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		fail(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		fail(err)
	}
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("bad list %q: want positive integers", s)
		}
		out = append(out, v)
	}
	return out, nil
}

// weightPool hands out distinct random weights in the activations' dtype, generating them as
// needed: N(0, 1/K) values, so chained products stay O(1); weight i is the same in every run.
type weightPool struct {
	backend backends.Backend
	k, n    int
	dtype   dtypes.DType
	weights []*tensors.Tensor
}

func (p *weightPool) get(count int) []*tensors.Tensor {
	for i := len(p.weights); i < count; i++ {
		rng := rand.New(rand.NewPCG(42, uint64(i)))
		std := 1 / math.Sqrt(float64(p.k))
		t := tensors.FromShape(shapes.Make(dtypes.Float32, p.k, p.n))
		t.MustMutableFlatData(func(flat any) {
			for j, f := 0, flat.([]float32); j < len(f); j++ {
				f[j] = float32(rng.NormFloat64() * std)
			}
		})
		if p.dtype != dtypes.Float32 {
			// A bf16 model stores (and quantizes) bf16 weights.
			t = convertOnHost(p.backend, t, p.dtype)
		}
		p.weights = append(p.weights, t)
	}
	return p.weights[:count]
}

// measure compiles the chain for m rows and returns the median time per layer in milliseconds.
func measure(backend backends.Backend, v variant, ws []implicitarray.Value, m int, dtype dtypes.DType) (float64, error) {
	e, err := implicitarray.NewExec(backend, func(x *graph.Node, ws []implicitarray.Value) *graph.Node {
		y := x
		for _, w := range ws {
			y = v.product(y, w)
		}
		return y
	})
	if err != nil {
		return 0, err
	}
	defer e.Finalize()
	x := tensors.FromShape(shapes.Make(dtypes.Float32, m, *flagK))
	x.MustMutableFlatData(func(flat any) {
		for i, f := 0, flat.([]float32); i < len(f); i++ {
			f[i] = float32(i%13)/13 - 0.5
		}
	})
	if dtype != dtypes.Float32 {
		x = convertOnHost(backend, x, dtype)
	}
	call := func() (time.Duration, error) {
		start := time.Now()
		out, err := e.Call1(x, ws)
		if err != nil {
			return 0, err
		}
		y := out.(*tensors.Tensor)
		y.MustConstFlatData(func(any) {}) // wait for the result on the host
		elapsed := time.Since(start)
		return elapsed, y.FinalizeAll()
	}
	if _, err := call(); err != nil { // compile and warm up
		return 0, err
	}
	var times []time.Duration
	for total := time.Duration(0); total < *flagMinTime || len(times) < 3; {
		d, err := call()
		if err != nil {
			return 0, err
		}
		times = append(times, d)
		total += d
	}
	slices.Sort(times)
	median := times[len(times)/2]
	return float64(median.Microseconds()) / 1000 / float64(len(ws)), nil
}

func convertOnHost(backend backends.Backend, x *tensors.Tensor, dtype dtypes.DType) *tensors.Tensor {
	e := graph.MustNewExec(backend, func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtype) })
	defer e.Finalize()
	return e.MustExec1(x)
}

// releaseArrays frees the host tensors of the quantized weights a variant made (the dense weights
// are shared by every variant and stay).
func releaseArrays(values []implicitarray.Value) {
	for _, v := range values {
		if a, ok := v.(implicitarray.Array); ok {
			for _, c := range a.Components() {
				if t := c.Tensor(); t != nil {
					_ = t.FinalizeAll()
				}
			}
		}
	}
}

func fillSpeedups(results []result) {
	dense := map[int]float64{}
	for _, r := range results {
		if r.Variant == denseName {
			dense[r.M] = r.MsPerLayer
		}
	}
	for i := range results {
		if d, ok := dense[results[i].M]; ok && results[i].MsPerLayer > 0 {
			results[i].SpeedupVsDense = d / results[i].MsPerLayer
		}
	}
}

func markdown(rep report) string {
	var names []string
	byCell := map[string]map[int]result{}
	var ms []int
	for _, r := range rep.Results {
		if _, ok := byCell[r.Variant]; !ok {
			names = append(names, r.Variant)
			byCell[r.Variant] = map[int]result{}
		}
		byCell[r.Variant][r.M] = r
		if !slices.Contains(ms, r.M) {
			ms = append(ms, r.M)
		}
	}
	sort.Ints(ms)
	var sb strings.Builder
	fmt.Fprintf(&sb, "Backend: %s; activations %s; K=%d, N=%d; XLA_FLAGS=%q.\n", rep.Backend, rep.DType, *flagK, *flagN, rep.XLAFlags)
	fmt.Fprintf(&sb, "Cells: ms per layer (speed-up vs dense in the same run). %s.\n\n", rep.Note)
	writeHeader(&sb, []string{"format", "bytes/param", "chain for M<512"}, ms)
	for _, name := range names {
		cells := byCell[name]
		var bytes int64
		chain := "—"
		for _, r := range cells {
			bytes = r.WeightBytes
			if r.M < 512 {
				chain = fmt.Sprintf("%d × %.1f MiB", r.Layers, float64(r.WeightBytes)/(1<<20))
			}
		}
		fmt.Fprintf(&sb, "| %s | %.3f | %s |", name, float64(bytes)/float64(*flagK**flagN), chain)
		for _, m := range ms {
			r, ok := cells[m]
			if !ok {
				sb.WriteString(" — |")
				continue
			}
			fmt.Fprintf(&sb, " %.3f (%.2fx) |", r.MsPerLayer, r.SpeedupVsDense)
		}
		sb.WriteString("\n")
	}
	if rep.PeakGBps > 0 {
		fmt.Fprintf(&sb, "\nAchieved weight bandwidth: GB/s of stored weight bytes (fraction of the %.0f GB/s peak).\n\n", rep.PeakGBps)
		writeHeader(&sb, []string{"format"}, ms)
		for _, name := range names {
			fmt.Fprintf(&sb, "| %s |", name)
			for _, m := range ms {
				if r, ok := byCell[name][m]; ok {
					fmt.Fprintf(&sb, " %.1f (%.1f%%) |", r.WeightGBps, 100*r.WeightGBps/rep.PeakGBps)
				} else {
					sb.WriteString(" — |")
				}
			}
			sb.WriteString("\n")
		}
	}
	return sb.String()
}

// writeHeader writes a markdown table header: the leading columns, then one per M.
func writeHeader(sb *strings.Builder, leading []string, ms []int) {
	sb.WriteString("|")
	for _, c := range leading {
		sb.WriteString(" " + c + " |")
	}
	for _, m := range ms {
		fmt.Fprintf(sb, " M=%d |", m)
	}
	sb.WriteString("\n|" + strings.Repeat("---|", len(leading)+len(ms)) + "\n")
}
