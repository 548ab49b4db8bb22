package testutil

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/hostdata"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/quanta-ml/quanta/sharding"
	"github.com/x448/float16"
)

// TestAllEnv names the environment variable that turns on slow tests (see Slow).
const TestAllEnv = "QUANTA_TEST_ALL"

// Backend returns the process-wide backend (runtime.Backend), failing the test if it cannot start.
func Backend(t testing.TB) backends.Backend {
	t.Helper()
	backend, err := runtime.Backend()
	if err != nil {
		t.Fatalf("quanta backend failed to start: %+v", err)
	}
	return backend
}

// Slow skips the test unless QUANTA_TEST_ALL=1 (set by `make test-all`).
func Slow(t testing.TB) {
	t.Helper()
	if os.Getenv(TestAllEnv) != "1" {
		t.Skipf("slow test: runs only with %s=1 (make test-all)", TestAllEnv)
	}
}

// Normals returns n float32 values drawn from r's normal distribution; r is a math/rand or a
// math/rand/v2 generator.
func Normals(r interface{ NormFloat64() float64 }, n int) []float32 {
	data := make([]float32, n)
	for i := range data {
		data[i] = float32(r.NormFloat64())
	}
	return data
}

// NormalTensor returns a float32 tensor of dims filled with Normals(r, ...).
func NormalTensor(r interface{ NormFloat64() float64 }, dims ...int) *tensors.Tensor {
	return tensors.FromFlatDataAndDimensions(Normals(r, Size(dims...)), dims...)
}

// Size returns the number of elements of an array of dimensions dims (1 for none: a scalar).
func Size(dims ...int) int {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return n
}

// RandomValues returns n normal float32 values drawn with a fixed seed.
func RandomValues(seed uint64, n int) []float32 { return Normals(rand.New(rand.NewPCG(seed, 1)), n) }

// RandomTensor returns a float32 tensor of normal values drawn with a fixed seed (RandomValues).
func RandomTensor(seed uint64, dims ...int) *tensors.Tensor {
	return NormalTensor(rand.New(rand.NewPCG(seed, 1)), dims...)
}

// Converted returns v's values converted to To, one by one.
func Converted[To float32 | float64, From ~int8 | ~float32 | ~float64](v []From) []To {
	out := make([]To, len(v))
	for i, x := range v {
		out[i] = To(x)
	}
	return out
}

// InDType returns float32 values (dims) as a host tensor of dtype: float32, float64, bfloat16 (as
// bfloat16.FromFloat32 gives it: truncated) or float16 (rounded to nearest even). It panics for
// another dtype.
func InDType(dtype dtypes.DType, values []float32, dims ...int) *tensors.Tensor {
	switch dtype {
	case dtypes.Float32:
		return tensors.FromFlatDataAndDimensions(values, dims...)
	case dtypes.Float64:
		return tensors.FromFlatDataAndDimensions(hostdata.Convert(values, func(v float32) float64 { return float64(v) }), dims...)
	case dtypes.BFloat16:
		return tensors.FromFlatDataAndDimensions(hostdata.Convert(values, bfloat16.FromFloat32), dims...)
	case dtypes.Float16:
		return tensors.FromFlatDataAndDimensions(hostdata.Convert(values, float16.Fromfloat32), dims...)
	}
	panic(fmt.Sprintf("testutil.InDType(%s): accepted: float32, float64, bfloat16 or float16", dtype))
}

// BroadcastIndex returns the flat index, in a keepdims array of dimensions sDims (each 1 or the
// dims one), of the element broadcast to flat position i of dims: the scale of an element.
func BroadcastIndex(i int, dims, sDims []int) int {
	si, stride := 0, 1
	for a := len(dims) - 1; a >= 0; a-- {
		c := i % dims[a]
		i /= dims[a]
		if sDims[a] != 1 {
			si += c * stride
		}
		stride *= sDims[a]
	}
	return si
}

// Materialize returns the dense value of a host-side implicit array, decoded in a graph on the
// test's backend (implicitarray.MaterializeOnHost), failing the test on an error.
func Materialize(t testing.TB, a implicitarray.Array) *tensors.Tensor {
	t.Helper()
	dense, err := implicitarray.MaterializeOnHost(Backend(t), a)
	if err != nil {
		t.Fatalf("testutil.Materialize: %+v", err)
	}
	return dense
}

