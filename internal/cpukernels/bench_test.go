package cpukernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/x448/float16"
)

// The benchmarks time every format on real layer shapes, cycling through enough distinct weights
// that each iteration streams at least benchStream bytes of stored weights (4x the L3 of the
// machines they were written on), so every call reads its weight from memory. Each reports:
//
//   - MB/s (from SetBytes): stored weight bytes per second;
//   - bw-frac: that throughput over the streaming-read bandwidth measured by BenchmarkReadBandwidth's
//     probe at the start of the run (same threads);
//   - ms/call: time per product; cpu-ms/call: CPU time of the process per product (all threads:
//     on a machine shared with other work, ms/call grows with the load, cpu-ms/call much less);
//   - x-dense: the in-package dense float32 product of the same shape and m (measured earlier in
//     the same run) over this product's time per call: above 1, the quantized product is faster;
//     x-dense-cpu: the same ratio of CPU times, steadier than x-dense on a loaded machine (it is
//     the wall-time ratio an idle machine would show when both products keep all threads busy).
//
//   - GFLOPS: 2·m·k·n over the time per call (the measure of the compute-bound products of many
//     rows).
//
// By default only k=n=4096 runs; QUANTA_TEST_ALL=1 adds 4096×11008 and 11008×4096, and
// QUANTA_BENCH_SHAPES=KxN,... replaces them; QUANTA_BENCH_MS=M,... replaces the activation rows
// (1, 4, 16, 64).
// `go test -run '^$' -bench . ./internal/cpukernels/`.

const benchStream = 128 << 20

// benchMs returns the activation row counts: QUANTA_BENCH_MS=M,M,... or 1, 4, 16 and 64.
func benchMs() []int {
	env := os.Getenv(benchMsEnv)
	if env == "" {
		return []int{1, 4, 16, 64}
	}
	var ms []int
	for _, f := range strings.Split(env, ",") {
		m, err := strconv.Atoi(f)
		if err != nil || m <= 0 {
			panic(fmt.Sprintf("%s=%q: %q is not a positive row count", benchMsEnv, env, f))
		}
		ms = append(ms, m)
	}
	return ms
}

const benchMsEnv = "QUANTA_BENCH_MS"

type benchShape struct{ k, n int }

// formats returns the benchmarked formats that take the shape.
func (s benchShape) formats() []benchFormat {
	var taken []benchFormat
	for _, f := range benchFormats {
		if f.takes == nil || f.takes(s.k, s.n) {
			taken = append(taken, f)
		}
	}
	return taken
}

func benchShapes() []benchShape {
	if env := os.Getenv(benchShapesEnv); env != "" {
		var shapes []benchShape
		for _, f := range strings.Split(env, ",") {
			var s benchShape
			if _, err := fmt.Sscanf(f, "%dx%d", &s.k, &s.n); err != nil || s.k <= 0 || s.n <= 0 {
				panic(fmt.Sprintf("%s=%q: %q is not KxN with positive K and N", benchShapesEnv, env, f))
			}
			shapes = append(shapes, s)
		}
		return shapes
	}
	shapes := []benchShape{{4096, 4096}}
	if os.Getenv("QUANTA_TEST_ALL") == "1" { // testutil.TestAllEnv; testutil imports runtime, which imports this package
		shapes = append(shapes, benchShape{4096, 11008}, benchShape{11008, 4096})
	}
	return shapes
}

// benchShapesEnv replaces the benchmarks' shapes: KxN,KxN,... (SmolLM2-135M's projections are
// 576x960,576x576,576x3072,1536x576 with q/k/v and gate/up fused).
const benchShapesEnv = "QUANTA_BENCH_SHAPES"

var (
	bwOnce sync.Once
	bwGBs  float64
)

// readBandwidth returns the streaming-read bandwidth of a 1 GiB buffer, in GB/s.
func readBandwidth() float64 {
	bwOnce.Do(func() { bwGBs = ReadBandwidth(1<<30) / 1e9 })
	return bwGBs
}

// cpuTime returns the user and system CPU time of the process so far, in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkReadBandwidth reports the streaming-read bandwidth of the kernels' threads.
func BenchmarkReadBandwidth(b *testing.B) {
	buf := probeBuffer(1 << 30)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		readProbe(buf)
	}
}

