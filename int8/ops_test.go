package int8_test

import (
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/sharding"
)

// TestShapeOps checks that transpose and broadcast_in_dim stay *int8.Array without materializing
// and equal the dense op on the materialized value; reshape re-quantizes.
func TestShapeOps(t *testing.T) {
	backend := testutil.Backend(t)
	rng := rand.New(rand.NewSource(11))
	for _, tc := range []struct {
		name     string
		dims     []int
		axes     []int
		op       func(v implicitarray.Value) implicitarray.Value
		wantAxes []int
		lazy     bool
	}{
		{"transpose-2d", []int{3, 4}, []int{-1}, func(v implicitarray.Value) implicitarray.Value { return implicitarray.Transpose(v, 1, 0) }, []int{0}, true},
		// A 3-cycle: eformer's forward remap would report axis perm[2] = 0 instead of 1.
		{"transpose-3-cycle", []int{2, 3, 4}, []int{2}, func(v implicitarray.Value) implicitarray.Value { return implicitarray.TransposeAllAxes(v, 1, 2, 0) }, []int{1}, true},
		{"transpose-3-cycle-axis0", []int{2, 3, 4}, []int{0}, func(v implicitarray.Value) implicitarray.Value { return implicitarray.TransposeAllAxes(v, 1, 2, 0) }, []int{2}, true},
		{"broadcast-new-leading", []int{3, 4}, []int{-1}, func(v implicitarray.Value) implicitarray.Value {
			return implicitarray.BroadcastInDim(v, []int{5, 3, 4}, []int{1, 2})
		}, []int{2, 0}, true},
		{"broadcast-size1", []int{1, 4}, []int{0}, func(v implicitarray.Value) implicitarray.Value {
			return implicitarray.BroadcastInDim(v, []int{6, 4, 2}, []int{0, 1})
		}, []int{0, 2}, true},
		{"convert-bf16", []int{3, 4}, nil, func(v implicitarray.Value) implicitarray.Value { return implicitarray.ConvertDType(v, dtypes.BFloat16) }, []int{1}, true},
		{"reshape", []int{3, 4}, []int{0}, func(v implicitarray.Value) implicitarray.Value { return implicitarray.Reshape(v, 2, 6) }, []int{1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := qint8.MustQuantize(testutil.NormalTensor(rng, tc.dims...), tc.axes...).WithSharding(sharding.Sharding{Spec: sharding.PartitionSpec{{"model"}}})
			implicitarray.ResetStats()
			e := implicitarray.MustNewExec(backend, func(a *qint8.Array) (*qint8.Array, *graph.Node) {
				out := tc.op(a)
				b, ok := out.(*qint8.Array)
				if !ok {
					t.Fatalf("result is %T, want *int8.Array", out)
				}
				return b, tc.op(implicitarray.Materialize(a)).(*graph.Node)
			})
			outs := e.MustCall(a)
			b, ref := outs[0].(*qint8.Array), outs[1].(*tensors.Tensor)
			// Materialize counts: once for the reference, once more for reshape.
			wantMat := 1
			if !tc.lazy {
				wantMat = 2
			}
			if n := implicitarray.CurrentStats().Materializations["*int8.Array"]; n != wantMat {
				t.Errorf("%d materializations, want %d", n, wantMat)
			}
			if !slices.Equal(b.Axes(), tc.wantAxes) {
				t.Errorf("axes %v, want %v", b.Axes(), tc.wantAxes)
			}
			// The sharding follows the axes through transposes and broadcasts.
			wantSpec := map[string]sharding.PartitionSpec{
				"transpose-2d":            {nil, {"model"}},
				"transpose-3-cycle":       {nil, nil, {"model"}},
				"transpose-3-cycle-axis0": {nil, nil, {"model"}},
				"broadcast-new-leading":   {nil, {"model"}},
				"reshape":                 {}, // the sharded first axis changes: replicated
			}[tc.name]
			if wantSpec == nil {
				wantSpec = sharding.PartitionSpec{{"model"}}
			}
			if s, ok := b.Sharding(); !ok || !s.Spec.Equal(wantSpec) {
				t.Errorf("sharding %v (%v), want %v", s, ok, wantSpec)
			}
			got := testutil.Materialize(t, b)
			g, w := testutil.Float64s(t, got), testutil.Float64s(t, ref)
			scale := testutil.Float64s(t, b.Scale().Tensor())
			maxScale := 0.0
			for _, s := range scale {
				maxScale = max(maxScale, s)
			}
			for i := range w {
				d := g[i] - w[i]
				if tc.lazy && d != 0 && got.DType() == dtypes.Float32 {
					t.Fatalf("[%d] = %g, want %g exactly", i, g[i], w[i])
				}
				if d > maxScale/2+1e-2*abs(w[i]) || -d > maxScale/2+1e-2*abs(w[i]) {
					t.Fatalf("[%d] = %g, want %g", i, g[i], w[i])
				}
			}
			// Broadcast keeps the scale compact: no axis larger than the input's scale.
			if tc.name == "broadcast-new-leading" && b.Scale().Shape().Size() != 3 {
				t.Errorf("broadcast scale %s, want 3 elements", b.Scale().Shape())
			}
		})
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestElementwiseMaterializes checks that ops without a handler reach the generic fallback: dense
// result, counted.
func TestElementwiseMaterializes(t *testing.T) {
	backend := testutil.Backend(t)
	x := tensors.FromValue([][]float32{{1, 2, 3}, {4, 5, 6}})
	a := qint8.MustQuantize(x)
	implicitarray.ResetStats()
	e := implicitarray.MustNewExec(backend, func(a *qint8.Array, y *graph.Node) []*graph.Node {
		return []*graph.Node{
			implicitarray.Add(a, y).(*graph.Node),
			implicitarray.Mul(y, a).(*graph.Node),
			implicitarray.Exp(a).(*graph.Node),
			implicitarray.ReduceSum(a, 1).(*graph.Node),
			implicitarray.Concatenate([]implicitarray.Value{a, a}, 0).(*graph.Node),
		}
	})
	outs := e.MustCall(a, x)[0].([]*tensors.Tensor)
	if got := outs[3].Value().([]float32); abs(float64(got[0]-6)) > 0.05 || abs(float64(got[1]-15)) > 0.1 {
		t.Errorf("ReduceSum = %v", got)
	}
	st := implicitarray.CurrentStats()
	for _, op := range []implicitarray.Op{implicitarray.OpAdd, implicitarray.OpMul, implicitarray.OpExp, implicitarray.OpReduceSum,
		implicitarray.OpConcatenate} {
		if st.Fallbacks[implicitarray.Key{Op: op, Type: "*int8.Array"}] == 0 {
			t.Errorf("%s: no fallback counted (%v)", op, st.Fallbacks)
		}
	}
}

func TestSharding(t *testing.T) {
	a := qint8.MustQuantize(tensors.FromValue([][]float32{{1, 2}, {3, 4}}))
	m := sharding.MustNewMesh([]string{"data", "model"}, []int{1, 2})
	b, err := a.WithMeshAndAxis(m, []any{nil, "model"})
	if err != nil {
		t.Fatal(err)
	}
	if a.IsSharded() || !b.IsSharded() || a.Metadata() == b.Metadata() {
		t.Errorf("WithMeshAndAxis: original %v, copy %v", a.IsSharded(), b.IsSharded())
	}
	if _, err := a.WithMeshAndAxis(m, "nope"); err == nil {
		t.Error("unknown mesh axis: no error")
	}
	if c := b.WithSharding(sharding.Sharding{}); c.IsSharded() {
		t.Error("WithSharding to the zero sharding kept it")
	}
	// Scale (2, 1) over the quantized last axis: replicated along the sharded columns.
	specs, err := b.ComponentSpecs(m, sharding.PartitionSpec{nil, {"model"}})
	if err != nil || len(specs) != 2 || specs[0].String() != "P(None, 'model')" || specs[1].String() != "P(None, None)" {
		t.Fatalf("ComponentSpecs(columns) = %v, %v; want [P(None, 'model') P(None, None)]", specs, err)
	}
	specs, err = b.ComponentSpecs(m, sharding.PartitionSpec{{"model"}})
	if err != nil || len(specs) != 2 || specs[0].String() != "P('model', None)" || specs[1].String() != "P('model', None)" {
		t.Fatalf("ComponentSpecs(rows) = %v, %v; want [P('model', None) P('model', None)]", specs, err)
	}
	odd := qint8.MustQuantize(tensors.FromValue([][]float32{{1, 2, 3}}))
	if _, err := odd.WithMeshAndAxis(m, []any{nil, "model"}); err == nil || !strings.Contains(err.Error(), "not divisible by 2") {
		t.Errorf("WithMeshAndAxis with 3 columns over 2 shards: %v", err)
	}
}

func TestNew(t *testing.T) {
	w := implicitarray.TensorComponent(tensors.FromFlatDataAndDimensions([]int8{1, 2, 3, 4}, 2, 2))
	for _, tc := range []struct {
		scale *tensors.Tensor
		axes  []int
		ok    bool
	}{
		{tensors.FromValue([][]float32{{1}, {2}}), nil, true},
		{tensors.FromValue([][]float32{{1, 2}}), []int{0}, true},
		{tensors.FromValue([][]float32{{1, 2}}), nil, false},  // size 2 on the quantized axis
		{tensors.FromValue([]float32{1, 2}), []int{0}, false}, // rank
		{tensors.FromValue([][]int32{{1}, {2}}), nil, false},  // dtype
	} {
		_, err := qint8.New(w, implicitarray.TensorComponent(tc.scale), dtypes.InvalidDType, tc.axes...)
		if (err == nil) != tc.ok {
			t.Errorf("scale %s axes %v: err %v", tc.scale.Shape(), tc.axes, err)
		}
	}
}

// TestGatherRows: gathering along unquantized leading axes (rows of a table with a scale per
// row) keeps the array int8 without materializing, with the rows of the materialized array bit
// for bit; indexing a quantized axis falls back to the dense gather.
func TestGatherRows(t *testing.T) {
	backend := testutil.Backend(t)
	rng := rand.New(rand.NewSource(3))
	for _, tc := range []struct {
		name     string
		dims     []int
		axes     []int
		indices  any
		lazy     bool
		wantAxes []int
	}{
		{"rows", []int{7, 5}, []int{-1}, [][]int32{{6}, {0}, {6}}, true, []int{1}},
		{"rows-2d-indices", []int{7, 5}, []int{-1}, [][][]int32{{{1}, {2}}, {{4}, {0}}}, true, []int{2}},
		{"rank3-rows", []int{4, 3, 5}, []int{-1}, [][]int32{{3}, {1}}, true, []int{2}},
		{"quantized-axis-indexed", []int{7, 5}, []int{0}, [][]int32{{6}, {0}}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := qint8.MustQuantize(testutil.NormalTensor(rng, tc.dims...), tc.axes...)
			implicitarray.ResetStats()
			e := implicitarray.MustNewExec(backend, func(a *qint8.Array, idx *graph.Node) []*graph.Node {
				out := implicitarray.Gather(a, idx, false)
				if b, ok := out.(*qint8.Array); ok != tc.lazy {
					t.Fatalf("result %T; lazy %v", out, tc.lazy)
				} else if ok && !slices.Equal(b.Axes(), tc.wantAxes) {
					t.Errorf("axes %v, want %v", b.Axes(), tc.wantAxes)
				}
				return []*graph.Node{implicitarray.Materialize(out), graph.Gather(implicitarray.Materialize(a), idx)}
			})
			defer e.Finalize()
			outs := e.MustCall(a, tensors.FromAnyValue(tc.indices))[0].([]*tensors.Tensor)
			fellBack := implicitarray.CurrentStats().Fallbacks[implicitarray.Key{Op: implicitarray.OpGather, Type: "*int8.Array"}] > 0
			if fellBack == tc.lazy {
				t.Errorf("gather fell back: %v; want %v", fellBack, !tc.lazy)
			}
			if g, r := testutil.Float32s(t, outs[0]), testutil.Float32s(t, outs[1]); !slices.Equal(g, r) {
				t.Errorf("gathered rows %v differ from the rows of the materialized array %v", g, r)
			}
		})
	}
}

// TestReshapeToScalar: a one-element array reshaped to a scalar, which has no axis to quantize
// along, is the dense scalar, not a re-quantization QuantizeNode refuses.
func TestReshapeToScalar(t *testing.T) {
	a := qint8.MustQuantize(tensors.FromValue([][]float32{{-2.5}}))
	e := implicitarray.MustNewExec(testutil.Backend(t), func(a *qint8.Array) implicitarray.Value { return implicitarray.Reshape(a) })
	defer e.Finalize()
	got, err := e.Call1(a)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	// The code round(-2.5 / scale) = -127 times the scale 2.5/127: -2.5 in float32.
	if out, ok := got.(*tensors.Tensor); !ok || out.Shape().Rank() != 0 || out.Value().(float32) != -2.5 {
		t.Errorf("got %v, want the dense scalar -2.5", got)
	}
}

// TestIdentityReshape: a reshape to the array's own dimensions (Reshape(w, -1, last) on a 2-D
// weight) returns the array as it is: same codes, scale and quantized axes, no materialization.
// It re-quantized along (-1,), changing the values of an array quantized along axis 0.
func TestIdentityReshape(t *testing.T) {
	w := qint8.MustQuantize(testutil.RandomTensor(1, 6, 5), 0)
	out, st := testutil.ApplyOp(t, w, func(w implicitarray.Value) implicitarray.Value { return implicitarray.Reshape(w, -1, 5) })
	got, ok := out.(*qint8.Array)
	if !ok || !slices.Equal(got.Axes(), []int{0}) {
		t.Fatalf("got %v, want an *int8.Array quantized along axis 0", got)
	}
	if len(st.Materializations) != 0 || len(st.Requantizations) != 0 {
		t.Errorf("stats %+v: want no materialization", st)
	}
	testutil.SameBits(t, "values", testutil.Float32s(t, testutil.Materialize(t, got)), testutil.Float32s(t, testutil.Materialize(t, w)))
}