// LazyConvertDType checks that convert_element_type of a host-side array w, materializing in
// float32, to bfloat16 is lazy: without a materialization it gives an array of w's type that
// materializes in bfloat16 to the bfloat16 rounding of w's values, and leaves w in float32. It
// returns that array, for the format's own checks.
func LazyConvertDType[A interface {
	implicitarray.Array
	DType() dtypes.DType
}](t *testing.T, w A) A {
	t.Helper()
	implicitarray.ResetStats()
	e := implicitarray.MustNewExec(Backend(t), func(w A) (implicitarray.Value, A) {
		return implicitarray.ConvertDType(w, dtypes.BFloat16), w
	})
	defer e.Finalize()
	out := e.MustCall(w)
	conv, ok := out[0].(A)
	if !ok || conv.DType() != dtypes.BFloat16 {
		t.Fatalf("result %T, want %T of bfloat16", out[0], w)
	}
	if w.DType() != dtypes.Float32 || out[1].(A).DType() != dtypes.Float32 {
		t.Errorf("operand changed to %s", w.DType())
	}
	if st := implicitarray.CurrentStats(); st.Materializations[implicitarray.TypeName(w)] != 0 {
		t.Errorf("convert materialized: %+v", st)
	}
	want := Float32s(t, graph.MustExecOnce(Backend(t), func(x *graph.Node) *graph.Node {
		return graph.ConvertDType(x, dtypes.BFloat16)
	}, Materialize(t, w)))
	if got := Float32s(t, Materialize(t, conv)); !slices.Equal(got, want) {
		t.Errorf("bfloat16 materialization differs from converting the float32 one")
	}
	return conv
}

// RowOp is a named shape op on an implicit array (RowOps).
type RowOp struct {
	Name string
	Op   func(implicitarray.Value) implicitarray.Value
}

// RowOps are the reshapes, transpose and broadcasts of a [3, 3, 4, last] array that leave its
// last axis in place: the moves a format with blocks along the last axis keeps exact.
func RowOps(last int) []RowOp {
	return []RowOp{
		{"reshape", func(v implicitarray.Value) implicitarray.Value { return implicitarray.Reshape(v, 12, last) }},
		{"reshape-split", func(v implicitarray.Value) implicitarray.Value { return implicitarray.Reshape(v, 2, 6, 1, last) }},
		{"transpose", func(v implicitarray.Value) implicitarray.Value { return implicitarray.TransposeAllAxes(v, 1, 0, 2) }},
		{"broadcast", func(v implicitarray.Value) implicitarray.Value {
			return implicitarray.BroadcastInDim(v, []int{2, 3, 4, last}, []int{1, 2, 3})
		}},
		{"broadcast-size1", func(v implicitarray.Value) implicitarray.Value {
			r := implicitarray.Reshape(v, 3, 1, 4, last)
			return implicitarray.BroadcastInDim(r, []int{3, 5, 4, last}, []int{0, 1, 2, 3})
		}},
	}
}

// ApplyOp applies op to the host array w in an implicitarray.Exec on the test's backend, and
// returns the result (a host array or a *tensors.Tensor) with the statistics the call recorded
// (implicitarray.ResetStats before it).
func ApplyOp[A implicitarray.Array](t testing.TB, w A, op func(implicitarray.Value) implicitarray.Value) (any, implicitarray.Stats) {
	t.Helper()
	implicitarray.ResetStats()
	e := implicitarray.MustNewExec(Backend(t), func(w A) implicitarray.Value { return op(w) })
	defer e.Finalize()
	out := e.MustCall1(w)
	return out, implicitarray.CurrentStats()
}

// DenseOp returns op applied to the materialization of the host array w: what a shape handler's
// result on w must materialize to.
func DenseOp(t testing.TB, w implicitarray.Array, op func(implicitarray.Value) implicitarray.Value) *tensors.Tensor {
	t.Helper()
	return graph.MustExecOnce(Backend(t), func(x *graph.Node) *graph.Node { return op(x).(*graph.Node) }, Materialize(t, w))
}