// benchFormat describes one format: its stored bytes for a k×n weight, how to make one random
// weight, and the product.
type benchFormat struct {
	name  string
	bytes func(k, n int) int
	make  func(r *rand.Rand, k, n int) any
	run   func(w any, y, x []float32, m, k, n int) error
	takes func(k, n int) bool // nil: every shape
}

type nf4Bench struct {
	packed []uint8
	absmax []float32
}

type int8Bench struct {
	w     []int8
	scale []float32
}

type tbBench struct {
	packed []uint8
	scale  []float32
}

func randF32(r *rand.Rand, size int) []float32 {
	s := make([]float32, size)
	for i := range s {
		s[i] = float32(r.Uint32()>>8)/float32(1<<24) - 0.5
	}
	return s
}

func randI8(r *rand.Rand, size int) []int8 {
	s := make([]int8, size)
	for i := range s {
		s[i] = int8(r.Uint32())
	}
	return s
}

const benchBlock = 64

// layoutKN and layoutNK give the stored rows and their span of a k×n weight stored as such (x·W)
// or transposed (x·Wᵀ).
func layoutKN(k, n int) (rows, span int) { return k, n }
func layoutNK(k, n int) (rows, span int) { return n, k }

// nf4Format benchmarks an NF4 weight stored as layout says, blocks of benchBlock along its rows.
func nf4Format(name string, layout func(k, n int) (int, int),
	product func(y, x []float32, packed []uint8, absmax []float32, m, k, n, blockSize int) error) benchFormat {
	blocks := func(k, n int) (rows, nb int) {
		rows, span := layout(k, n)
		return rows, ceilDiv(span, benchBlock)
	}
	return benchFormat{
		name:  name,
		bytes: func(k, n int) int { rows, nb := blocks(k, n); return rows*nb*benchBlock/2 + 4*rows*nb },
		make: func(r *rand.Rand, k, n int) any {
			rows, nb := blocks(k, n)
			return nf4Bench{randBytes(r, rows*nb*benchBlock/2), randF32(r, rows*nb)}
		},
		run: func(w any, y, x []float32, m, k, n int) error {
			q := w.(nf4Bench)
			return product(y, x, q.packed, q.absmax, m, k, n, benchBlock)
		},
	}
}

// int8Format benchmarks an int8 weight stored as layout says, one scale per stored row (kind).
func int8Format(name string, layout func(k, n int) (int, int), kind ScaleKind,
	product func(y, x []float32, w []int8, scale []float32, kind ScaleKind, m, k, n int) error) benchFormat {
	return benchFormat{
		name:  name,
		bytes: func(k, n int) int { rows, _ := layout(k, n); return k*n + 4*rows },
		make: func(r *rand.Rand, k, n int) any {
			rows, _ := layout(k, n)
			return int8Bench{randI8(r, k*n), randF32(r, rows)}
		},
		run: func(w any, y, x []float32, m, k, n int) error {
			q := w.(int8Bench)
			return product(y, x, q.w, q.scale, kind, m, k, n)
		},
	}
}

// tbFormat benchmarks a 2-bit or 1-bit weight, per values a byte, one scale per column.
func tbFormat(name string, per int,
	product func(y, x []float32, packed []uint8, scale []float32, kind ScaleKind, m, k, n int) error) benchFormat {
	return benchFormat{
		name:  name,
		bytes: func(k, n int) int { return k/per*n + 4*n },
		make:  func(r *rand.Rand, k, n int) any { return tbBench{randBytes(r, k/per*n), randF32(r, n)} },
		run: func(w any, y, x []float32, m, k, n int) error {
			q := w.(tbBench)
			return product(y, x, q.packed, q.scale, ScaleN, m, k, n)
		},
	}
}

var benchFormats = []benchFormat{
	{
		name:  "dense",
		bytes: func(k, n int) int { return 4 * k * n },
		make:  func(r *rand.Rand, k, n int) any { return randF32(r, k*n) },
		run: func(w any, y, x []float32, m, k, n int) error {
			return denseKN(y, x, w.([]float32), m, k, n)
		},
	},
	{
		name:  "dense-nk",
		bytes: func(k, n int) int { return 4 * k * n },
		make:  func(r *rand.Rand, k, n int) any { return randF32(r, k*n) },
		run: func(w any, y, x []float32, m, k, n int) error {
			return denseNK(y, x, w.([]float32), m, k, n)
		},
	},
	nf4Format("nf4-kn", layoutKN, nf4KN[float32, float32]),
	nf4Format("nf4-nk", layoutNK, nf4NK[float32, float32]),
	int8Format("int8-kn", layoutKN, ScaleK, int8KN[float32, float32]),
	int8Format("int8-nk", layoutNK, ScaleN, int8NK[float32, float32]),
	tbFormat("2bit", 4, twoBitKN[float32]),
	tbFormat("1bit", 8, oneBitKN[float32]),
}

