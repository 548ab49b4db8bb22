package onebit_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/onebit"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/x448/float16"
)

// TestQuantizeNodeMatchesHost checks the in-graph rules against the host ones, byte for byte, on
// data with no element near the ternary threshold (where float32 and float64 may disagree).
func TestQuantizeNodeMatchesHost(t *testing.T) {
	backend := testutil.Backend(t)
	r := rand.New(rand.NewPCG(3, 4))
	data := make([]float32, 8*6)
	for i := range data {
		data[i] = float32(r.IntN(41)-20) / 8 // multiples of 1/8, including zeros
	}
	data[5] = 0
	x := tensors.FromFlatDataAndDimensions(data, 8, 6)
	for _, tc := range []struct {
		name  string
		host  func() (*onebit.Array, error)
		graph func(*graph.Node) *onebit.Array
	}{
		{"binary", func() (*onebit.Array, error) { return onebit.QuantizeBinary(x, nil) },
			func(n *graph.Node) *onebit.Array { return onebit.QuantizeBinaryNode(n, nil) }},
		{"binary scaled", func() (*onebit.Array, error) {
			return onebit.QuantizeBinary(x, &onebit.Options{Scale: true, ScaleAxes: []int{0}})
		},
			func(n *graph.Node) *onebit.Array {
				return onebit.QuantizeBinaryNode(n, &onebit.Options{Scale: true, ScaleAxes: []int{0}})
			}},
		{"ternary", func() (*onebit.Array, error) { return onebit.QuantizeTernary(x, nil) },
			func(n *graph.Node) *onebit.Array { return onebit.QuantizeTernaryNode(n, nil) }},
		{"ternary bitnet", func() (*onebit.Array, error) { return onebit.QuantizeTernary(x, &onebit.Options{BitNet: true}) },
			func(n *graph.Node) *onebit.Array { return onebit.QuantizeTernaryNode(n, &onebit.Options{BitNet: true}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := tc.host()
			if err != nil {
				t.Fatal(err)
			}
			e := implicitarray.MustNewExec(backend, func(n *graph.Node) (*onebit.Array, *graph.Node) {
				a := tc.graph(n)
				return a, implicitarray.Materialize(a)
			})
			out := e.MustCall(x)
			got := out[0].(*onebit.Array)
			if !got.Shape().Equal(want.Shape()) || got.IsScaled() != want.IsScaled() {
				t.Fatalf("graph array %s scaled=%v, host %s scaled=%v", got.Shape(), got.IsScaled(), want.Shape(), want.IsScaled())
			}
			gotBytes := got.Packed().Tensor().Value().([][]uint8)
			wantBytes := want.Packed().Tensor().Value().([][]uint8)
			for i := range wantBytes {
				if !slices.Equal(gotBytes[i], wantBytes[i]) {
					t.Fatalf("packed row %d: graph %v, host %v", i, gotBytes[i], wantBytes[i])
				}
			}
			wantDense := testutil.Materialize(t, want)
			g, w := out[1].(*tensors.Tensor), wantDense
			if g.DType() != w.DType() {
				t.Fatalf("materialized dtype %s, host %s", g.DType(), w.DType())
			}
			testutil.Close(t, "materialized", testutil.Float64s(t, g), testutil.Float64s(t, w),
				func(float64) float64 { return 1e-6 })
		})
	}
}

func TestQuantizeNodeErrors(t *testing.T) {
	backend := testutil.Backend(t)
	for _, tc := range []struct {
		name string
		fn   func(*graph.Node) *graph.Node
		arg  any
		want string
	}{
		{"first dim", func(n *graph.Node) *graph.Node { return implicitarray.Materialize(onebit.QuantizeBinaryNode(n, nil)) },
			[]float32{1, 2, 3}, "multiple of 4"},
		{"integer", func(n *graph.Node) *graph.Node { return implicitarray.Materialize(onebit.QuantizeTernaryNode(n, nil)) },
			[]int32{1, 2, 3, 4}, "float dtype"},
		{"bitnet binary", func(n *graph.Node) *graph.Node {
			return implicitarray.Materialize(onebit.QuantizeBinaryNode(n, &onebit.Options{BitNet: true}))
		}, []float32{1, 2, 3, 4}, "ternary rule"},
		{"empty", func(n *graph.Node) *graph.Node { return implicitarray.Materialize(onebit.QuantizeTernaryNode(n, nil)) },
			tensors.FromShape(shapes.Make(dtypes.Float32, 4, 0)), "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := graph.MustNewExec(backend, tc.fn).Exec(tc.arg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
	_ = dtypes.Int8
}

// TestScaledDotRejectsIntegerActivations: a float scale cannot be applied in an integer product.
func TestScaledDotRejectsIntegerActivations(t *testing.T) {
	backend := testutil.Backend(t)
	w := onebit.MustQuantizeTernary(tensors.FromValue([][]float32{{1, -1}, {0.1, 2}, {-3, 0}, {1, 1}}), &onebit.Options{Scale: true, ScaleAxes: []int{0}})
	e := implicitarray.MustNewExec(backend, func(x *graph.Node, w *onebit.Array) *graph.Node {
		return implicitarray.Materialize(implicitarray.MatMul(x, w))
	})
	_, err := e.Call([][]int32{{1, 2, 3, 4}}, w)
	if err == nil || !strings.Contains(err.Error(), "float activations") {
		t.Errorf("got %v, want an error asking for float activations", err)
	}
}

// TestXLAArithmetic pins the rules that follow XLA CPU's arithmetic, for the host and the graph
// quantizers. Expected values are eformer 0.0.101's (quantize(x, dtype=..., simulate=True) on jax
// 0.11.2 CPU), except the float16 overflow case (a deliberate difference, computed by hand).
func TestXLAArithmetic(t *testing.T) {
	backend := testutil.Backend(t)
	bf16Bits := func(bits ...uint16) *tensors.Tensor {
		out := make([]bfloat16.BFloat16, len(bits))
		for i, b := range bits {
			out[i] = bfloat16.BFloat16(b)
		}
		return tensors.FromFlatDataAndDimensions(out, len(bits))
	}
	f16 := func(values ...float32) *tensors.Tensor {
		out := make([]float16.Float16, len(values))
		for i, v := range values {
			out[i] = float16.Fromfloat32(v)
		}
		return tensors.FromFlatDataAndDimensions(out, len(values))
	}
	f32 := func(values ...float32) *tensors.Tensor { return tensors.FromFlatDataAndDimensions(values, len(values)) }
	for _, tc := range []struct {
		name    string
		ternary bool
		x       *tensors.Tensor
		want    []int8
	}{
		// float32 subnormals read as zero: sign 0, mapped to +1.
		{"binary float32 subnormals", false, f32(1e-40, -1e-40, float32(math.Copysign(0, -1)), -1), []int8{1, 1, 1, -1}},
		// float16 subnormals are normal float32s: their sign counts.
		{"binary float16 subnormals", false, f16(6e-8, -6e-8, float32(math.Copysign(0, -1)), -1), []int8{1, -1, 1, -1}},
		{"ternary float32 subnormals", true, f32(1e-40, -1e-40, 0, -2e-40), []int8{0, 0, 0, 0}},
		// bfloat16: the variance is rounded to bfloat16 and so is its square root: the threshold
		// is 0.3046875 (0x3e9c), exactly the first two values, which go to 0. The float64
		// threshold 0.30349 would make them ±1.
		{"ternary bfloat16 threshold in bfloat16", true,
			bf16Bits(0x3e9c, 0xbe9c, 0x3fc9, 0xbdc5, 0x3f2e, 0xbe0c, 0xbec2, 0x3eed), []int8{0, 0, 1, 0, 1, 0, -1, 1}},
		// Deliberate difference: the variance 1e6 overflows float16, so eformer's threshold is +Inf
		// and every value 0; quanta uses sqrt(1e6) = 1000, threshold 500.
		{"ternary float16 variance overflow", true, f16(1000, -1000, 1000, -1000), []int8{1, -1, 1, -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			quantize, quantizeNode := onebit.QuantizeBinary, onebit.QuantizeBinaryNode
			if tc.ternary {
				quantize, quantizeNode = onebit.QuantizeTernary, onebit.QuantizeTernaryNode
			}
			host, err := quantize(tc.x, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := values(t, host); !slices.Equal(got, tc.want) {
				t.Errorf("host: values %v, want %v", got, tc.want)
			}
			if tc.x.DType() == dtypes.Float16 && runtime.IsGo(backend) {
				t.Skip("the pure-Go backend has no float16")
			}
			e := implicitarray.MustNewExec(backend, func(n *graph.Node) *onebit.Array { return quantizeNode(n, nil) })
			defer e.Finalize()
			if got := values(t, e.MustCall1(tc.x).(*onebit.Array)); !slices.Equal(got, tc.want) {
				t.Errorf("graph: values %v, want %v", got, tc.want)
			}
		})
	}
}
