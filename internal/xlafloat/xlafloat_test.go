package xlafloat_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/internal/xlafloat"
)

// TestHostRounding pins the host rounding on hand-computed values: ties to even, overflow,
// float16 subnormals, NaN.
func TestHostRounding(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fn        func(float32) float32
		in, want  float32
		wantIsNaN bool
	}{
		{"bf16 exact", xlafloat.RoundBF16, 1.5, 1.5, false},
		{"bf16 tie down to even", xlafloat.RoundBF16, 1 + 0x1p-8, 1, false},
		{"bf16 tie up to even", xlafloat.RoundBF16, 1 + 3*0x1p-8, 1 + 0x1p-6, false},
		{"bf16 above tie", xlafloat.RoundBF16, 1 + 0x1p-8 + 0x1p-20, 1 + 0x1p-7, false},
		{"bf16 overflow", xlafloat.RoundBF16, math.MaxFloat32, float32(math.Inf(1)), false},
		{"bf16 NaN", xlafloat.RoundBF16, float32(math.NaN()), 0, true},
		{"f16 tie down to even", xlafloat.RoundF16, 1 + 0x1p-11, 1, false},
		{"f16 tie up to even", xlafloat.RoundF16, 1 + 3*0x1p-11, 1 + 0x1p-9, false},
		{"f16 largest", xlafloat.RoundF16, 65519, 65504, false},
		{"f16 overflow at the tie", xlafloat.RoundF16, 65520, float32(math.Inf(1)), false},
		{"f16 subnormal grid", xlafloat.RoundF16, 3 * 0x1p-26, 0x1p-24, false},
		{"f16 below half the smallest subnormal", xlafloat.RoundF16, 0x1p-26, 0, false},
		{"flush f32 subnormal", xlafloat.FlushF32, 0x1p-127, 0, false},
		{"flush keeps the smallest normal", xlafloat.FlushF32, -0x1p-126, -0x1p-126, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.fn(tc.in)
			if tc.wantIsNaN {
				if got == got {
					t.Errorf("got %v, want NaN", got)
				}
				return
			}
			if got != tc.want {
				t.Errorf("got %v (%#x), want %v (%#x)", got, math.Float32bits(got), tc.want, math.Float32bits(tc.want))
			}
		})
	}
}

// TestRoundNodeMatchesHost runs RoundNode and FlushNode on the backend of the tests and compares
// every value with the host functions: random magnitudes over each format's whole range, exact
// ties, values one float32 ulp either side of ties, float16 subnormals and overflow, zeros, Inf.
func TestRoundNodeMatchesHost(t *testing.T) {
	backend := testutil.Backend(t)
	r := rand.New(rand.NewPCG(7, 11))
	var values []float32
	for range 4000 {
		v := float32(math.Ldexp(1+r.Float64(), r.IntN(260)-130))
		if r.IntN(2) == 0 {
			v = -v
		}
		values = append(values, v)
	}
	for range 2000 {
		// Ties of bfloat16 (8 bits) and float16 (11 bits), and their neighbours.
		bits := []int{8, 11}[r.IntN(2)]
		e := r.IntN(60) - 30
		m := float64(r.IntN(1<<(bits-1)) + 1<<(bits-1))
		tie := float32(math.Ldexp(m+0.5, e-bits+1))
		values = append(values, tie, math.Nextafter32(tie, 0), math.Nextafter32(tie, 10*tie))
	}
	values = append(values, 0, 65504, 65519.99, 65520, 1e5, 0x1p-24, 0x1p-25, 3*0x1p-25, 0x1p-15+0x1p-25,
		float32(math.Inf(1)), float32(math.Inf(-1)), 0x1p-127, -0x1p-149, 0x1p-126, math.MaxFloat32)
	x := tensors.FromFlatDataAndDimensions(values, len(values))
	exec := graph.MustNewExec(backend, func(x *graph.Node) (bf, f16, flushed *graph.Node) {
		return xlafloat.RoundNode(xlafloat.FlushNode(x), xlafloat.BF16, xlafloat.BF16.MinExp, xlafloat.BF16.MaxExp),
			xlafloat.RoundNode(x, xlafloat.F16, xlafloat.F16.MinExp, xlafloat.F16.MaxExp),
			xlafloat.FlushNode(x)
	})
	out := exec.MustExec(x)
	gotBF, gotF16, gotFlush := out[0].Value().([]float32), out[1].Value().([]float32), out[2].Value().([]float32)
	bad := 0
	for i, v := range values {
		for _, c := range []struct {
			what      string
			got, want float32
		}{
			{"bfloat16", gotBF[i], xlafloat.RoundBF16(xlafloat.FlushF32(v))},
			{"float16", gotF16[i], xlafloat.RoundF16(v)},
			{"flush", gotFlush[i], xlafloat.FlushF32(v)},
		} {
			// The sign of a zero is not kept by RoundNode.
			if c.got != c.want && !(c.got == 0 && c.want == 0) {
				if bad++; bad <= 10 {
					t.Errorf("%s of %v (%#x): graph %v, host %v", c.what, v, math.Float32bits(v), c.got, c.want)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d values differ", bad, 3*len(values))
	}
}

// TestRoundNodeRange checks a restricted exponent range: values below 2^lo round on 2^lo's grid.
func TestRoundNodeRange(t *testing.T) {
	backend := testutil.Backend(t)
	values := []float32{0.75, 0.03, 0.0301, 1 + 0x1p-8, 0.5 + 0x1p-9}
	// Below 2^-5 the bfloat16 grid of [2^-5, 2^-4) is used: 2^-5·2^-7 = 2^-12.
	want := []float32{0.75, float32(math.Round(0.03*4096) / 4096), float32(math.Round(0.0301*4096) / 4096), 1, 0.5}
	exec := graph.MustNewExec(backend, func(x *graph.Node) *graph.Node {
		return xlafloat.RoundNode(x, xlafloat.BF16, -5, 0)
	})
	got := exec.MustExec(tensors.FromFlatDataAndDimensions(values, len(values)))[0].Value().([]float32)
	for i := range values {
		if got[i] != want[i] {
			t.Errorf("round(%v) on [2^-5, 2^0]: got %v, want %v", values[i], got[i], want[i])
		}
	}
}

// TestRoundHalfEvenNode: ties go to the even neighbour on every backend, others to the nearest.
func TestRoundHalfEvenNode(t *testing.T) {
	backend := testutil.Backend(t)
	values := []float32{0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 0.50000006, 126.5, -127.5, 3.7, -3.7, 0, 0x1p23 + 1, 1e30,
		float32(math.Inf(-1))}
	want := []float32{0, 2, 2, 0, -2, -2, 0, 1, 126, -128, 4, -4, 0, 0x1p23 + 1, 1e30, float32(math.Inf(-1))}
	exec := graph.MustNewExec(backend, xlafloat.RoundHalfEvenNode)
	got := exec.MustExec(tensors.FromFlatDataAndDimensions(values, len(values)))[0].Value().([]float32)
	for i := range values {
		if got[i] != want[i] {
			t.Errorf("round(%v) = %v, want %v", values[i], got[i], want[i])
		}
	}
}