// ggmlBenchTypes are the GGML block types benchmarked (x·Wᵀ, as GGUF stores a linear weight).
var ggmlBenchTypes = []gguf.Type{gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K}

func init() {
	for _, typ := range ggmlBenchTypes {
		benchFormats = append(benchFormats, benchFormat{
			name:  strings.ToLower(typ.String()) + "-nk",
			bytes: func(k, n int) int { return n * k / typ.BlockSize() * typ.BlockBytes() },
			make:  func(r *rand.Rand, k, n int) any { return ggmlWeight(r, typ, n, k, ordinaryHalf) },
			takes: func(k, n int) bool { return k%typ.BlockSize() == 0 },
			run: func(w any, y, x []float32, m, k, n int) error {
				return ggmlNK(y, x, typ, w.([]uint8), m, k, n)
			},
		})
	}
}

// BenchmarkProducts times every format against the dense baseline; see the file comment.
func BenchmarkProducts(b *testing.B) {
	bw := readBandwidth()
	b.Logf("streaming read bandwidth: %.1f GB/s (%d threads, %s)", bw, Threads(), ActiveISA())
	fmt.Fprintf(os.Stderr, "cpukernels: streaming read bandwidth %.1f GB/s (%d threads, %s)\n", bw, Threads(), ActiveISA())
	denseNs := map[string][2]float64{} // wall and CPU time per call
	for _, s := range benchShapes() {
		for _, f := range s.formats() {
			perW := f.bytes(s.k, s.n)
			count := max(1, ceilDiv(benchStream, perW))
			var weights []any
			for _, m := range benchMs() {
				key := fmt.Sprintf("m=%d/k=%d/n=%d", m, s.k, s.n)
				b.Run(f.name+"/"+key, func(b *testing.B) {
					if weights == nil {
						weights = weightSet(f, s, count)
					}
					r := rand.New(rand.NewPCG(3, 4))
					x := randF32(r, m*s.k)
					y := make([]float32, m*s.n)
					for _, w := range weights { // warm-up: threads, scratch
						if err := f.run(w, y, x, m, s.k, s.n); err != nil {
							b.Fatal(err)
						}
					}
					b.SetBytes(int64(perW * count))
					cpu0 := cpuTime()
					for b.Loop() {
						for _, w := range weights {
							_ = f.run(w, y, x, m, s.k, s.n)
						}
					}
					perCall := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / float64(count)
					cpuCall := float64(cpuTime()-cpu0) / float64(b.N) / float64(count)
					b.ReportMetric(perCall/1e6, "ms/call")
					b.ReportMetric(cpuCall/1e6, "cpu-ms/call")
					b.ReportMetric(float64(perW)/perCall/bw, "bw-frac")
					b.ReportMetric(2*float64(m)*float64(s.k)*float64(s.n)/perCall, "GFLOPS")
					if f.name == "dense" {
						denseNs[key] = [2]float64{perCall, cpuCall}
					} else if d, ok := denseNs[key]; ok {
						b.ReportMetric(d[0]/perCall, "x-dense")
						b.ReportMetric(d[1]/cpuCall, "x-dense-cpu")
					}
				})
			}
		}
	}
}

// weightSet makes count distinct random weights of format f and shape s.
func weightSet(f benchFormat, s benchShape, count int) []any {
	r := rand.New(rand.NewPCG(1, 2))
	weights := make([]any, count)
	for i := range weights {
		weights[i] = f.make(r, s.k, s.n)
	}
	return weights
}

