package nf4_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/x448/float16"
)

// randomF32 returns n normal values with a fixed seed.
func randomF32(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64())
	}
	return out
}

func randomTensor(seed uint64, dims ...int) *tensors.Tensor {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return tensors.FromFlatDataAndDimensions(randomF32(seed, n), dims...)
}

// materialize returns the dense float32 values of a host-side array.
func materialize(t testing.TB, a *nf4.Array) []float32 {
	t.Helper()
	dense, err := implicitarray.MaterializeOnHost(testutil.Backend(t), a)
	if err != nil {
		t.Fatalf("MaterializeOnHost: %+v", err)
	}
	return flatF32(t, dense)
}

// flatF32 returns the tensor's values as float32 (other float dtypes converted on the host).
func flatF32(t testing.TB, x *tensors.Tensor) []float32 {
	t.Helper()
	var out []float32
	x.MustConstFlatData(func(flat any) {
		switch v := flat.(type) {
		case []float32:
			out = append(out, v...)
		case []float64:
			for _, e := range v {
				out = append(out, float32(e))
			}
		case []bfloat16.BFloat16:
			for _, e := range v {
				out = append(out, e.Float32())
			}
		case []float16.Float16:
			for _, e := range v {
				out = append(out, e.Float32())
			}
		default:
			t.Fatalf("flatF32: unsupported dtype %s", x.DType())
		}
	})
	return out
}

// maxAbsDiff returns the largest |a-b| and the largest |b|.
func maxAbsDiff(a, b []float32) (diff, scale float64) {
	for i := range a {
		diff = math.Max(diff, math.Abs(float64(a[i])-float64(b[i])))
		scale = math.Max(scale, math.Abs(float64(b[i])))
	}
	return diff, scale
}
