package quanta_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/onebit"
)

// configs covers every Type, the scaled 1-bit variants and a non-default block size.
var configs = []quanta.Config{
	{Type: quanta.NF4},
	{Type: quanta.NF4, BlockSize: 32},
	{Type: quanta.NF4, DoubleQuant: true},
	{Type: quanta.Int8},
	{Type: quanta.Binary},
	{Type: quanta.Binary, Scaled: true},
	{Type: quanta.Ternary},
	{Type: quanta.Ternary, Scaled: true},
	{Type: quanta.Ternary, BitNet: true},
}

func name(c quanta.Config) string {
	return fmt.Sprintf("%s/block=%d/scaled=%v/bitnet=%v/dq=%v", c.Type, c.EffectiveBlockSize(), c.Scaled, c.BitNet, c.DoubleQuant)
}

func TestQuantizeDispatches(t *testing.T) {
	backend := testutil.Backend(t)
	w := testutil.RandomTensor(1, 8, 64)
	for _, cfg := range configs {
		t.Run(name(cfg), func(t *testing.T) {
			v, err := quanta.Quantize(w, cfg)
			if err != nil {
				t.Fatal(err)
			}
			switch a := v.(type) {
			case *nf4.Array:
				if cfg.Type != quanta.NF4 || a.BlockSize() != cfg.EffectiveBlockSize() || a.DoubleQuantized() != cfg.DoubleQuant {
					t.Errorf("got nf4 block %d for %s", a.BlockSize(), name(cfg))
				}
			case *qint8.Array:
				if cfg.Type != quanta.Int8 {
					t.Errorf("got int8 for %s", name(cfg))
				}
			case *onebit.Array:
				if (cfg.Type != quanta.Binary && cfg.Type != quanta.Ternary) || a.IsScaled() != (cfg.Scaled || cfg.BitNet) {
					t.Errorf("got onebit scaled=%v for %s", a.IsScaled(), name(cfg))
				}
			default:
				t.Fatalf("got %T", v)
			}
			// Simulate returns exactly the materialized array.
			got, err := quanta.Simulate(backend, w, cfg)
			if err != nil {
				t.Fatal(err)
			}
			want := testutil.Materialize(t, v)
			if !got.Shape().Equal(want.Shape()) {
				t.Fatalf("simulate shape %s, want %s", got.Shape(), want.Shape())
			}
			testutil.Close(t, "simulate", testutil.Float64s(t, got), testutil.Float64s(t, want), testutil.Exact)
		})
	}
}

// TestStraightThrough checks, for every Type, that the forward value equals the materialized
// host-side quantization (in the weights' dtype) and that the gradient of sum(ST(w)*c) is c.
func TestStraightThrough(t *testing.T) {
	backend := testutil.Backend(t)
	w := testutil.RandomTensor(2, 8, 64)
	c := testutil.RandomTensor(3, 8, 64)
	for _, cfg := range configs {
		t.Run(name(cfg), func(t *testing.T) {
			e := graph.MustNewExec(backend, func(w, c *graph.Node) (*graph.Node, *graph.Node) {
				q := quanta.StraightThrough(w, cfg)
				return q, graph.Gradient(graph.ReduceAllSum(graph.Mul(q, c)), w)[0]
			})
			fwd, grad := e.MustExec2(w, c)
			ref := testutil.Materialize(t, quanta.MustQuantize(w, cfg))
			testutil.Close(t, "forward", testutil.Float64s(t, fwd), testutil.Float64s(t, ref), testutil.Exact)
			if fwd.DType() != w.DType() {
				t.Errorf("forward dtype %s, want the weights' %s", fwd.DType(), w.DType())
			}
			testutil.Close(t, "grad", testutil.Float64s(t, grad), testutil.Float64s(t, c), testutil.Exact)
		})
	}
}

// TestStrategyReachesProducts checks that Config.Strategy reaches the products: Materialize
// materializes the weight, the default (Auto) does not.
func TestStrategyReachesProducts(t *testing.T) {
	backend := testutil.Backend(t)
	w := testutil.RandomTensor(4, 64, 64)
	x := testutil.RandomTensor(5, 2, 64)
	for _, typ := range quanta.Types() {
		for _, s := range []lowering.Strategy{lowering.Auto, lowering.Materialize} {
			t.Run(fmt.Sprintf("%s/%s", typ, s), func(t *testing.T) {
				a := quanta.MustQuantize(w, quanta.Config{Type: typ, Strategy: s})
				implicitarray.ResetStats()
				e := implicitarray.MustNewExec(backend, func(x *graph.Node, w implicitarray.Array) *graph.Node {
					return implicitarray.Materialize(implicitarray.MatMul(x, w))
				})
				defer e.Finalize()
				e.MustCall1(x, a)
				n := implicitarray.CurrentStats().Materializations[implicitarray.TypeName(a)]
				if (s == lowering.Materialize) != (n > 0) {
					t.Errorf("materializations = %d with strategy %s", n, s)
				}
			})
		}
	}
}

