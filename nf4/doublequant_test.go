package nf4_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/sharding"
)

// TestDynamicMap checks the 8-bit dynamic map's structure by hand: 256 values sorted ascending,
// 0 and 1 present, the positive values 10^(i-6)·m for the 2^i means m of linspace(0.1, 1, 2^i+1)
// per decade i (so 127 positive values below 1, the largest (0.98125+1)/2-ish of decade 0), and the
// negative values their mirror. (That the float32 bits are bitsandbytes' is checked against its
// own map in package bnb's tests.)
func TestDynamicMap(t *testing.T) {
	m := nf4.DynamicMap()
	if !slices.IsSorted(m[:]) {
		t.Fatalf("map not sorted")
	}
	if !slices.Contains(m[:], 0) || m[255] != 1 {
		t.Errorf("map lacks 0 or ends at %v, want 1", m[255])
	}
	var pos, neg []float32
	for _, v := range m {
		switch {
		case v > 0 && v < 1:
			pos = append(pos, v)
		case v < 0:
			neg = append(neg, -v)
		}
	}
	slices.Sort(neg)
	if len(pos) != 127 || !slices.Equal(pos, neg) {
		t.Fatalf("%d positive and %d negative values below 1, want 127 mirrored", len(pos), len(neg))
	}
	// Decade 6 (i = 6): 64 means of linspace(0.1, 1, 65), step 0.9/64; the largest is 1 - 0.45/64.
	if got, want := float64(pos[126]), 1-0.45/64; math.Abs(got-want) > 1e-6 {
		t.Errorf("largest value below 1: %v, want %v", got, want)
	}
	// Decade 0: a single mean, (0.1+1)/2·10^-6, the smallest positive value.
	if got, want := float64(pos[0]), 0.55e-6; math.Abs(got-want) > 1e-12 {
		t.Errorf("smallest positive value: %v, want %v", got, want)
	}
}

// TestDoubleQuantizeBytesPerParameter: 0.5 byte of codes, one uint8 code per block of 64, one
// float32 per 256 blocks and the offset: ≈ 0.516 bytes per parameter for a 1024×1024 weight,
// against 0.5625 with float32 absmax.
func TestDoubleQuantizeBytesPerParameter(t *testing.T) {
	w := nf4.MustQuantize(testutil.RandomTensor(1, 1024, 1024), 64)
	dq := nf4.MustDoubleQuantize(w)
	n := float64(1024 * 1024)
	for _, tc := range []struct {
		a    *nf4.Array
		want float64
	}{
		{w, 0.5 + 4.0/64},
		{dq, 0.5 + 1.0/64 + 4.0*64/n + 4/n},
	} {
		if got := float64(tc.a.Bytes()) / n; math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: %v bytes per parameter, want %v", tc.a, got, tc.want)
		}
	}
	if got := float64(dq.Bytes()) / n; got > 0.5160 || got < 0.5156 {
		t.Errorf("double-quantized: %.5f bytes per parameter, want about 0.516", got)
	}
}

// TestDoubleQuantizeError: the decoded absmax stay within half a step of the dynamic map (times
// the second-level absmax) of the float absmax, host-side and in the graph, for every input
// dtype; materializing differs from the plain array by at most that error times |code value| <= 1.
func TestDoubleQuantizeError(t *testing.T) {
	backend := testutil.Backend(t)
	m := nf4.DynamicMap()
	maxGap := 0.0
	for i := 1; i < len(m); i++ {
		maxGap = math.Max(maxGap, float64(m[i]-m[i-1]))
	}
	for _, dims := range [][]int{{3, 200}, {700, 64}, {5}} {
		x := testutil.RandomTensor(7, dims...)
		plain := nf4.MustQuantize(x, 64)
		absmax := testutil.Float32s(t, plain.Absmax().Tensor())
		hostDQ := nf4.MustDoubleQuantize(plain)
		graphDQ := implicitarray.MustNewExec(backend, func(x *graph.Node) implicitarray.Value {
			return nf4.DoubleQuantizeNode(nf4.QuantizeNode(x, 64))
		})
		fromGraph := graphDQ.MustCall1(x).(*nf4.Array)
		graphDQ.Finalize()
		for name, a := range map[string]*nf4.Array{"host": hostDQ, "graph": fromGraph} {
			t.Run(fmt.Sprintf("%v/%s", dims, name), func(t *testing.T) {
				if !a.DoubleQuantized() || a.Format().String() != "nf4-dq/64" {
					t.Fatalf("format %s", a.Format())
				}
				nested := testutil.Float32s(t, a.NestedAbsmax().Tensor())
				dense := testutil.Float32s(t, testutil.Materialize(t, a))
				want := testutil.Float32s(t, testutil.Materialize(t, plain))
				for i := range want {
					block := i / 64
					if len(dims) > 1 {
						block = (i/dims[1])*((dims[1]+63)/64) + (i%dims[1])/64
					}
					bound := nested[block/nf4.NestedBlockSize]*float32(maxGap/2)*1.001 + 1e-6*absmax[block]
					if d := math.Abs(float64(dense[i] - want[i])); d > float64(bound) {
						t.Fatalf("element %d: %v, plain %v (block absmax %v, bound %v)", i, dense[i], want[i], absmax[block], bound)
					}
				}
			})
		}
	}
}

