package benchsuite

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/benchflags"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
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
	for _, name := range append(append(DenseNames(), QuantizedNames()...), GGMLNames()...) {
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

// TestParseDense: both dense layouts parse, as dense formats, without a strategy; a strategy on
// either is refused (their products have one formulation each).
func TestParseDense(t *testing.T) {
	for _, name := range DenseNames() {
		f, err := ParseFormat(" " + name)
		if err != nil || f.Name != name || !f.IsDense() {
			t.Errorf("ParseFormat(%q) = %+v, %v; want the dense format %s", name, f, err, name)
		}
		if f, err := ParseFormat(name + "@kernel"); err == nil {
			t.Errorf("ParseFormat(%s@kernel) = %+v; want an error", name, f)
		}
	}
	if f, _ := ParseFormat("nf4"); f.IsDense() {
		t.Errorf("ParseFormat(nf4).IsDense() = true")
	}
}

// TestDenseTransposed: DenseTransposed stores each weight (N, K) and its products, in both
// contexts and dtypes, at rows served by the float32 kernels and beyond 16 (XLA's dot for Dense),
// equal Dense's on the same weights: the same math in the other layout.
func TestDenseTransposed(t *testing.T) {
	backend := testutil.Backend(t)
	sets := map[string][]benchflags.Shape{Chain: {{K: 64, N: 96}, {K: 96, N: 64}}, Add: {{K: 64, N: 96}}}
	for _, c := range []struct {
		context string
		dtype   dtypes.DType
		rows    int
		tol     float64
	}{
		{Chain, dtypes.Float32, 1, 1e-5},
		{Chain, dtypes.Float32, 20, 1e-5},
		{Add, dtypes.Float32, 4, 1e-5},
		{Add, dtypes.Float32, 20, 1e-5},
		{Chain, dtypes.BFloat16, 3, 3e-2},
		{Add, dtypes.BFloat16, 3, 3e-2},
	} {
		t.Run(fmt.Sprintf("%s/%s/m=%d", c.context, c.dtype, c.rows), func(t *testing.T) {
			set, products := sets[c.context], map[string][]float64{}
			for _, name := range DenseNames() {
				f, err := ParseFormat(name)
				if err != nil {
					t.Fatal(err)
				}
				w, err := Prepare(backend, f, set, c.dtype, 0, 4)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Release()
				if want := float64(64 * 96 * c.dtype.Size()); len(w.Values) != 2 || w.Bytes != want {
					t.Fatalf("%s: %d weights of %v bytes; want 2 of %v", name, len(w.Values), w.Bytes, want)
				}
				for i, v := range w.Values {
					s := set[i%len(set)]
					stored, want := v, []int{s.K, s.N}
					if name == DenseTransposed {
						stored, want = v.(implicitarray.Array).Components()[0].Tensor(), []int{s.N, s.K}
					}
					if got := stored.Shape(); !slices.Equal(got.Dimensions, want) || got.DType != c.dtype || v.Shape().Dim(0) != s.K {
						t.Fatalf("%s weight %d: stored %s (logical %s); want %v in %s", name, i, got, v.Shape(), want, c.dtype)
					}
				}
				e := implicitarray.MustNewExec(backend, Graph(c.context))
				defer e.Finalize()
				x := Activations(backend, c.rows, set[0].K, c.dtype)
				lowering.ResetBuilt()
				out, err := e.Call1(x, w.Values)
				if err != nil {
					t.Fatal(err)
				}
				// Each product is one of lowering's dense products, not a materialized transpose.
				built := 0
				for choice, n := range lowering.Built() {
					if choice.Layout != "dense" {
						t.Errorf("%s: built %v×%d; want only dense products", name, choice, n)
					}
					built += n
				}
				if built != len(w.Values) {
					t.Errorf("%s: %d dense products built; want %d", name, built, len(w.Values))
				}
				products[name] = testutil.Float64s(t, out.(*tensors.Tensor))
			}
			testutil.Close(t, "dense-t's products", products[DenseTransposed], products[Dense], testutil.Mixed(c.tol))
		})
	}
}