// ShardedTransposeIsLazy checks that op, a transpose moving the block axis of w, a host array of
// type A given the sharding given, is lazy as for an unsharded array: an implicitarray.Transposed,
// with no re-quantization, fallback or materialization, whose inner array is an A carrying given
// (the sharding the test gave w, not the one w reports) and whose values are want, the dense op's,
// bit for bit (no second rounding).
func ShardedTransposeIsLazy[A interface {
	implicitarray.Array
	sharding.Sharded
}](t *testing.T, w A, given sharding.Sharding, op func(implicitarray.Value) implicitarray.Value, want *tensors.Tensor) {
	t.Helper()
	result, st := ApplyOp(t, w, op)
	out, ok := result.(*implicitarray.Transposed)
	if !ok {
		t.Fatalf("result is not an *implicitarray.Transposed")
	}
	if len(st.Requantizations) != 0 || len(st.Fallbacks) != 0 || st.Materializations[implicitarray.TypeName(w)] != 0 {
		t.Errorf("stats %+v: want no re-quantization, no fallback and no materialization", st)
	}
	if inner, ok := out.Inner().(A); !ok {
		t.Errorf("inner array is a %T, want %T", out.Inner(), w)
	} else if s, ok := inner.Sharding(); !ok || !s.Spec.Equal(given.Spec) || !s.Mesh.Equal(given.Mesh) {
		t.Errorf("inner sharding %v (%v), want %v", s, ok, given)
	}
	SameBits(t, "values", Float32s(t, Materialize(t, out)), Float32s(t, want))
}

// TransposedProduct checks the PyTorch idiom x·wᵀ on w, a host array of shape (out, in) whose
// storage cannot follow a transpose: Transpose(w, 0, 1) is lazy (implicitarray.Transposed), and
// MatMul(x, Transpose(w, 0, 1)) for rows of x is the product that contracts w along its last axis
// (DotGeneral(x, [1], w, [1])), bit for bit, with no re-quantization and no fallback.
func TransposedProduct(t testing.TB, w implicitarray.Array, rows int) {
	t.Helper()
	var lazy string
	e := implicitarray.MustNewExec(Backend(t), func(w implicitarray.Value, x *graph.Node) (*graph.Node, *graph.Node) {
		wt := implicitarray.Transpose(w, 0, 1)
		lazy = fmt.Sprintf("%T", wt)
		return implicitarray.Materialize(implicitarray.MatMul(x, wt)),
			implicitarray.Materialize(implicitarray.DotGeneral(x, []int{1}, nil, w, []int{1}, nil))
	})
	defer e.Finalize()
	implicitarray.ResetStats()
	outs := e.MustCall(w, RandomTensor(7, rows, w.Shape().Dim(1)))
	if lazy != "*implicitarray.Transposed" {
		t.Errorf("Transpose(w, 0, 1) of a %s is a %s, want a lazy *implicitarray.Transposed", implicitarray.TypeName(w), lazy)
	}
	if st := implicitarray.CurrentStats(); len(st.Requantizations) != 0 || len(st.Fallbacks) != 0 {
		t.Errorf("stats %+v: want no re-quantization and no fallback", st)
	}
	SameBits(t, "x·Transpose(w)", Float32s(t, outs[0].(*tensors.Tensor)), Float32s(t, outs[1].(*tensors.Tensor)))
}

// TableProducts checks the two products of an embedding table of width dim whose dequantized
// values are table: lookup, the rows ids, must be those rows of table bit for bit; head, the tied
// head's x·tableᵀ for rows x of width dim, must be within 1e-4 of that product in float64.
func TableProducts(t testing.TB, table []float32, dim int, ids []int32, lookup []float32, x, head []float64) {
	t.Helper()
	rows, n := len(table)/dim, len(x)/dim
	if len(lookup) != len(ids)*dim || len(head) != n*rows {
		t.Fatalf("%d looked-up values and %d head values; want %d and %d", len(lookup), len(head), len(ids)*dim, n*rows)
		return
	}
	for i, id := range ids {
		if !slices.Equal(lookup[i*dim:(i+1)*dim], table[int(id)*dim:(int(id)+1)*dim]) {
			t.Errorf("row %d differs from the dequantized table's", id)
		}
	}
	for r := range n {
		for v := range rows {
			ref := 0.0
			for k := range dim {
				ref += x[r*dim+k] * float64(table[v*dim+k])
			}
			if d := head[r*rows+v] - ref; d > 1e-4 || d < -1e-4 {
				t.Fatalf("head[%d, %d] = %g; x·tableᵀ of the dequantized table %g", r, v, head[r*rows+v], ref)
				return
			}
		}
	}
}

// RecoverError, deferred by a function with a named error result (defer
// testutil.RecoverError(&err)), turns a panic into that error: the panic's value if it is an
// error, otherwise an error with its text.
func RecoverError(err *error) {
	if r := recover(); r != nil {
		e, ok := r.(error)
		if !ok {
			e = fmt.Errorf("%v", r)
		}
		*err = e
	}
}

// TensorBytes returns a copy of the bytes of a host tensor.
func TensorBytes(t testing.TB, x *tensors.Tensor) []byte {
	t.Helper()
	var out []byte
	if err := x.ConstBytes(func(b []byte) { out = slices.Clone(b) }); err != nil {
		t.Fatal(err)
	}
	return out
}