// TestDoubleQuantizeOverflow: finite absmax whose float32 mean overflows (blocks of ±3e38) cannot
// be double-quantized: an error, not an array that materializes as NaN everywhere.
func TestDoubleQuantizeOverflow(t *testing.T) {
	v := make([]float32, 8*64)
	for i := range v {
		v[i] = 3e38 * float32(1-2*(i%2))
	}
	plain := nf4.MustQuantize(tensors.FromFlatDataAndDimensions(v, 8, 64), 64)
	dq, err := nf4.DoubleQuantize(plain)
	if err == nil || !strings.Contains(err.Error(), "overflows float32") {
		msg := ""
		if err == nil {
			msg = fmt.Sprintf("; it materializes as %v", testutil.Float32s(t, testutil.Materialize(t, dq))[:4])
		}
		t.Fatalf("DoubleQuantize of blocks of absmax 3e38: error %v, want one saying the mean overflows%s", err, msg)
	}
}

// handEncodedDoubleQuantized returns the double quantization of a (3, 2) weight of NF4 code 0
// everywhere, in blocks of 2 (one block a row) of absmax 1, 2 and 3.
func handEncodedDoubleQuantized(t *testing.T) *nf4.Array {
	t.Helper()
	packed := tensors.FromShape(shapes.Make(dtypes.Uint8, 3, 1, 1))
	a, err := nf4.FromTensors(shapes.Make(dtypes.Float32, 3, 2), nf4.Format{BlockSize: 2}, packed,
		tensors.FromValue([][]float32{{1}, {2}, {3}}))
	if err != nil {
		t.Fatal(err)
	}
	return nf4.MustDoubleQuantize(a)
}

// TestDoubleQuantizeHandEncoded: one block of absmax {1, 2, 3} has offset 2, centred values
// {-1, 0, 1} and second-level absmax 1. -1 and 1 take the map's ends (codes 0 and 255). 0 does
// not take the map's 0: bitsandbytes looks codes up in 65536 bins of [-1, 1], and 0 falls in bin
// trunc(0.5·65535 + 0.5) = 32768, centred at -1 + 2·32768/65535 = 1/65535 ≈ 1.526e-5, whose
// nearest map value is 2.125e-5 (decade 10^-4: the first mean of linspace(0.1, 1, 5), 0.2125;
// the values below it are 0, 0.55e-6, 3.25e-6 and 7.75e-6, the last one 7.5e-6 away from the bin
// centre against 5.99e-6): code 0's index + 4.
func TestDoubleQuantizeHandEncoded(t *testing.T) {
	dq := handEncodedDoubleQuantized(t)
	m := nf4.DynamicMap()
	zero := slices.Index(m[:], 0)
	codes := tensors.MustCopyFlatData[uint8](dq.Absmax().Tensor())
	if !slices.Equal(codes, []uint8{0, uint8(zero + 4), 255}) {
		t.Errorf("codes %v, want [0 %d 255]", codes, zero+4)
	}
	if got := float64(m[zero+4]); math.Abs(got-2.125e-5) > 1e-11 {
		t.Errorf("map[%d] = %v, want 2.125e-5", zero+4, got)
	}
	if got := tensors.MustCopyFlatData[float32](dq.Offset().Tensor()); got[0] != 2 {
		t.Errorf("offset %v, want 2", got)
	}
	if got := tensors.MustCopyFlatData[float32](dq.NestedAbsmax().Tensor()); !slices.Equal(got, []float32{1}) {
		t.Errorf("nested absmax %v, want [1]", got)
	}
}

