package onebit_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/onebit"
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
		{"binary", func() (*onebit.Array, error) { return onebit.QuantizeBinary(x) },
			func(n *graph.Node) *onebit.Array { return onebit.QuantizeBinaryNode(n) }},
		{"binary scaled", func() (*onebit.Array, error) { return onebit.QuantizeBinary(x, onebit.WithScale(0)) },
			func(n *graph.Node) *onebit.Array { return onebit.QuantizeBinaryNode(n, onebit.WithScale(0)) }},
		{"ternary", func() (*onebit.Array, error) { return onebit.QuantizeTernary(x) },
			func(n *graph.Node) *onebit.Array { return onebit.QuantizeTernaryNode(n) }},
		{"ternary bitnet", func() (*onebit.Array, error) { return onebit.QuantizeTernary(x, onebit.BitNet()) },
			func(n *graph.Node) *onebit.Array { return onebit.QuantizeTernaryNode(n, onebit.BitNet()) }},
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
			wantDense, err := implicitarray.MaterializeOnHost(backend, want)
			if err != nil {
				t.Fatal(err)
			}
			g, w := out[1].(*tensors.Tensor), wantDense
			if g.DType() != w.DType() {
				t.Fatalf("materialized dtype %s, host %s", g.DType(), w.DType())
			}
			gf, wf := toFloat64s(g), toFloat64s(w)
			for i := range wf {
				if d := gf[i] - wf[i]; d > 1e-6 || d < -1e-6 {
					t.Fatalf("materialized[%d] = %v, host %v", i, gf[i], wf[i])
				}
			}
		})
	}
}

func toFloat64s(t *tensors.Tensor) []float64 {
	var out []float64
	t.MustConstFlatData(func(flat any) {
		switch v := flat.(type) {
		case []int8:
			for _, e := range v {
				out = append(out, float64(e))
			}
		case []float32:
			for _, e := range v {
				out = append(out, float64(e))
			}
		}
	})
	return out
}

func TestQuantizeNodeErrors(t *testing.T) {
	backend := testutil.Backend(t)
	for _, tc := range []struct {
		name string
		fn   func(*graph.Node) *graph.Node
		arg  any
		want string
	}{
		{"first dim", func(n *graph.Node) *graph.Node { return implicitarray.Materialize(onebit.QuantizeBinaryNode(n)) },
			[]float32{1, 2, 3}, "multiple of 4"},
		{"integer", func(n *graph.Node) *graph.Node { return implicitarray.Materialize(onebit.QuantizeTernaryNode(n)) },
			[]int32{1, 2, 3, 4}, "float dtype"},
		{"bitnet binary", func(n *graph.Node) *graph.Node {
			return implicitarray.Materialize(onebit.QuantizeBinaryNode(n, onebit.BitNet()))
		}, []float32{1, 2, 3, 4}, "ternary rule"},
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
	w := onebit.MustQuantizeTernary(tensors.FromValue([][]float32{{1, -1}, {0.1, 2}, {-3, 0}, {1, 1}}), onebit.WithScale(0))
	e := implicitarray.MustNewExec(backend, func(x *graph.Node, w *onebit.Array) *graph.Node {
		return implicitarray.Materialize(implicitarray.MatMul(x, w))
	})
	_, err := e.Call([][]int32{{1, 2, 3, 4}}, w)
	if err == nil || !strings.Contains(err.Error(), "float activations") {
		t.Errorf("got %v, want an error asking for float activations", err)
	}
}
