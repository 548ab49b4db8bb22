package nf4_test

import (
	"fmt"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/runtime"
)

// benchWeights is the number of distinct weights a decode-size benchmark cycles through, so that
// every call streams its weight from memory (8 × 64 MiB dense ≫ the 32 MiB LLC).
const benchWeights = 8

// BenchmarkMatMul measures x @ W with W (k, n) in eformer's layout (blocks along n) for dense
// float32 and NF4 with each lowering strategy, all in one run on the test backend. SetBytes is the
// weight's stored bytes, so MB/s is the weight bandwidth. Run a subset with e.g.
// -bench 'MatMul/m=1/' -benchtime 20x.
func BenchmarkMatMul(b *testing.B) {
	backend := testutil.Backend(b)
	const k, n = 4096, 4096
	dense := make([]*tensors.Tensor, benchWeights)
	quant := make([]*nf4.Array, benchWeights)
	for i := range dense {
		dense[i] = randomTensor(uint64(100+i), k, n)
		quant[i] = nf4.MustQuantize(dense[i], nf4.DefaultBlockSize)
	}
	strategies := append([]lowering.Strategy{lowering.Auto}, lowering.Strategies()...)
	for _, m := range []int{1, 8, 64, 512, 2048} {
		x := randomTensor(7, m, k)
		b.Run(fmt.Sprintf("m=%d/k=%d/n=%d", m, k, n), func(b *testing.B) {
			b.Run("dense", func(b *testing.B) {
				e := implicitarray.MustNewExec(backend, func(x, w *graph.Node) *graph.Node { return graph.Dot(x, w) })
				defer e.Finalize()
				runCycling(b, e, x, func(i int) any { return dense[i] }, int64(k*n*4))
			})
			for _, s := range strategies {
				// Skip the small-M strategies where they take seconds per call (see the lowering doc).
				if !s.Applicable(lowering.BlocksFree) || (s == lowering.MulReduce && m > 8) ||
					(s == lowering.ProductTable && m > 1) {
					continue
				}
				if runtime.IsGo(backend) && s == lowering.MulReduce && m > 1 {
					continue // the pure-Go backend does not fuse: minutes per call
				}
				b.Run("nf4-"+s.String(), func(b *testing.B) {
					e := implicitarray.MustNewExec(backend, func(x *graph.Node, w *nf4.Array) *graph.Node {
						return implicitarray.MatMul(x, w).(*graph.Node)
					})
					defer e.Finalize()
					runCycling(b, e, x, func(i int) any { return quant[i].WithStrategy(s) }, quant[0].Bytes())
				})
			}
		})
	}
}

// runCycling compiles and warms up (every weight once, so all live on the device), then times
// calls cycling through the weights.
func runCycling(b *testing.B, e *implicitarray.Exec, x *tensors.Tensor, weight func(i int) any, bytes int64) {
	ws := make([]any, benchWeights)
	for i := range ws {
		ws[i] = weight(i)
		e.MustCall1(x, ws[i]).(*tensors.Tensor).MustFinalizeAll()
	}
	b.SetBytes(bytes)
	b.ResetTimer()
	i := 0
	for b.Loop() {
		e.MustCall1(x, ws[i%benchWeights]).(*tensors.Tensor).MustFinalizeAll()
		i++
	}
}

// BenchmarkQuantize measures the host-side quantizer (pure Go, parallel over blocks).
func BenchmarkQuantize(b *testing.B) {
	const k, n = 4096, 4096
	w := randomTensor(1, k, n)
	b.Run(fmt.Sprintf("k=%d/n=%d", k, n), func(b *testing.B) {
		b.SetBytes(int64(k * n * 4))
		for b.Loop() {
			nf4.MustQuantize(w, nf4.DefaultBlockSize)
		}
	})
}