// TestDoubleQuantizedHandlers: a reshape that keeps the last axis moves the codes as they are
// (exact); one that moves it re-quantizes, double-quantized again (a transpose is lazy:
// TestTransposeIsLazy).
func TestDoubleQuantizedHandlers(t *testing.T) {
	w := nf4.MustDoubleQuantize(nf4.MustQuantize(testutil.RandomTensor(5, 3, 4, 64), 32))
	for _, tc := range []struct {
		name  string
		op    func(implicitarray.Value) implicitarray.Value
		exact bool
	}{
		{"reshape", func(v implicitarray.Value) implicitarray.Value { return implicitarray.Reshape(v, 12, 64) }, true},
		{"transpose-identity", func(v implicitarray.Value) implicitarray.Value { return implicitarray.TransposeAllAxes(v, 0, 1, 2) }, true},
		// A broadcast to the array's own dimensions is the array, not a re-quantized copy.
		{"broadcast-identity", func(v implicitarray.Value) implicitarray.Value {
			return implicitarray.BroadcastInDim(v, []int{3, 4, 64}, []int{0, 1, 2})
		}, true},
		{"reshape-last", func(v implicitarray.Value) implicitarray.Value { return implicitarray.Reshape(v, 3, 256) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			result, st := testutil.ApplyOp(t, w, tc.op)
			out, ok := result.(*nf4.Array)
			if !ok || !out.DoubleQuantized() {
				t.Fatalf("result %v is not a double-quantized *nf4.Array", out)
			}
			materialized := st.Materializations["*nf4.Array"]
			if tc.exact != (materialized == 0) {
				t.Errorf("%d materializations; exact=%v", materialized, tc.exact)
			}
			want := testutil.DenseOp(t, w, tc.op)
			got, ref := testutil.Float64s(t, testutil.Materialize(t, out)), testutil.Float64s(t, want)
			if tc.exact && !slices.Equal(got, ref) {
				t.Errorf("values differ from the dense op")
			}
			if d, scale := testutil.MaxAbsDiff(got, ref); d > 0.2*scale {
				t.Errorf("re-quantized values differ by %v (scale %v)", d, scale)
			}
		})
	}
}

// TestDoubleQuantizedRequantizeLargeBlocks: a shape op that re-quantizes a double-quantized
// array with blocks longer than the new last axis allows for a fresh array (128 > 64) keeps the
// block size, padding the rows, as for the default format, rather than asking QuantizeNode for a
// block size it refuses.
func TestDoubleQuantizedRequantizeLargeBlocks(t *testing.T) {
	backend := testutil.Backend(t)
	w := nf4.MustDoubleQuantize(nf4.MustQuantize(testutil.RandomTensor(5, 2, 128), 128))
	for _, tc := range []struct {
		name string
		op   func(implicitarray.Value) implicitarray.Value
	}{
		{"reshape", func(v implicitarray.Value) implicitarray.Value { return implicitarray.Reshape(v, 128, 2) }},
		{"broadcast", func(v implicitarray.Value) implicitarray.Value {
			return implicitarray.BroadcastInDim(v, []int{2, 128, 3}, []int{0, 1})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := implicitarray.MustNewExec(backend, func(w *nf4.Array) implicitarray.Value { return tc.op(w) })
			defer e.Finalize()
			outs, err := e.Call(w)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			out, ok := outs[0].(*nf4.Array)
			if !ok || !out.DoubleQuantized() || out.BlockSize() != 128 {
				t.Fatalf("result %v; want a double-quantized *nf4.Array of block 128", outs[0])
			}
			want := testutil.DenseOp(t, w, tc.op)
			got, ref := testutil.Float64s(t, testutil.Materialize(t, out)), testutil.Float64s(t, want)
			if d, scale := testutil.MaxAbsDiff(got, ref); d > 0.2*scale {
				t.Errorf("re-quantized values differ by %v (scale %v)", d, scale)
			}
		})
	}
}

