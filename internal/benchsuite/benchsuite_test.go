package benchsuite

import (
	"slices"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/quanta-ml/quanta/internal/benchflags"
)

// TestMedian: the middle duration, or the mean of the two middle ones of an even count (Median's
// calls are as often even as odd).
func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		times []time.Duration
		want  time.Duration
	}{
		{[]time.Duration{7}, 7},
		{[]time.Duration{30, 10, 20}, 20},
		{[]time.Duration{40, 10, 30, 20}, 25},
		{[]time.Duration{100, 300}, 200},
	} {
		if got := MedianOf(tc.times); got != tc.want {
			t.Errorf("MedianOf(%v) = %v; want %v", tc.times, got, tc.want)
		}
	}
}

// TestMedianOfSeconds: MedianOf of float64 values (examples/smollm's seconds and bandwidths), as
// Python's statistics.median (llamacpp_speed.py's figures); the input is left unsorted.
func TestMedianOfSeconds(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{7}, 7},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{20, 10}, 15},
	} {
		in := slices.Clone(tc.xs)
		if got := MedianOf(tc.xs); got != tc.want {
			t.Errorf("MedianOf(%v) = %v; want %v", in, got, tc.want)
		}
		if !slices.Equal(in, tc.xs) {
			t.Errorf("MedianOf reordered its input: %v, was %v", tc.xs, in)
		}
	}
}

// TestCheck: every format stores a zero weight whose K is a multiple of 256 in either dtype; one
// whose K is not a multiple of a GGML block, or of the values a byte packs, is refused.
func TestCheck(t *testing.T) {
	for _, name := range append(append([]string{Dense}, QuantizedNames()...), GGMLNames()...) {
		f, err := ParseFormat(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, dtype := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
			if err := Check(f, benchflags.Shape{K: 256, N: 24}, dtype); err != nil {
				t.Errorf("Check(%s, 256x24, %s) = %v", name, dtype, err)
			}
		}
	}
	for _, c := range []struct {
		name  string
		shape benchflags.Shape
	}{{"q4_k", benchflags.Shape{K: 64, N: 256}}, {"q8_0", benchflags.Shape{K: 48, N: 32}}, {"binary1", benchflags.Shape{K: 12, N: 8}}, {"ternary", benchflags.Shape{K: 6, N: 8}}} {
		f, _ := ParseFormat(c.name)
		if err := Check(f, c.shape, dtypes.Float32); err == nil {
			t.Errorf("Check(%s, %s) = nil; want an error", c.name, c.shape)
		}
	}
}
