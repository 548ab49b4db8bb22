package int8_test

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/runtime"
)

// benchWeights is the number of distinct weights cycled through, so they stream from memory
// (8 x 4096 x 4096 int8 is 128 MiB, beyond a 32 MiB last-level cache).
const benchWeights = 8

// BenchmarkMatMul compares x @ w for int8 weights (default axis: (K, 1) scales; and the (N, K)
// layout through einsum "bk,nk->bn"), dense weights, and eformer's materialize-then-dot.
func BenchmarkMatMul(b *testing.B) {
	backend := testutil.Backend(b)
	if runtime.IsGo(backend) {
		b.Skip("4096x4096 products are too slow on the pure-Go backend for a benchmark run")
	}
	const k, n = 4096, 4096
	rng := rand.New(rand.NewSource(1))
	dense := make([]*tensors.Tensor, benchWeights)
	quant := make([]*qint8.Array, benchWeights)
	for i := range dense {
		dense[i] = randomTensor(rng, k, n)
		quant[i] = qint8.MustQuantize(dense[i])
	}
	run := func(name string, x *tensors.Tensor, weights []any, bytes int64, fn any) {
		b.Run(name, func(b *testing.B) {
			e := implicitarray.MustNewExec(backend, fn)
			defer e.Finalize()
			for _, w := range weights { // compile, and place every weight on the device
				e.MustCall1(x, w).(*tensors.Tensor).MustFinalizeAll()
			}
			b.SetBytes(bytes)
			i := 0
			for b.Loop() {
				e.MustCall1(x, weights[i%benchWeights]).(*tensors.Tensor).MustFinalizeAll()
				i++
			}
		})
	}
	anyOf := func(ws []*qint8.Array, l qint8.Lowering) []any {
		out := make([]any, len(ws))
		for i, w := range ws {
			out[i] = w.WithLowering(l)
		}
		return out
	}
	denseAny := map[dtypes.DType][]any{}
	for _, d := range dense {
		denseAny[dtypes.Float32] = append(denseAny[dtypes.Float32], d)
		values := tensors.MustCopyFlatData[float32](d)
		half := make([]bfloat16.BFloat16, len(values))
		for j, v := range values {
			half[j] = qint8.RoundToBFloat16(v)
		}
		denseAny[dtypes.BFloat16] = append(denseAny[dtypes.BFloat16], tensors.FromFlatDataAndDimensions(half, k, n))
	}
	for _, m := range []int{1, 2048} {
		for _, act := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
			if m > 1 && act != dtypes.Float32 {
				continue
			}
			x := randomTensor(rng, m, k)
			prefix := fmt.Sprintf("m=%d/k=%d/n=%d/%s", m, k, n, act)
			matmul := func(x *graph.Node, w implicitarray.Value) *graph.Node {
				return implicitarray.MatMul(graph.ConvertDType(x, act), w).(*graph.Node)
			}
			int8Bytes := int64(quant[0].Bytes())
			run(prefix+"/dense", x, denseAny[act], int64(k*n*act.Size()), func(x, w *graph.Node) *graph.Node {
				return matmul(x, w)
			})
			run(prefix+"/int8", x, anyOf(quant, qint8.LoweringAuto), int8Bytes, func(x *graph.Node, w *qint8.Array) *graph.Node {
				return matmul(x, w)
			})
			run(prefix+"/int8-nk-layout", x, anyOf(quant, qint8.LoweringAuto), int8Bytes, func(x *graph.Node, w *qint8.Array) *graph.Node {
				return implicitarray.Einsum("bk,nk->bn", graph.ConvertDType(x, act), w).(*graph.Node)
			})
			if m == 1 {
				run(prefix+"/materialize-then-dot", x, anyOf(quant, qint8.LoweringMaterialize), int8Bytes, func(x *graph.Node, w *qint8.Array) *graph.Node {
					return matmul(x, w)
				})
			}
		}
	}
}
