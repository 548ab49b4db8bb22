package testutil

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"
)

func TestBackend(t *testing.T) {
	if backend := Backend(t); backend.NumDevices() < 1 {
		t.Errorf("backend %q has no devices", backend.Name())
	}
}

func TestSlow(t *testing.T) {
	ran := false
	t.Run("slow", func(t *testing.T) {
		Slow(t)
		ran = true
	})
	if want := os.Getenv(TestAllEnv) == "1"; ran != want {
		t.Errorf("with %s=%q the slow test ran=%v, want %v", TestAllEnv, os.Getenv(TestAllEnv), ran, want)
	}
}

// recorder is a testing.TB that records the first failure instead of stopping.
type recorder struct {
	testing.TB
	failure string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	if r.failure == "" {
		r.failure = fmt.Sprintf(format, args...)
	}
}

func TestClose(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, tc := range []struct {
		name      string
		got, want []float64
		bound     func(float64) float64
		failure   string
	}{
		{"exact", []float64{1, inf}, []float64{1, inf}, Exact, ""},
		{"exact differs", []float64{1, 2}, []float64{1, 2.5}, Exact, "x[1] = 2, want 2.5 (bound 0)"},
		{"mixed absolute near zero", []float64{0.01}, []float64{0}, Mixed(0.01), ""},
		{"mixed relative", []float64{101}, []float64{100}, Mixed(0.01), ""},
		{"mixed too far", []float64{102}, []float64{100}, Mixed(0.01), "x[0] = 102, want 100 (bound 1)"},
		{"nan", []float64{nan}, []float64{nan}, Mixed(1), "x[0] = NaN, want NaN (bound NaN)"},
		{"length", []float64{1}, []float64{1, 2}, Exact, "x: 1 values, want 2"},
	} {
		r := &recorder{TB: t}
		Close(r, "x", tc.got, tc.want, tc.bound)
		if r.failure != tc.failure {
			t.Errorf("%s: failure %q, want %q", tc.name, r.failure, tc.failure)
		}
	}
}

func TestWantError(t *testing.T) {
	for _, tc := range []struct {
		err     error
		wantErr string
		wanted  bool
		failure string
	}{
		{nil, "", false, ""},
		{errors.New("bad axis"), "axis", true, ""},
		{errors.New("bad axis"), "", false, "bad axis"},
		{nil, "axis", true, `error <nil>, want one containing "axis"`},
		{errors.New("bad shape"), "axis", true, `error bad shape, want one containing "axis"`},
	} {
		r := &recorder{TB: t}
		if wanted := WantError(r, tc.err, tc.wantErr); wanted != tc.wanted || r.failure != tc.failure {
			t.Errorf("WantError(%v, %q) = %v, failure %q; want %v, %q", tc.err, tc.wantErr, wanted, r.failure, tc.wanted, tc.failure)
		}
	}
}

func TestBroadcastIndex(t *testing.T) {
	// dims (2, 3, 4) with a scale (2, 1, 4): element (1, 2, 3), flat 23, reads scale (1, 0, 3), flat 7.
	if got := BroadcastIndex(23, []int{2, 3, 4}, []int{2, 1, 4}); got != 7 {
		t.Errorf("BroadcastIndex(23, [2 3 4], [2 1 4]) = %d, want 7", got)
	}
}

func TestConverted(t *testing.T) {
	if got, want := Converted[float32]([]int8{-128, 0, 127}), []float32{-128, 0, 127}; !slices.Equal(got, want) {
		t.Errorf("Converted[float32](int8) = %v, want %v", got, want)
	}
	// 0.1 is not a float32: the conversion rounds it to the nearest one.
	if got, want := Converted[float32]([]float64{0.1, -2.5}), []float32{0.1, -2.5}; !slices.Equal(got, want) {
		t.Errorf("Converted[float32](float64) = %v, want %v", got, want)
	}
	if got, want := Converted[float64]([]float32{0.1}), []float64{float64(float32(0.1))}; !slices.Equal(got, want) {
		t.Errorf("Converted[float64](float32) = %v, want %v", got, want)
	}
}

func TestTableProducts(t *testing.T) {
	// table [[1, 2], [3, 4]]: row 1 is [3, 4]; x = [1, 1] gives x·tableᵀ = [3, 7].
	table := []float32{1, 2, 3, 4}
	for _, tc := range []struct {
		head    []float64
		failure string
	}{
		{[]float64{3, 7}, ""},
		{[]float64{3, 7.5}, "head[0, 1] = 7.5; x·tableᵀ of the dequantized table 7"},
		{[]float64{3}, "2 looked-up values and 1 head values; want 2 and 2"},
	} {
		r := &recorder{TB: t}
		TableProducts(r, table, 2, []int32{1}, []float32{3, 4}, []float64{1, 1}, tc.head)
		if r.failure != tc.failure {
			t.Errorf("head %v: failure %q, want %q", tc.head, r.failure, tc.failure)
		}
	}
}

func TestRecoverError(t *testing.T) {
	sentinel := errors.New("bad shape")
	run := func(v any) (err error) {
		defer RecoverError(&err)
		if v != nil {
			panic(v)
		}
		return nil
	}
	if err := run(nil); err != nil {
		t.Errorf("no panic: %v", err)
	}
	if err := run(sentinel); err != sentinel {
		t.Errorf("panic with an error: %v, want that error", err)
	}
	if err := run("bad axis"); err == nil || err.Error() != "bad axis" {
		t.Errorf("panic with a string: %v, want its text", err)
	}
}

// TestSetFlags: the flags SetFlags parses are the only ones flag.Visit sees during the test, and
// flag.CommandLine and the values are back as they were after it.
func TestSetFlags(t *testing.T) {
	given := flag.String("testutil-given", "a", "")
	other := flag.Int("testutil-other", 1, "")
	saved := flag.CommandLine
	t.Run("set", func(t *testing.T) {
		SetFlags(t, "-testutil-given", "b", "arg")
		var seen []string
		flag.Visit(func(f *flag.Flag) { seen = append(seen, f.Name) })
		if *given != "b" || *other != 1 || len(seen) != 1 || seen[0] != "testutil-given" || flag.NArg() != 1 {
			t.Errorf("after SetFlags: given %q, other %d, visited %v, arguments %v; want b, 1, [testutil-given], [arg]",
				*given, *other, seen, flag.Args())
		}
	})
	if flag.CommandLine != saved || *given != "a" {
		t.Errorf("after the test: flag.CommandLine restored %v, given %q; want true, a", flag.CommandLine == saved, *given)
	}
}