// FromBytes reads a file from its bytes with its format's read (safetensors.Read, gguf.Read).
func FromBytes[F any](t testing.TB, read func(r io.ReaderAt, size int64) (F, error), data []byte) F {
	t.Helper()
	f, err := read(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Float64s returns the values of a tensor of any numeric or boolean dtype as float64, failing the
// test for another dtype.
func Float64s(t testing.TB, x *tensors.Tensor) []float64 {
	t.Helper()
	out, err := hostdata.Float64s(x)
	if err != nil {
		t.Fatalf("testutil.Float64s: %+v", err)
	}
	return out
}

// Float32s returns the values of a tensor of a float dtype as float32, failing the test for another
// dtype.
func Float32s(t testing.TB, x *tensors.Tensor) []float32 {
	t.Helper()
	out, ok := hostdata.Float32s(x)
	if !ok {
		t.Fatalf("testutil.Float32s: tensor %s; accepted: a float dtype", x.Shape())
	}
	return out
}

// WantError checks err against a table case's wantErr: with wantErr "" err must be nil, otherwise
// err must contain wantErr; it fails the test if not. It returns whether an error was wanted, so
// that the case stops there.
func WantError(t testing.TB, err error, wantErr string) bool {
	t.Helper()
	switch {
	case wantErr == "" && err != nil:
		t.Fatalf("%+v", err)
	case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
		t.Fatalf("error %v, want one containing %q", err, wantErr)
	}
	return wantErr != ""
}

// Close fails the test at the first index where got and want differ by more than bound(want[i]),
// naming what and the index; a NaN matches nothing.
func Close(t testing.TB, what string, got, want []float64, bound func(want float64) float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	for i := range want {
		if b := bound(want[i]); got[i] != want[i] && !(math.Abs(got[i]-want[i]) <= b) {
			t.Fatalf("%s[%d] = %v, want %v (bound %g)", what, i, got[i], want[i], b)
			return
		}
	}
}

// Exact is Close's bound for an exact comparison.
func Exact(float64) float64 { return 0 }

// Mixed returns Close's bound tol·max(1, |want|): relative for large values, absolute near zero.
func Mixed(tol float64) func(want float64) float64 {
	return func(want float64) float64 { return tol * math.Max(1, math.Abs(want)) }
}

// MaxAbsDiff returns the largest |got[i] - want[i]| and the largest finite |want[i]| (the scale to
// judge it by). Equal infinities and NaNs in the same positions count as equal; a NaN or an
// infinity against anything else makes diff +Inf.
func MaxAbsDiff(got, want []float64) (diff, scale float64) {
	if len(got) != len(want) {
		return math.Inf(1), 0
	}
	for i := range want {
		if !math.IsInf(want[i], 0) && !math.IsNaN(want[i]) {
			scale = math.Max(scale, math.Abs(want[i]))
		}
		switch {
		case math.IsNaN(got[i]) && math.IsNaN(want[i]), got[i] == want[i]:
		case math.IsNaN(got[i]) || math.IsNaN(want[i]) || math.IsInf(got[i], 0) || math.IsInf(want[i], 0):
			diff = math.Inf(1)
		default:
			diff = math.Max(diff, math.Abs(got[i]-want[i]))
		}
	}
	return diff, scale
}

// SameBits fails the test, naming what and the first differing element, unless got and want have
// the same float32 bits (any NaN matches any NaN: the payload and sign of a NaN are not compared).
func SameBits(t testing.TB, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	for i, g := range got {
		w := want[i]
		if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
			t.Errorf("%s: value %d = %g (%#08x), want %g (%#08x)", what, i, g, math.Float32bits(g), w, math.Float32bits(w))
			return
		}
	}
}

// AllocatesAtMost runs f and fails the test if the process allocated more than limit bytes
// meanwhile (runtime.MemStats.TotalAlloc, which counts every allocation, freed or not): the check
// that a reader given a small hostile file allocates in proportion to the file, not to a number
// in it. Tests running in parallel add their allocations: keep the limit loose.
func AllocatesAtMost(t testing.TB, what string, limit uint64, f func()) {
	t.Helper()
	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	f()
	goruntime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > limit {
		t.Errorf("%s allocated %d bytes; the bound is %d", what, n, limit)
	}
}

// Within runs f, failing the test if it takes longer than limit (f is then left running): for
// inputs that must be refused or handled in bounded time, never looped on.
func Within(t testing.TB, limit time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s: still running after %s", what, limit)
	}
}