// TestFlatBlocks: an array whose blocks run over the flattened values (as bitsandbytes stores
// them) materializes block by block across rows; any reshape keeps it exactly; it cannot be
// sharded.
func TestFlatBlocks(t *testing.T) {
	backend := testutil.Backend(t)
	// 3×3 values in blocks of 4 over the flattened array: blocks {0..3}, {4..7}, {8}, scales 1, 2, 4.
	// Codes 15 (1.0) everywhere except code 7 (0) at flat index 5.
	packed := tensors.FromValue([][]uint8{{0xFF, 0xFF}, {0xF7, 0xFF}, {0xF7, 0x77}})
	a, err := nf4.FromTensors(shapes.Make(dtypes.Float32, 3, 3), nf4.Format{BlockSize: 4, FlatBlocks: true}, packed,
		tensors.FromValue([]float32{1, 2, 4}))
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{1, 1, 1, 1, 2, 0, 2, 2, 4}
	if got := testutil.Float32s(t, testutil.Materialize(t, a)); !slices.Equal(got, want) {
		t.Errorf("materialized %v, want %v", got, want)
	}
	e := implicitarray.MustNewExec(backend, func(w *nf4.Array) implicitarray.Value { return implicitarray.Reshape(w, 9, 1) })
	defer e.Finalize()
	r := e.MustCall1(a).(*nf4.Array)
	if !r.Format().FlatBlocks || !slices.Equal(r.Shape().Dimensions, []int{9, 1}) {
		t.Errorf("reshaped to %s %s", r.Shape(), r.Format())
	}
	if got := testutil.Float32s(t, testutil.Materialize(t, r)); !slices.Equal(got, want) {
		t.Errorf("reshaped values %v, want %v", got, want)
	}
	m := sharding.MustNewMesh([]string{"model"}, []int{3})
	if _, err := a.ComponentSpecs(m, sharding.PartitionSpec{{"model"}}); err == nil || !strings.Contains(err.Error(), "replicated") {
		t.Errorf("sharding a flat array: %v, want an error naming the replicated spec", err)
	}
	if specs, err := a.ComponentSpecs(m, sharding.Replicated); err != nil || len(specs) != 2 {
		t.Errorf("replicated: %v, %v", specs, err)
	}
}

// TestFromTensorsErrors: components that do not fit the format are errors naming what is accepted.
func TestFromTensorsErrors(t *testing.T) {
	f32 := shapes.Make(dtypes.Float32, 2, 8)
	u8 := func(dims ...int) *tensors.Tensor { return tensors.FromShape(shapes.Make(dtypes.Uint8, dims...)) }
	f := func(dims ...int) *tensors.Tensor { return tensors.FromShape(shapes.Make(dtypes.Float32, dims...)) }
	for _, tc := range []struct {
		name   string
		shape  shapes.Shape
		format nf4.Format
		comps  []*tensors.Tensor
		want   string
	}{
		{"odd block", f32, nf4.Format{BlockSize: 3}, []*tensors.Tensor{u8(2, 3, 1), f(2, 3)}, "block size 3"},
		{"packed shape", f32, nf4.Format{BlockSize: 4}, []*tensors.Tensor{u8(2, 2, 4), f(2, 2)}, "accepted"},
		{"too few", f32, nf4.Format{BlockSize: 4, DoubleQuant: true}, []*tensors.Tensor{u8(2, 2, 2), u8(2, 2)}, "accepted"},
		{"integer absmax", f32, nf4.Format{BlockSize: 4}, []*tensors.Tensor{u8(2, 2, 2), u8(2, 2)}, "float dtype"},
		{"flat scales", f32, nf4.Format{BlockSize: 4, FlatBlocks: true}, []*tensors.Tensor{u8(4, 2), f(2, 2)}, "accepted"},
		{"integer logical", shapes.Make(dtypes.Int32, 2, 8), nf4.Format{BlockSize: 4}, []*tensors.Tensor{u8(2, 2, 2), f(2, 2)}, "dtype"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := nf4.FromTensors(tc.shape, tc.format, tc.comps...)
			if err == nil || a != nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nf4.FromTensors") {
				t.Errorf("got %v, %v; want an nf4.FromTensors error mentioning %q", a, err, tc.want)
			}
		})
	}
	dq := nf4.MustDoubleQuantize(nf4.MustQuantize(testutil.RandomTensor(1, 2, 8), 4))
	if _, err := nf4.DoubleQuantize(dq); err == nil || !strings.Contains(err.Error(), "already") {
		t.Errorf("double-quantizing twice: %v", err)
	}
	dq.Delete()
	if _, err := nf4.DoubleQuantize(dq); !errors.Is(err, implicitarray.ErrDeleted) {
		t.Errorf("after Delete: %v, want ErrDeleted", err)
	}
}

