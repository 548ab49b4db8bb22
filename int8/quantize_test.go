package int8_test

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/hostdata"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/x448/float16"
)

// codes returns the int8 weight of a host-side array.
func codes(t *testing.T, a *qint8.Array) []int8 {
	t.Helper()
	return tensors.MustCopyFlatData[int8](a.Weight().Tensor())
}

func bf16s(values ...float32) []bfloat16.BFloat16 {
	return hostdata.Convert(values, qint8.RoundToBFloat16)
}

// recip127 is 1/127 in float32: eformer's scale is amax * recip127 when the scale has more than
// one element (XLA rewrites the division by a broadcast 127), as its conformance vectors show.
const recip127 = float32(1.0 / 127)

func TestQuantizeHandComputed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		x         *tensors.Tensor
		axes      []int
		wantQ     []int8
		wantScale []float64
	}{
		// eformer's documented example: scale 3/127 (as 3 * float32(1/127)).
		{"spec-row", tensors.FromValue([][]float32{{1, 2, 3}}), nil, []int8{42, 85, 127}, []float64{float64(float32(3) * recip127)}},
		// amax 127 gives scale exactly 1 (tiny is absorbed), so x/scale = x: ties go to even.
		{"ties-to-even", tensors.FromValue([]float32{127, 2.5, 3.5, -2.5, 0.5, -0.5, 1.5}), nil,
			[]int8{127, 2, 4, -2, 0, 0, 2}, []float64{1}},
		// Zero row: scale = tiny, codes 0.
		{"zero-row", tensors.FromValue([][]float32{{0, 0}, {-4, 2}}), []int{-1}, []int8{0, 0, -127, 64},
			[]float64{0x1p-126, float64(float32(4)*recip127 + float32(0x1p-126))}},
		// Axis 0 on (2, 2): one scale per column, shape (1, 2).
		{"axis0", tensors.FromValue([][]float32{{1, -8}, {-2, 4}}), []int{0}, []int8{64, -127, -127, 64},
			[]float64{float64(float32(2) * recip127), float64(float32(8) * recip127)}},
		// bfloat16 by hand: 3/127 rounds up to 0.023681640625; 1/s = 42.23 -> 42.25 -> 42;
		// 2/s = 84.45 -> 84.5 -> 84 (tie to even); 3/s = 126.68 -> 126.5 -> 126.
		{"bf16-row", tensors.FromFlatDataAndDimensions(bf16s(1, 2, 3), 1, 3), nil, []int8{42, 84, 126}, []float64{0.023681640625}},
		// float64 keeps the division exact enough for the textbook codes.
		{"f64-row", tensors.FromValue([][]float64{{1, 2, 3}}), []int{1}, []int8{42, 85, 127}, []float64{3 * (1.0 / 127)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := qint8.Quantize(tc.x, tc.axes...)
			if err != nil {
				t.Fatal(err)
			}
			if got := codes(t, a); !slices.Equal(got, tc.wantQ) {
				t.Errorf("codes %v, want %v", got, tc.wantQ)
			}
			if got := testutil.Float64s(t, a.Scale().Tensor()); !slices.Equal(got, tc.wantScale) {
				t.Errorf("scale %v, want %v", got, tc.wantScale)
			}
			if a.DType() != tc.x.DType() || a.Scale().Shape().DType != tc.x.DType() {
				t.Errorf("dtype %s, scale %s; want %s", a.DType(), a.Scale().Shape(), tc.x.DType())
			}
		})
	}
}

func TestQuantizeLayoutAndAccessors(t *testing.T) {
	x := tensors.FromShape(shapesF32(4, 6))
	for _, tc := range []struct {
		axes      []int
		wantScale []int
	}{{nil, []int{4, 1}}, {[]int{0}, []int{1, 6}}, {[]int{0, 1}, []int{1, 1}}, {[]int{-2, -1}, []int{1, 1}}} {
		a := qint8.MustQuantize(x, tc.axes...)
		if got := a.Scale().Shape().Dimensions; !slices.Equal(got, tc.wantScale) {
			t.Errorf("axes %v: scale %v, want %v", tc.axes, got, tc.wantScale)
		}
		if a.Bytes() != int64(4*6+4*tc.wantScale[0]*tc.wantScale[1]) {
			t.Errorf("axes %v: Bytes %d", tc.axes, a.Bytes())
		}
	}
	a, err := qint8.QuantizeAs(x, dtypes.BFloat16, 0)
	if err != nil || a.DType() != dtypes.BFloat16 || a.Scale().Shape().DType != dtypes.Float32 || !slices.Equal(a.Axes(), []int{0}) {
		t.Fatalf("QuantizeAs: %v %v", a, err)
	}
}