// BenchmarkBestOfM1 is for a machine shared with other work, where a single timing varies more
// than the products differ: per shape, each iteration is one round of a streaming read of 1 GiB
// (the bandwidth probe) and one pass of every format at one activation row over its set of
// weights (as BenchmarkProducts streams them), so every product and the probe meet the same load;
// the best of the rounds is reported per format as the metrics "<format>/bw-frac" (the best
// pass's stored-weight throughput over the probe's best) and "<format>/of-dense" (over the dense
// product's best pass). `go test -run '^$' -bench BestOfM1 -benchtime 12x
// ./internal/cpukernels/`; QUANTA_TEST_ALL=1 adds the larger shapes.
func BenchmarkBestOfM1(b *testing.B) {
	buf := probeBuffer(1 << 30)
	readProbe(buf)
	type cell struct {
		f       benchFormat
		weights []any
		bytes   int
		best    float64 // seconds
	}
	for _, s := range benchShapes() {
		b.Run(fmt.Sprintf("k=%d/n=%d", s.k, s.n), func(b *testing.B) {
			var cells []*cell
			for _, f := range s.formats() {
				perW := f.bytes(s.k, s.n)
				count := max(1, ceilDiv(benchStream, perW))
				cells = append(cells, &cell{f: f, weights: weightSet(f, s, count), bytes: perW * count, best: math.Inf(1)})
			}
			r := rand.New(rand.NewPCG(3, 4))
			x, y := randF32(r, s.k), make([]float32, s.n)
			probe := math.Inf(1)
			for b.Loop() {
				start := time.Now()
				readProbe(buf)
				probe = min(probe, time.Since(start).Seconds())
				for _, c := range cells {
					start := time.Now()
					for _, w := range c.weights {
						if err := c.f.run(w, y, x, 1, s.k, s.n); err != nil {
							b.Fatal(err)
						}
					}
					c.best = min(c.best, time.Since(start).Seconds())
				}
			}
			bw := float64(len(buf)) / probe
			b.ReportMetric(bw/1e9, "probe-GB/s")
			var dense float64
			for _, c := range cells {
				rate := float64(c.bytes) / c.best
				if c.f.name == "dense" {
					dense = rate
				} else if dense > 0 {
					b.ReportMetric(rate/dense, c.f.name+"/of-dense")
				}
				b.ReportMetric(rate/bw, c.f.name+"/bw-frac")
			}
		})
	}
}

// BenchmarkAttention times one decoding step's attention of one layer (one query row a head) over
// a cache of keys positions, in float32 and in float16, for the heads of SmolLM2-135M (9 query
// heads on 3 key/value heads of 64) and Gemma-3-270M (4 on 1 of 256). The calls cycle through
// enough layers' caches that each iteration streams benchStream bytes, so that each call reads
// its cache from memory, as a model's step does between its weights. MB/s counts the cache bytes
// read.
func BenchmarkAttention(b *testing.B) {
	for _, arch := range []struct {
		name          string
		heads, kv, hd int
	}{{"smollm2", 9, 3, 64}, {"gemma3", 4, 1, 256}} {
		for _, keys := range []int{128, 640} {
			c := attnCase{"", 1, arch.heads, arch.kv, 1, keys, keys, arch.hd, causalFrom(keys - 1)}
			q, k0, v0, visible := attnInputs(c, 1)
			out := make([]float32, len(q))
			for _, half := range []bool{false, true} {
				elem, dtype := 4, "float32"
				if half {
					elem, dtype = 2, "float16"
				}
				bytes := 2 * c.kv * keys * c.hd * elem
				layers := max(8, benchStream/bytes)
				b.Run(fmt.Sprintf("%s/keys=%d/%s", arch.name, keys, dtype), func(b *testing.B) {
					var call func(layer int) error
					if half {
						ks, vs := make([][]uint16, layers), make([][]uint16, layers)
						for i := range layers {
							ks[i], vs[i] = halvesOf(k0), halvesOf(v0)
						}
						call = func(l int) error {
							return attention(out, q, ks[l], vs[l], visible, 1, c.heads, c.kv, 1, keys, keys, c.hd, 0.125)
						}
					} else {
						ks, vs := make([][]float32, layers), make([][]float32, layers)
						for i := range layers {
							ks[i], vs[i] = append([]float32(nil), k0...), append([]float32(nil), v0...)
						}
						call = func(l int) error {
							return attention(out, q, ks[l], vs[l], visible, 1, c.heads, c.kv, 1, keys, keys, c.hd, 0.125)
						}
					}
					b.SetBytes(int64(bytes))
					layer := 0
					for b.Loop() {
						if err := call(layer); err != nil {
							b.Fatal(err)
						}
						layer = (layer + 1) % layers
					}
				})
			}
		}
	}
}

// halvesOf returns the IEEE halves nearest f.
func halvesOf(f []float32) []uint16 {
	h := make([]uint16, len(f))
	for i, v := range f {
		h[i] = float16.Fromfloat32(v).Bits()
	}
	return h
}