// TestDoubleQuantizedGradient: graph.Gradient reaches the float components of a double-quantized
// array (the second-level absmax and the offset), through its materialization and through a
// product, on every backend. The hand-encoded weight of TestDoubleQuantizeHandEncoded is -1 (NF4
// code 0) times its row's scale m[code]·absmax2 + offset, two columns per row, so the sum of its
// elements has the derivatives -2·Σ m[code] (absmax2) and -2·3 (offset).
func TestDoubleQuantizedGradient(t *testing.T) {
	backend := testutil.Backend(t)
	dq := handEncodedDoubleQuantized(t)
	m := nf4.DynamicMap()
	codes := tensors.MustCopyFlatData[uint8](dq.Absmax().Tensor())
	wantAbsmax := 0.0
	for _, c := range codes {
		wantAbsmax -= 2 * float64(m[c])
	}
	for name, loss := range map[string]func(w *nf4.Array) *graph.Node{
		"materialize": func(w *nf4.Array) *graph.Node { return graph.ReduceAllSum(implicitarray.Materialize(w)) },
		"matmul": func(w *nf4.Array) *graph.Node {
			ones := graph.Ones(w.Packed().Node().Graph(), shapes.Make(dtypes.Float32, 1, 3))
			return graph.ReduceAllSum(implicitarray.Materialize(implicitarray.MatMul(ones, w)))
		},
	} {
		t.Run(name, func(t *testing.T) {
			var out []any
			err := func() (err error) {
				defer testutil.RecoverError(&err)
				e := implicitarray.MustNewExec(backend, func(w *nf4.Array) []*graph.Node {
					return graph.Gradient(loss(w), w.NestedAbsmax().Node(), w.Offset().Node())
				})
				defer e.Finalize()
				out, err = e.Call(dq)
				return err
			}()
			if err != nil {
				t.Fatalf("gradient: %+v", err)
			}
			grads := out[0].([]*tensors.Tensor)
			if got := testutil.Float64s(t, grads[0]); len(got) != 1 || math.Abs(got[0]-wantAbsmax) > 1e-6 {
				t.Errorf("d/d absmax2 = %v, want [%g]", got, wantAbsmax)
			}
			if got := testutil.Float64s(t, grads[1]); len(got) != 1 || got[0] != -6 {
				t.Errorf("d/d offset = %v, want [-6]", got)
			}
		})
	}
}

// TestDoubleQuantizeNodeSharding: a double-quantized array takes only a replicated spec (its
// nested scales run across rows), so DoubleQuantizeNode of an array sharded along an axis gives
// one replicated over the same mesh, which it can be placed by; a replicated sharding is kept.
func TestDoubleQuantizeNodeSharding(t *testing.T) {
	m := sharding.MustNewMesh([]string{"model"}, []int{4})
	w := nf4.MustQuantize(testutil.RandomTensor(8, 8, 256), 64)
	e := implicitarray.MustNewExec(testutil.Backend(t), func(w *nf4.Array) implicitarray.Value { return nf4.DoubleQuantizeNode(w) })
	defer e.Finalize()
	for _, spec := range []sharding.PartitionSpec{{nil, {"model"}}, {{"model"}}, {}} {
		t.Run(spec.String(), func(t *testing.T) {
			dq := e.MustCall1(w.WithSharding(sharding.Sharding{Mesh: m, Spec: spec})).(*nf4.Array)
			s, ok := dq.Sharding()
			if !ok || s.Mesh != m || !s.Spec.Equal(sharding.Replicated) {
				t.Fatalf("sharding %s (%v), want replicated over %s", s, ok, m)
			}
			if _, err := dq.ComponentSpecs(m, s.Spec); err != nil {
				t.Errorf("the double-quantized array refuses its own sharding: %v", err)
			}
		})
	}
}

// TestDoubleQuantizeSharding: host DoubleQuantize keeps the array's mesh, replicated (the only
// spec a double-quantized array takes), as DoubleQuantizeNode does; it dropped any sharding, even
// a replicated one. The values are those of the unsharded array's double quantization.
func TestDoubleQuantizeSharding(t *testing.T) {
	m := sharding.MustNewMesh([]string{"model"}, []int{4})
	w := nf4.MustQuantize(testutil.RandomTensor(8, 8, 256), 64)
	plain := nf4.MustDoubleQuantize(w)
	if _, ok := plain.Sharding(); ok {
		t.Errorf("an unsharded array's double quantization has a sharding")
	}
	for _, spec := range []sharding.PartitionSpec{{nil, {"model"}}, {{"model"}}, {}} {
		t.Run(spec.String(), func(t *testing.T) {
			dq := nf4.MustDoubleQuantize(w.WithSharding(sharding.Sharding{Mesh: m, Spec: spec}))
			s, ok := dq.Sharding()
			if !ok || s.Mesh != m || !s.Spec.Equal(sharding.Replicated) {
				t.Fatalf("sharding %s (%v), want replicated over %s", s, ok, m)
			}
			if _, err := dq.ComponentSpecs(m, s.Spec); err != nil {
				t.Errorf("the double-quantized array refuses its own sharding: %v", err)
			}
			testutil.SameBits(t, "values", testutil.Float32s(t, testutil.Materialize(t, dq)), testutil.Float32s(t, testutil.Materialize(t, plain)))
		})
	}
}
