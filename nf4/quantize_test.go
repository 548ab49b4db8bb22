package nf4_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/x448/float16"
)

// Reference codebook values (QLoRA, eformer's get_nf4), written out independently of the package.
var refCodebook = []float32{
	-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
	-0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
	0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
	0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
}

func TestCodebook(t *testing.T) {
	cb := nf4.Codebook()
	for i, v := range refCodebook {
		if cb[i] != v {
			t.Errorf("code %d: got %v, want %v", i, cb[i], v)
		}
	}
	if got, want := nf4.MaxCodeGap(), float64(refCodebook[1])-float64(refCodebook[0]); got != want {
		t.Errorf("MaxCodeGap %v, want %v (codes 0..1)", got, want)
	}
}

// TestNearestIsArgmin checks the code search against eformer's definition, the argmin of the
// distances |v - codebook[i]| (lower index on ties), on every float32 around each codebook value
// and each midpoint of two neighbours (where rounding decides), on a sweep of [-1.5, 1.5], and in
// float64.
func TestNearestIsArgmin(t *testing.T) {
	argmin32 := func(v float32) uint8 {
		best := 0
		for i, c := range refCodebook {
			if float32(math.Abs(float64(v-c))) < float32(math.Abs(float64(v-refCodebook[best]))) {
				best = i
			}
		}
		return uint8(best)
	}
	argmin64 := func(v float64) uint8 {
		best := 0
		for i, c := range refCodebook {
			if math.Abs(v-float64(c)) < math.Abs(v-float64(refCodebook[best])) {
				best = i
			}
		}
		return uint8(best)
	}
	var values []float32
	for i, c := range refCodebook {
		centers := []float32{c}
		if i > 0 {
			centers = append(centers, (c+refCodebook[i-1])/2)
		}
		for _, x := range centers {
			up, down := x, x
			for range 64 {
				values = append(values, up, down)
				up, down = math.Nextafter32(up, 2), math.Nextafter32(down, -2)
			}
		}
	}
	for v := float32(-1.5); v <= 1.5; v += 1.0 / 4096 {
		values = append(values, v)
	}
	for _, v := range values {
		if got, want := nf4.Nearest32(v), argmin32(v); got != want {
			t.Fatalf("float32 %v (bits %#x): code %d, argmin %d", v, math.Float32bits(v), got, want)
		}
		for _, w := range []float64{float64(v), float64(v) + 1e-12, float64(v) - 1e-12} {
			if got, want := nf4.Nearest64(w), argmin64(w); got != want {
				t.Fatalf("float64 %v: code %d, argmin %d", w, got, want)
			}
		}
	}
}

// TestPolynomialError measures eformer's degree-5 decode polynomial (Horner in float32) against
// the exact codebook: the figure quoted in the package documentation.
func TestPolynomialError(t *testing.T) {
	const (
		a5, a4, a3 = float32(1.82943132356953e-5), float32(0.00068587779130373), float32(0.0100420261313669)
		a2, a1, a0 = float32(0.0722703570217226), float32(0.346075459755188), float32(0.994166218659335)
	)
	worst, worstCode := 0.0, -1
	for c := range 16 {
		x := float32(c)
		p := x*(x*(x*(x*(a5*x-a4)+a3)-a2)+a1) - a0
		if e := math.Abs(float64(p) - float64(refCodebook[c])); e > worst {
			worst, worstCode = e, c
		}
	}
	t.Logf("eformer polynomial decode: max |error| %.6f at code %d", worst, worstCode)
	if worstCode != 1 || math.Abs(worst-0.014794) > 5e-6 {
		t.Errorf("max error %.6f at code %d; eformer spec: 0.014794 at code 1", worst, worstCode)
	}
}

func packedBytes(t *testing.T, a *nf4.Array) []uint8 {
	t.Helper()
	return tensors.MustCopyFlatData[uint8](a.Packed().Tensor())
}

