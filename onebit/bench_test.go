package onebit_test

import (
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/onebit"
	"github.com/quanta-ml/quanta/runtime"
)

const (
	benchK, benchN = 4096, 4096
	// benchWeights distinct weights per format are cycled so that decode-size products stream
	// their weights from memory (8 dense f32 weights are 512 MiB, far beyond the LLC).
	benchWeights = 8
)

var benchData = sync.OnceValue(func() (d struct {
	dense        []*tensors.Tensor
	twoBit       []implicitarray.Array
	oneBit       []implicitarray.Array
	twoBitValues [][]int8
}) {
	r := rand.New(rand.NewSource(1))
	for range benchWeights {
		ternary := randomValues(r, onebit.TwoBit, benchK*benchN)
		binary := randomValues(r, onebit.OneBit, benchK*benchN)
		d.dense = append(d.dense, tensors.FromFlatDataAndDimensions(toF32(ternary), benchK, benchN))
		d.twoBit = append(d.twoBit, onebit.MustPack(tensors.FromFlatDataAndDimensions(ternary, benchK, benchN)))
		d.oneBit = append(d.oneBit, onebit.MustPackBits(tensors.FromFlatDataAndDimensions(binary, benchK, benchN)))
	}
	return
})

// BenchmarkMatMul times x @ W for M rows, K = N = 4096, against a dense float32 weight timed in
// the same run (metric "x-vs-dense": dense time / this time, above 1 is faster), and reports the
// weight's bytes per parameter.
func BenchmarkMatMul(b *testing.B) {
	backend := runtime.MustBackend()
	if runtime.IsGo(backend) {
		b.Skip("benchmarks are for XLA: the pure-Go backend is a correctness fallback")
	}
	data := benchData()
	dot := func(x *graph.Node, w implicitarray.Value) *graph.Node {
		return implicitarray.Materialize(implicitarray.MatMul(x, w))
	}
	timeFormat := func(b *testing.B, x *tensors.Tensor, weights []any, e *implicitarray.Exec, loop bool) time.Duration {
		for _, w := range weights { // compile and transfer the weights first
			e.MustCall1(x, w).(*tensors.Tensor).FinalizeAll()
		}
		i := 0
		start := time.Now()
		if loop {
			for b.Loop() {
				e.MustCall1(x, weights[i%len(weights)]).(*tensors.Tensor).FinalizeAll()
				i++
			}
		} else {
			for range b.N {
				e.MustCall1(x, weights[i%len(weights)]).(*tensors.Tensor).FinalizeAll()
				i++
			}
		}
		return time.Since(start)
	}
	for _, m := range []int{1, 2048} {
		x := tensors.FromFlatDataAndDimensions(smallInts(rand.New(rand.NewSource(2)), m*benchK), m, benchK)
		denseExec := implicitarray.MustNewExec(backend, func(x, w *graph.Node) *graph.Node { return dot(x, w) })
		denseWeights := make([]any, benchWeights)
		for i, w := range data.dense {
			denseWeights[i] = w
		}
		formats := []struct {
			name     string
			weights  []implicitarray.Array
			strategy onebit.MatMulStrategy
		}{
			{"dense-f32", nil, onebit.Auto},
			{"2bit", data.twoBit, onebit.Auto},
			{"1bit", data.oneBit, onebit.Auto},
			{"2bit-materialize", data.twoBit, onebit.MaterializeDot},
		}
		for _, f := range formats {
			b.Run(fmt.Sprintf("m=%d/k=%d/n=%d/%s", m, benchK, benchN, f.name), func(b *testing.B) {
				if f.weights == nil {
					b.SetBytes(4 * benchK * benchN)
					timeFormat(b, x, denseWeights, denseExec, true)
					b.ReportMetric(4, "bytes/param")
					return
				}
				weights := make([]any, len(f.weights))
				for i, w := range f.weights {
					weights[i] = withStrategy(w, f.strategy)
				}
				bytes := f.weights[0].(interface{ NumBytes() int }).NumBytes()
				b.SetBytes(int64(bytes))
				e := implicitarray.MustNewExec(backend, func(x *graph.Node, w implicitarray.Array) *graph.Node { return dot(x, w) })
				defer e.Finalize()
				elapsed := timeFormat(b, x, weights, e, true)
				dense := timeFormat(b, x, denseWeights, denseExec, false)
				b.ReportMetric(float64(dense)/float64(elapsed), "x-vs-dense")
				b.ReportMetric(float64(bytes)/float64(benchK*benchN), "bytes/param")
			})
		}
		denseExec.Finalize()
	}
}
