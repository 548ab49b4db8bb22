package bnb

import "testing"

// TestPyFloat: Python's repr of floats, as json.dumps writes them (values checked in Python 3.11).
func TestPyFloat(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{1, "1.0"}, {0.1862918734550476, "0.1862918734550476"}, {1e-05, "1e-05"}, {0.0001, "0.0001"},
		{1.5e-07, "1.5e-07"}, {123456789012345.0, "123456789012345.0"}, {1e16, "1e+16"}, {-2.5, "-2.5"},
		{0, "0.0"}, {3.0517578125e-05, "3.0517578125e-05"},
	} {
		if got := pyFloat(tc.in); got != tc.want {
			t.Errorf("pyFloat(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