// TestPacking checks hand-computed bytes: the even element in the high nibble, ties to the lower
// code, zero blocks, all-ones blocks, and padding (zeros → code 7).
func TestPacking(t *testing.T) {
	mid78 := refCodebook[8] / 2 // exactly halfway between codes 7 (0) and 8
	mid67 := refCodebook[6] / 2 // exactly halfway between codes 6 and 7 (0)
	for _, tc := range []struct {
		name       string
		in         []float32
		blockSize  int
		wantBytes  []uint8
		wantAbsmax []float32
	}{
		{"codes 3,12,15,7", []float32{refCodebook[3], refCodebook[12], 1, 0}, 4, []uint8{0x3C, 0xF7}, []float32{1}},
		{"all zero", []float32{0, 0, 0, 0}, 4, []uint8{0x77, 0x77}, []float32{0}},
		{"all ones", []float32{1, 1, 1, 1}, 4, []uint8{0xFF, 0xFF}, []float32{1}},
		{"all minus ones", []float32{-2, -2}, 2, []uint8{0x00}, []float32{2}},
		{"tie 7|8 goes to 7", []float32{mid78, 1}, 2, []uint8{0x7F}, []float32{1}},
		{"tie 6|7 goes to 6", []float32{mid67, -1}, 2, []uint8{0x60}, []float32{1}},
		{"padding", []float32{1, -1, 0.5}, 4, []uint8{0xF0, 0xC7}, []float32{1}},
		{"two blocks", []float32{4, -4, 0, 0}, 2, []uint8{0xF0, 0x77}, []float32{4, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := nf4.Quantize(tensors.FromValue(tc.in), tc.blockSize)
			if err != nil {
				t.Fatal(err)
			}
			if got := packedBytes(t, a); fmt.Sprintf("%02X", got) != fmt.Sprintf("%02X", tc.wantBytes) {
				t.Errorf("packed %02X, want %02X", got, tc.wantBytes)
			}
			if got := tensors.MustCopyFlatData[float32](a.Absmax().Tensor()); fmt.Sprint(got) != fmt.Sprint(tc.wantAbsmax) {
				t.Errorf("absmax %v, want %v", got, tc.wantAbsmax)
			}
			if got := a.Shape().Dimensions; got[0] != len(tc.in) || a.Shape().Rank() != 1 {
				t.Errorf("logical shape %s, want [%d]", a.Shape(), len(tc.in))
			}
		})
	}
}

// TestComponentShapes checks eformer's layout: packed (..., nb, bs/2) uint8, absmax (..., nb)
// in the input dtype, logical shape the input's (padding excluded).
func TestComponentShapes(t *testing.T) {
	for _, tc := range []struct {
		dims               []int
		blockSize          int
		wantPacked, wantAm []int
	}{
		{[]int{128, 256}, 64, []int{128, 4, 32}, []int{128, 4}},
		{[]int{4, 100}, 64, []int{4, 2, 32}, []int{4, 2}},
		{[]int{7}, 64, []int{1, 32}, []int{1}},
		{[]int{2, 3, 10}, 6, []int{2, 3, 2, 3}, []int{2, 3, 2}},
	} {
		t.Run(fmt.Sprint(tc.dims), func(t *testing.T) {
			a := nf4.MustQuantize(testutil.RandomTensor(1, tc.dims...), tc.blockSize)
			if got := a.Packed().Shape(); fmt.Sprint(got.Dimensions) != fmt.Sprint(tc.wantPacked) || got.DType != dtypes.Uint8 {
				t.Errorf("packed %s, want uint8 %v", got, tc.wantPacked)
			}
			if got := a.Absmax().Shape(); fmt.Sprint(got.Dimensions) != fmt.Sprint(tc.wantAm) || got.DType != dtypes.Float32 {
				t.Errorf("absmax %s, want float32 %v", got, tc.wantAm)
			}
			if fmt.Sprint(a.Shape().Dimensions) != fmt.Sprint(tc.dims) {
				t.Errorf("logical shape %s, want %v", a.Shape(), tc.dims)
			}
			if want := int64(a.Packed().Shape().Memory() + a.Absmax().Shape().Memory()); a.Bytes() != want {
				t.Errorf("Bytes %d, want %d", a.Bytes(), want)
			}
		})
	}
}