func TestQuantizeBadInput(t *testing.T) {
	nan := float32(math.NaN())
	for _, tc := range []struct {
		name string
		x    *tensors.Tensor
		axes []int
		want string
	}{
		{"axis-out-of-range", tensors.FromValue([][]float32{{1}}), []int{2}, "out of range"},
		{"negative-axis-out-of-range", tensors.FromValue([][]float32{{1}}), []int{-3}, "out of range"},
		{"repeated-axis", tensors.FromValue([][]float32{{1}}), []int{1, -1}, "repeat"},
		{"integer", tensors.FromValue([][]int32{{1}}), nil, "accepted: float32"},
		{"nan", tensors.FromValue([][]float32{{1, nan}}), nil, "finite"},
		{"inf", tensors.FromValue([]float64{math.Inf(-1)}), nil, "finite"},
		{"empty", tensors.FromShape(shapesF32(0, 3)), nil, "empty"},
		{"scalar", tensors.FromValue(float32(1)), nil, "scalar"},
		{"nil", nil, nil, "nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := qint8.Quantize(tc.x, tc.axes...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, %v; want an error containing %q", a, err, tc.want)
			}
		})
	}
	if _, err := qint8.QuantizeAs(tensors.FromValue([]float32{1}), dtypes.Int32); err == nil {
		t.Error("QuantizeAs to int32: no error")
	}
}

// TestQuantizeFuzz checks random shapes, axes and values against the format's definition computed
// in float64 (references, not the code under test), and the backend's Materialize.
func TestQuantizeFuzz(t *testing.T) {
	rng := rand.New(rand.NewSource(42))
	for iter := range 40 {
		rank := 1 + rng.Intn(4)
		dims := make([]int, rank)
		size := 1
		for i := range dims {
			dims[i] = 1 + rng.Intn(6)
			size *= dims[i]
		}
		var axes []int
		for a := range rank {
			if rng.Intn(2) == 0 {
				axes = append(axes, a-rank*rng.Intn(2)) // some negative
			}
		}
		data := make([]float32, size)
		magnitude := math.Pow(10, float64(rng.Intn(8)-4))
		for i := range data {
			switch rng.Intn(8) {
			case 0:
				data[i] = 0
			default:
				data[i] = float32(rng.NormFloat64() * magnitude)
			}
		}
		x := tensors.FromFlatDataAndDimensions(data, dims...)
		a, err := qint8.Quantize(x, axes...)
		if err != nil {
			t.Fatalf("iter %d dims %v axes %v: %v", iter, dims, axes, err)
		}
		q, scale := codes(t, a), testutil.Float64s(t, a.Scale().Tensor())
		sDims := a.Scale().Shape().Dimensions
		dense := testutil.Materialize(t, a)
		got := tensors.MustCopyFlatData[float32](dense)
		// amax per scale element, in float64.
		amax := make([]float64, len(scale))
		for i, v := range data {
			si := testutil.BroadcastIndex(i, dims, sDims)
			amax[si] = math.Max(amax[si], math.Abs(float64(v)))
		}
		for si, s := range scale {
			want := amax[si]/127 + 0x1p-126
			if math.Abs(s-want) > 1e-6*want {
				t.Fatalf("iter %d: scale[%d] = %g, want %g", iter, si, s, want)
			}
		}
		for i, v := range data {
			s := scale[testutil.BroadcastIndex(i, dims, sDims)]
			if d := math.Abs(float64(q[i]) - float64(v)/s); d > 0.5+1e-4 {
				t.Fatalf("iter %d: q[%d] = %d for x/scale = %g", iter, i, q[i], float64(v)/s)
			}
			if v == 0 && q[i] != 0 {
				t.Fatalf("iter %d: zero became %d", iter, q[i])
			}
			if e := math.Abs(float64(got[i]) - float64(v)); e > s/2*(1+1e-4) || math.IsNaN(float64(got[i])) {
				t.Fatalf("iter %d: round-trip error %g > scale/2 = %g at %d", iter, e, s/2, i)
			}
			if float32(float32(q[i])*float32(s)) != got[i] {
				t.Fatalf("iter %d: Materialize %g != q*scale %g", iter, got[i], float32(q[i])*float32(s))
			}
		}
	}
}

