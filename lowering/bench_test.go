package lowering_test

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/benchflags"
	"github.com/quanta-ml/quanta/internal/benchsuite"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/runtime"
)

// BenchmarkProducts times every format's products, with Auto and with each strategy that serves
// them, against the dense float32 products of both layouts (dense, the weight (K, N) by
// lowering.DenseMatMul; dense-t, stored (N, K) by lowering.DenseMatMulTransposed): a chain of
// relu(y·W) through distinct weights alternating (K, N) and (N, K), enough of them that every call
// streams 128 MiB of stored weights from memory (benchsuite.Prepare). Names are
// "format[@strategy]/m=M/k=K/n=N", so benchstat compares two commits:
//
//	go test -run '^$' -bench . -count 6 ./lowering/ > new.txt
//
// Each reports the stored weight throughput (MB/s, from SetBytes) and ms/product. By default the
// Llama-7B square shape and SmolLM2's 576×1536 run, at M = 1, 16, 256; QUANTA_TEST_ALL=1 adds the
// other shapes of `make bench`, the suite driver, which measures the same products in both graph
// contexts and writes the tables of docs/performance.md.
func BenchmarkProducts(b *testing.B) {
	backend := testutil.Backend(b)
	b.Logf("%s; platform %s", runtime.MustEnvironment(), lowering.PlatformOf(backend))
	pairs := []benchflags.Shape{{K: 4096, N: 4096}, {K: 576, N: 1536}}
	if os.Getenv(testutil.TestAllEnv) == "1" {
		pairs = append(pairs, benchflags.Shape{K: 4096, N: 11008}, benchflags.Shape{K: 2048, N: 8192},
			benchflags.Shape{K: 896, N: 4864})
	}
	formats := append(benchsuite.DenseNames(), benchsuite.QuantizedNames()...)
	for _, pair := range pairs {
		set := []benchflags.Shape{pair}
		if pair.K != pair.N {
			set = append(set, pair.Transposed())
		}
		for _, name := range formats {
			f, err := benchsuite.ParseFormat(name)
			if err != nil {
				b.Fatal(err)
			}
			var w *benchsuite.Weights // made on first use, shared by the strategies
			variants := []lowering.Strategy{lowering.Auto}
			if !f.IsDense() {
				variants = append(variants, lowering.Strategies()...)
			}
			for _, s := range variants {
				label := name
				if s != lowering.Auto {
					label += "@" + s.String()
				}
				for _, m := range []int{1, 16, 256} {
					b.Run(fmt.Sprintf("%s/m=%d/k=%d/n=%d", label, m, pair.K, pair.N), func(b *testing.B) {
						if w == nil {
							if w, err = benchsuite.Prepare(backend, f, set, dtypes.Float32, 128<<20, 2048); err != nil {
								b.Fatal(err)
							}
						}
						runProducts(b, w.WithStrategy(s), m, pair.K)
					})
				}
			}
			if w != nil {
				w.Release()
			}
		}
	}
}

// runProducts compiles the chain for m rows (skipping a strategy that cannot serve it) and times
// it.
func runProducts(b *testing.B, w *benchsuite.Weights, m, k int) {
	backend := testutil.Backend(b)
	e, err := implicitarray.NewExec(backend, benchsuite.Graph(benchsuite.Chain))
	if err != nil {
		b.Fatal(err)
	}
	defer e.Finalize()
	x := benchsuite.Activations(backend, m, k, dtypes.Float32)
	call := func() (err error) {
		defer func() { // an explicit strategy that cannot serve panics with ErrUnsupported
			if r := recover(); r != nil {
				if err, _ = r.(error); err == nil {
					err = fmt.Errorf("%v", r)
				}
			}
		}()
		out, err := e.Call1(x, w.Values)
		if err != nil {
			return err
		}
		return out.(*tensors.Tensor).FinalizeAll()
	}
	if err := call(); err != nil { // compiles
		if errors.Is(err, lowering.ErrUnsupported) {
			b.Skip("the strategy does not serve this product")
		}
		b.Fatal(err)
	}
	b.SetBytes(int64(w.Bytes) * int64(len(w.Values)))
	for b.Loop() {
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N)/float64(len(w.Values)), "ms/product")
}