// TestRoundTrip checks the error bound per element (half the largest code gap times the block's
// absmax), that zero blocks stay zero, and that ±absmax round-trips exactly, for every dtype.
func TestRoundTrip(t *testing.T) {
	const rows, cols, bs = 6, 100, 16
	for _, dtype := range []dtypes.DType{dtypes.Float32, dtypes.Float64, dtypes.BFloat16, dtypes.Float16} {
		t.Run(dtype.String(), func(t *testing.T) {
			values := testutil.RandomValues(7, rows*cols)
			for i := range cols { // row 1 all zero
				values[cols+i] = 0
			}
			in := testutil.InDType(dtype, values, rows, cols)
			exact := testutil.Float32s(t, in)
			a, err := nf4.Quantize(in, bs)
			if err != nil {
				t.Fatal(err)
			}
			if a.DType() != dtype || a.Absmax().Shape().DType != dtype {
				t.Fatalf("dtype %s, absmax %s; want %s", a.DType(), a.Absmax().Shape(), dtype)
			}
			if dtype == dtypes.Float16 && runtime.IsGo(testutil.Backend(t)) {
				t.Skip("the pure-Go backend has no float16")
			}
			got := testutil.Float32s(t, testutil.Materialize(t, a))
			absmax := testutil.Float32s(t, a.Absmax().Tensor())
			nb := (cols + bs - 1) / bs
			half := nf4.MaxCodeGap() / 2
			for r := range rows {
				for c := range cols {
					i := r*cols + c
					am := float64(absmax[r*nb+c/bs])
					if math.IsNaN(float64(got[i])) {
						t.Fatalf("NaN at (%d,%d)", r, c)
					}
					if r == 1 && got[i] != 0 {
						t.Fatalf("zero block decoded to %v at (%d,%d)", got[i], r, c)
					}
					// dtype rounding of the result adds up to one ulp of the dtype.
					tol := half*am*1.001 + am*1e-2*boolF(dtype == dtypes.BFloat16 || dtype == dtypes.Float16)
					if d := math.Abs(float64(got[i]) - float64(exact[i])); d > tol {
						t.Fatalf("(%d,%d): |%v - %v| = %v > %v", r, c, got[i], exact[i], d, tol)
					}
					if math.Abs(float64(exact[i])) == am && am > 0 && got[i] != exact[i] {
						t.Fatalf("(%d,%d): ±absmax %v decoded to %v", r, c, exact[i], got[i])
					}
				}
			}
		})
	}
}