func TestQuantizeConstantRowExact(t *testing.T) {
	// A constant row c: scale c/127 (+tiny), q = 127, and 127 * scale is c again.
	x := tensors.FromValue([][]float32{{0.5, 0.5, 0.5}, {-3, -3, -3}, {0, 0, 0}})
	a := qint8.MustQuantize(x)
	dense := testutil.Materialize(t, a)
	got := dense.Value().([][]float32)
	want := x.Value().([][]float32)
	for i := range want {
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Errorf("[%d][%d] = %g, want %g", i, j, got[i][j], want[i][j])
			}
		}
	}
}

func TestQuantizeBFloat16RoundTrip(t *testing.T) {
	values := testutil.Normals(rand.New(rand.NewSource(7)), 16*32)
	x := tensors.FromFlatDataAndDimensions(bf16s(values...), 16, 32)
	a := qint8.MustQuantize(x)
	dense := testutil.Materialize(t, a)
	if dense.DType() != dtypes.BFloat16 {
		t.Fatalf("materialized %s", dense.Shape())
	}
	xs, got, scale := testutil.Float64s(t, x), testutil.Float64s(t, dense), testutil.Float64s(t, a.Scale().Tensor())
	for i, v := range xs {
		// bfloat16 rounds x/scale (spacing up to 0.5 near 127) and the product q*scale (2^-8
		// relative; 2^-7 on the pure-Go backend, which truncates) on top of the code's own rounding.
		s := scale[i/32]
		if e := math.Abs(got[i] - v); e > 0.75*s+math.Abs(v)/128 {
			t.Fatalf("element %d: |%g - %g| = %g > bound (scale %g)", i, got[i], v, e, s)
		}
	}
}

func TestQuantizeNodeMatchesHost(t *testing.T) {
	backend := testutil.Backend(t)
	x := testutil.NormalTensor(rand.New(rand.NewSource(3)), 6, 10)
	for _, axes := range [][]int{nil, {0}, {0, 1}} {
		host := qint8.MustQuantize(x, axes...)
		e := implicitarray.MustNewExec(backend, func(x *graph.Node) *qint8.Array { return qint8.QuantizeNode(x, axes...) })
		inGraph := e.MustCall1(x).(*qint8.Array)
		if got, want := codes(t, inGraph), codes(t, host); !slices.Equal(got, want) {
			t.Errorf("axes %v: in-graph codes %v\nhost codes %v", axes, got, want)
		}
		if got, want := testutil.Float64s(t, inGraph.Scale().Tensor()), testutil.Float64s(t, host.Scale().Tensor()); !slices.Equal(got, want) {
			t.Errorf("axes %v: in-graph scale %v, host %v", axes, got, want)
		}
		if inGraph.Metadata() != host.Metadata() {
			t.Errorf("metadata %q vs %q", inGraph.Metadata(), host.Metadata())
		}
	}
}

// scaleBits returns the IEEE bits of a float32 or float16 scale.
func scaleBits(t *testing.T, x *tensors.Tensor) []uint32 {
	t.Helper()
	var out []uint32
	x.MustConstFlatData(func(flat any) {
		switch d := flat.(type) {
		case []float32:
			for _, v := range d {
				out = append(out, math.Float32bits(v))
			}
		case []float16.Float16:
			for _, v := range d {
				out = append(out, uint32(v.Bits()))
			}
		default:
			t.Fatalf("scaleBits: unexpected data %T", flat)
		}
	})
	return out
}

func f32Bits(bits ...uint32) []float32 { return hostdata.Convert(bits, math.Float32frombits) }

func f16Bits(bits ...uint16) []float16.Float16 { return hostdata.Convert(bits, float16.Frombits) }

