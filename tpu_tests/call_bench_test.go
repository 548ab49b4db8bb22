package tpu_tests

import (
	"fmt"
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/benchflags"
	"github.com/quanta-ml/quanta/internal/benchsuite"
)

// BenchmarkAcceleratorCall separates what one call of a product graph costs on the device from
// what its products cost: the add context of the bench (y = Σ x·W_i) over 2 or 16 distinct
// 4096x4096 weights in bfloat16, dense and NF4, the activations already on the device, with the
// result left there or copied to the host. Per product, 16 layers against 2 gives the products'
// own time; what 2 layers cost beyond that is the call; the copy is the transfer.
func BenchmarkAcceleratorCall(b *testing.B) {
	backend := accelerator(b)
	shape := []benchflags.Shape{{K: 4096, N: 4096}}
	for _, name := range []string{benchsuite.Dense, "nf4"} {
		format, err := benchsuite.ParseFormat(name)
		if err != nil {
			b.Fatal(err)
		}
		for _, layers := range []int{2, 16} {
			w, err := benchsuite.Prepare(backend, format, shape, dtypes.BFloat16, math.MaxInt64, layers)
			if err != nil {
				b.Fatalf("%+v", err)
			}
			for _, rows := range []int{1, 256} {
				x := benchsuite.Activations(backend, rows, shape[0].K, dtypes.BFloat16)
				for _, copyBack := range []bool{false, true} {
					b.Run(fmt.Sprintf("%s/layers=%d/m=%d/copy=%v", name, len(w.Values), rows, copyBack), func(b *testing.B) {
						e, err := implicitarray.NewExec(backend, benchsuite.Graph(benchsuite.Add))
						if err != nil {
							b.Fatalf("%+v", err)
						}
						defer e.Finalize()
						call := func() {
							out, err := e.Call1(x, w.Values)
							if err != nil {
								b.Fatalf("%+v", err)
							}
							y := out.(*tensors.Tensor)
							if copyBack {
								y.MustConstFlatData(func(any) {})
							}
							_ = y.FinalizeAll()
						}
						call() // compiles; b.Loop times from its first call
						for b.Loop() {
							call()
						}
						b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(w.Values)), "µs/product")
					})
				}
				_ = x.FinalizeAll()
			}
			w.Release()
		}
	}
}
