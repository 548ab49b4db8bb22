package benchsuite

import (
	"slices"
	"testing"
	"time"
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