// TestXLAArithmetic pins where XLA divides and where it multiplies by a reciprocal (see the
// package documentation), on inputs where the two give other bytes. The expected codes and scale
// bits are eformer 0.0.101's (Array8B.quantize on jax 0.11.2 CPU); the host and the graph
// quantizers must both give them.
func TestXLAArithmetic(t *testing.T) {
	backend := testutil.Backend(t)
	for _, tc := range []struct {
		name      string
		x         *tensors.Tensor
		axes      []int
		wantQ     []int8
		wantScale []uint32
	}{
		// 2.44809/scale is exactly 109.5 (ties to 110), but XLA multiplies by the float32
		// reciprocal of the (2, 1) scale: 109.49999, code 109.
		{"float32 codes by reciprocal", tensors.FromFlatDataAndDimensions(f32Bits(0x4035b7b4, 0x401cad82, 0x4035b7b4, 0x401cad82), 2, 2),
			nil, []int8{127, 109, 127, 109}, []uint32{0x3cb72600, 0x3cb72600}},
		// One scale element: amax/127 is a true division, 1.696216/127 = 0.013356032 (0x3c5ad342);
		// the product by float32(1/127) would give 0x3c5ad341.
		{"float32 per-tensor scale divides", tensors.FromFlatDataAndDimensions(f32Bits(0x3fd91d9b, 0x3f000000, 0xbe800000, 0x3f800000), 2, 2),
			[]int{0, 1}, []int8{127, 37, -19, 75}, []uint32{0x3c5ad342}},
		// Three scale elements, one per element: amax·float32(1/127) (0x3c5ad341 for the same
		// amax), and x/scale a true division (no broadcast).
		{"float32 scale as large as x", tensors.FromFlatDataAndDimensions(f32Bits(0x3fd91d9b, 0x3f000000, 0xbf800000), 3, 1),
			nil, []int8{127, 127, -127}, []uint32{0x3c5ad341, 0x3b810204, 0x3c010204}},
		// float16 per-row scales: amax times float16(1/127), then + 2^-14: 0x23d1 (the float32
		// reciprocal would give the scale of the next case, 0x23d2).
		{"float16 scale by float16 reciprocal", tensors.FromFlatDataAndDimensions(f16Bits(0x3fba, 0x3800, 0x3fba, 0x3c00), 2, 2),
			nil, []int8{126, 33, 126, 66}, []uint32{0x23d1, 0x23d1}},
		{"float16 per-tensor scale divides", tensors.FromFlatDataAndDimensions(f16Bits(0x3fba, 0x3800), 1, 2),
			[]int{0, 1}, []int8{126, 33}, []uint32{0x23d2}},
		{"float16 scale as large as x", tensors.FromFlatDataAndDimensions(f16Bits(0x3fba, 0x3800, 0xbc00), 3, 1),
			nil, []int8{126, 125, -126}, []uint32{0x23d1, 0x1c18, 0x2010}},
		// float32 subnormals read as zero: a row of them gets scale tiny and codes 0.
		{"float32 subnormal row", tensors.FromValue([][]float32{{1e-40, -2e-40}, {1, 0.5}}),
			nil, []int8{0, 0, 127, 64}, []uint32{0x800000, 0x3c010204}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := func(where string, a *qint8.Array) {
				if got := tensors.MustCopyFlatData[int8](a.Weight().Tensor()); !slices.Equal(got, tc.wantQ) {
					t.Errorf("%s: codes %v, want %v", where, got, tc.wantQ)
				}
				if got := scaleBits(t, a.Scale().Tensor()); fmt.Sprintf("%x", got) != fmt.Sprintf("%x", tc.wantScale) {
					t.Errorf("%s: scale bits %x, want %x", where, got, tc.wantScale)
				}
			}
			host, err := qint8.Quantize(tc.x, tc.axes...)
			if err != nil {
				t.Fatal(err)
			}
			check("host", host)
			if tc.x.DType() == dtypes.Float16 && runtime.IsGo(backend) {
				t.Skip("the pure-Go backend has no float16")
			}
			e := implicitarray.MustNewExec(backend, func(x *graph.Node) *qint8.Array { return qint8.QuantizeNode(x, tc.axes...) })
			defer e.Finalize()
			check("graph", e.MustCall1(tc.x).(*qint8.Array))
		})
	}
}