func boolF(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// TestBF16RoundsToNearest: in bfloat16, x / (absmax + tiny) is computed in float32 and rounded
// to nearest even, as XLA does (bfloat16.FromFloat32 would truncate). 1 / 1.9921875 =
// 0.50196078 in float32 lies between the bfloat16 values 0.5 and 0.50390625, above their
// midpoint 0.501953125: rounding gives 0.50390625 (code 13, above the 12|13 midpoint 0.5016634),
// truncation would give 0.5 (code 12).
func TestBF16RoundsToNearest(t *testing.T) {
	a := nf4.MustQuantize(testutil.InDType(dtypes.BFloat16, []float32{1, -1.9921875}, 2), 2)
	if got := packedBytes(t, a)[0]; got != 0xD0 {
		t.Errorf("packed %02X, want D0 (round to nearest even, as XLA)", got)
	}
}

// bitsF32 and bitsF16 build exact inputs from their IEEE bits.
func bitsF32(bits ...uint32) []float32 {
	out := make([]float32, len(bits))
	for i, b := range bits {
		out[i] = math.Float32frombits(b)
	}
	return out
}

func bitsF16(bits ...uint16) []float32 {
	out := make([]float32, len(bits))
	for i, b := range bits {
		out[i] = float16.Frombits(b).Float32()
	}
	return out
}

// TestXLAArithmetic pins the arithmetic of XLA CPU that eformer's bytes come from, on inputs
// where a plain division would give other bytes. The expected bytes are eformer 0.0.101's
// (ArrayNF4.quantize on jax 0.11.2 CPU), except the last case (the deliberate difference).
// Both the host quantizer and the graph quantizer must give them.
func TestXLAArithmetic(t *testing.T) {
	backend := testutil.Backend(t)
	for _, tc := range []struct {
		name       string
		dtype      dtypes.DType
		values     []float32
		blockSize  int
		wantPacked []uint8
		wantAbsmax []float32
	}{
		// 1.2924802/1.5003048 rounds to 0.86147845, nearer to 1 (code 15) than to 0.7229568
		// (code 14) in float32 distance; XLA multiplies by the float32 reciprocal 0.6665312
		// instead: 0.8614784, nearer to code 14.
		{"float32 reciprocal", dtypes.Float32, bitsF32(0x3fc009fd, 0x3fa56ffe), 2, []uint8{0xFE}, bitsF32(0x3fc009fd)},
		// float16: 1/2.3027 is rounded to float16 (0.43433) before the product: 1.1553·0.43433
		// rounds to 0.50195, above the 12|13 decision point 0.50166: code 13 (a division gives
		// 0.50146, code 12).
		{"float16 reciprocal rounded to float16", dtypes.Float16, bitsF16(0x409b, 0x3c9f), 2, []uint8{0xFD}, bitsF16(0x409b)},
		// float32 subnormals read as zero: a block of them has absmax 0 and codes 7.
		{"float32 subnormal block", dtypes.Float32, []float32{1e-40, -2e-40, 3e-39, -5e-41}, 4, []uint8{0x77, 0x77}, []float32{0}},
		{"float32 subnormal beside normals", dtypes.Float32, []float32{1e-40, 1, -1e-40, 0.5}, 4, []uint8{0x7F, 0x7C}, []float32{1}},
		{"bfloat16 subnormal block", dtypes.BFloat16, []float32{0x1p-133, -0x1p-132}, 2, []uint8{0x77}, []float32{0}},
		// float16 subnormals are normal in float32: not flushed.
		{"float16 subnormals kept", dtypes.Float16, bitsF16(0x0002, 0x8003, 0x0032, 0x8001), 4, []uint8{0x77, 0x87}, bitsF16(0x0032)},
		// Deliberate difference: 1/(3e38 + tiny) is subnormal, so eformer flushes it and writes
		// 0x77; quanta encodes the block (0.5 → code 12).
		{"huge block encoded", dtypes.Float32, []float32{3e38, 1.5e38}, 2, []uint8{0xFC}, []float32{3e38}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := testutil.InDType(tc.dtype, tc.values, len(tc.values))
			host, err := nf4.Quantize(in, tc.blockSize)
			if err != nil {
				t.Fatal(err)
			}
			check := func(where string, a *nf4.Array) {
				if got := packedBytes(t, a); !slices.Equal(got, tc.wantPacked) {
					t.Errorf("%s: packed % X, want % X", where, got, tc.wantPacked)
				}
				if got := testutil.Float32s(t, a.Absmax().Tensor()); !slices.Equal(got, tc.wantAbsmax) {
					t.Errorf("%s: absmax %v, want %v", where, got, tc.wantAbsmax)
				}
			}
			check("host", host)
			if tc.dtype == dtypes.Float16 && runtime.IsGo(backend) {
				t.Skip("the pure-Go backend has no float16")
			}
			e := implicitarray.MustNewExec(backend, func(x *graph.Node) *nf4.Array { return nf4.QuantizeNode(x, tc.blockSize) })
			defer e.Finalize()
			check("graph", e.MustCall1(in).(*nf4.Array))
		})
	}
}