func TestQuantizeErrors(t *testing.T) {
	w := testutil.RandomTensor(6, 6, 64)
	for _, tc := range []struct {
		name string
		cfg  quanta.Config
		in   *tensors.Tensor
		want string
	}{
		{"odd block", quanta.Config{BlockSize: 3}, w, "odd"},
		{"bitnet binary", quanta.Config{Type: quanta.Binary, BitNet: true}, w, "ternary rule"},
		{"binary rows", quanta.Config{Type: quanta.Binary}, w, "multiple of 4"},
		{"nil", quanta.Config{}, nil, "nil tensor"},
		{"integer", quanta.Config{Type: quanta.Int8}, tensors.FromValue([]int32{1, 2}), "Int32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := quanta.Quantize(tc.in, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

// TestStraightThroughAnyRows checks that binary and ternary STEs need no packable first dimension:
// the hand-computed sign and threshold rules on a 3x2 weight.
func TestStraightThroughAnyRows(t *testing.T) {
	backend := testutil.Backend(t)
	w := [][]float32{{0.5, -2}, {0, 1}, {-0.1, 3}}
	// mean 0.4, population std sqrt(2.9) ≈ 1.703, threshold ≈ 0.851.
	for _, tc := range []struct {
		typ  quanta.Type
		want []float64
	}{
		{quanta.Binary, []float64{1, -1, 1, 1, -1, 1}},
		{quanta.Ternary, []float64{0, -1, 0, 1, 0, 1}},
	} {
		e := graph.MustNewExec(backend, func(w *graph.Node) *graph.Node {
			return quanta.StraightThrough(w, quanta.Config{Type: tc.typ})
		})
		got := testutil.Float64s(t, e.MustExec1(w))
		for i := range tc.want {
			if got[i] != tc.want[i] {
				t.Errorf("%s: got %v, want %v", tc.typ, got, tc.want)
				break
			}
		}
	}
}

// BenchmarkQuantize times the host quantizer of every configuration on a float32 weight of
// Llama-7B's attention shape (what a model converted at load pays per projection); b.SetBytes
// counts the float input.
func BenchmarkQuantize(b *testing.B) {
	w := testutil.RandomTensor(1, 4096, 4096)
	for _, c := range configs {
		b.Run(name(c)+"/float32/4096x4096", func(b *testing.B) {
			b.SetBytes(int64(w.Shape().Memory()))
			for b.Loop() {
				a, err := quanta.Quantize(w, c)
				if err != nil {
					b.Fatal(err)
				}
				a.(interface{ Delete() }).Delete() // every format's arrays release their buffers
			}
		})
	}
}

// TestStraightThroughScaledOneBitBits checks that the straight-through forward value of the scaled
// binary and ternary rules and BitNet equals, bit for bit, what Quantize stores (the weights PTQ
// gives after QAT), against a float64 recomputation of the rules: scale = mean|x| per column
// rounded to float32, BitNet values clip(round(x / mean)) with the unrounded mean, dense values
// v × scale in float32. Column 0 has x / mean just above 1/2 (8·x > sum(x) exactly) in float64, but
// exactly 1/2 with a float32 mean; the random columns have float32 means that differ in the last bit.
func TestStraightThroughScaledOneBitBits(t *testing.T) {
	backend := testutil.Backend(t)
	const rows, cols = 4, 33
	vals := make([]float32, rows*cols)
	for i, v := range []float32{0.23519848, 0.6764557, 0.4613862, 0.5085474} {
		vals[i*cols] = v
	}
	r := testutil.RandomValues(9, rows*cols)
	for i := range rows {
		for j := 1; j < cols; j++ {
			vals[i*cols+j] = r[i*cols+j]
		}
	}
	w := tensors.FromFlatDataAndDimensions(vals, rows, cols)
	if 8*float64(vals[0]) <= float64(vals[0])+float64(vals[cols])+float64(vals[2*cols])+float64(vals[3*cols]) {
		t.Fatal("column 0 must have x / mean(|x|) > 1/2")
	}
	var mean64, variance float64
	for _, v := range vals {
		mean64 += float64(v)
	}
	mean64 /= float64(len(vals))
	for _, v := range vals {
		variance += (float64(v) - mean64) * (float64(v) - mean64)
	}
	variance /= float64(len(vals))
	threshold := float64(float32(0.5 * float64(float32(math.Sqrt(float64(float32(variance)))))))
	for _, cfg := range []quanta.Config{
		{Type: quanta.Binary, Scaled: true},
		{Type: quanta.Ternary, Scaled: true},
		{Type: quanta.Ternary, BitNet: true},
	} {
		t.Run(name(cfg), func(t *testing.T) {
			want := make([]float32, len(vals))
			for j := range cols {
				var mean float64
				for i := range rows {
					mean += math.Abs(float64(vals[i*cols+j]))
				}
				mean /= rows
				for i := range rows {
					x := float64(vals[i*cols+j])
					var v float64
					switch {
					case cfg.Type == quanta.Binary:
						v = 1
						if x < 0 {
							v = -1
						}
					case cfg.BitNet:
						if v = math.Max(-1, math.Min(1, math.RoundToEven(x/mean))); v == 0 {
							v = 0 // an int8 value: no negative zero
						}
					case x > threshold:
						v = 1
					case x < -threshold:
						v = -1
					}
					want[i*cols+j] = float32(v) * float32(mean)
				}
			}
			if cfg.BitNet && want[0] == 0 {
				t.Fatal("the reference rounds column 0's first value to 0")
			}
			e := graph.MustNewExec(backend, func(w *graph.Node) *graph.Node { return quanta.StraightThrough(w, cfg) })
			testutil.SameBits(t, "StraightThrough", testutil.Float32s(t, e.MustExec1(w)), want)
			testutil.SameBits(t, "Simulate", testutil.Float32s(t, quanta.MustSimulate(backend, w, cfg)), want)
		})
	}
}
