package benchsuite

import (
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
		if got := median(tc.times); got != tc.want {
			t.Errorf("median(%v) = %v; want %v", tc.times, got, tc.want)
		}
	}
}
