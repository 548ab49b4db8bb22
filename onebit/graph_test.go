package onebit_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/onebit"
	"github.com/quanta-ml/quanta/sharding"
)

// packed builds an Array (TwoBit) or a BitArray (OneBit) from values.
func packed(t *testing.T, l onebit.Packing, values []int8, dims []int, opts *onebit.Options) implicitarray.Array {
	t.Helper()
	tensor := tensors.FromFlatDataAndDimensions(values, dims...)
	if l == onebit.OneBit {
		return onebit.MustPackBits(tensor, opts)
	}
	return onebit.MustPack(tensor, opts)
}

// smallInts returns n small integer activations (exact in float32 sums).
func smallInts(r *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.Intn(9) - 4)
	}
	return out
}

func TestMaterialize(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	for _, l := range []onebit.Packing{onebit.TwoBit, onebit.OneBit} {
		for _, dtype := range []dtypes.DType{dtypes.Float32, dtypes.Int8, dtypes.BFloat16, dtypes.Float64, dtypes.Int32} {
			t.Run(fmt.Sprintf("%s/%s", l, dtype), func(t *testing.T) {
				dims := []int{16, 3}
				v := randomValues(r, l, 48)
				a := packed(t, l, v, dims, &onebit.Options{DType: dtype})
				implicitarray.ResetStats()
				got := testutil.Materialize(t, a)
				if got.DType() != dtype || !slices.Equal(got.Shape().Dimensions, dims) {
					t.Fatalf("materialized %s", got.Shape())
				}
				asF32 := testutil.Materialize(t, mustDType(t, a, dtypes.Float32))
				if !slices.Equal(tensors.MustCopyFlatData[float32](asF32), testutil.Converted[float32](v)) {
					t.Fatalf("values differ")
				}
			})
		}
	}
}

func mustDType(t *testing.T, a implicitarray.Array, dtype dtypes.DType) implicitarray.Array {
	t.Helper()
	switch x := a.(type) {
	case *onebit.Array:
		return x.WithDType(dtype)
	case *onebit.BitArray:
		return x.WithDType(dtype)
	}
	t.Fatalf("not a onebit array: %T", a)
	return nil
}

func withStrategy(a implicitarray.Array, s lowering.Strategy) implicitarray.Array {
	if x, ok := a.(*onebit.Array); ok {
		return x.WithStrategy(s)
	}
	return a.(*onebit.BitArray).WithStrategy(s)
}

// packedAxisContracted reports whether the SlicedSum serves the case: the packed (first) axis of
// the weight is contracted.
func packedAxisContracted(c dotCase) bool { return slices.Contains(c.wContract, 0) }

type dotCase struct {
	name              string
	xDims, wDims      []int
	xContract, xBatch []int
	wContract, wBatch []int
	wIsLhs            bool
}

var dotCases = []dotCase{
	{"x@W", []int{3, 16}, []int{16, 5}, []int{1}, nil, []int{0}, nil, false},
	{"vector@W", []int{16}, []int{16, 5}, []int{0}, nil, []int{0}, nil, false},
	{"W^T x (W lhs)", []int{16, 3}, []int{16, 5}, []int{0}, nil, []int{0}, nil, true},
	{"x@W^T (packed axis free)", []int{3, 5}, []int{16, 5}, []int{1}, nil, []int{1}, nil, false},
	{"batched, packed axis contracted", []int{2, 3, 16}, []int{16, 2, 4}, []int{2}, []int{0}, []int{0}, []int{1}, false},
	{"packed axis batch", []int{8, 3}, []int{8, 3, 2}, []int{1}, []int{0}, []int{1}, []int{0}, true},
	{"two contracting axes", []int{2, 4, 16}, []int{16, 2, 3}, []int{2, 0}, nil, []int{0, 1}, nil, false},
}

func runDot(t *testing.T, c dotCase, x *tensors.Tensor, w implicitarray.Array, ref *tensors.Tensor) (got, want *tensors.Tensor) {
	t.Helper()
	backend := testutil.Backend(t)
	e := implicitarray.MustNewExec(backend, func(x *graph.Node, w implicitarray.Array, ref *graph.Node) (*graph.Node, *graph.Node) {
		var y implicitarray.Value
		var dense *graph.Node
		if c.wIsLhs {
			y = implicitarray.DotGeneral(w, c.wContract, c.wBatch, x, c.xContract, c.xBatch)
			dense = graph.DotGeneral(ref, c.wContract, c.wBatch, x, c.xContract, c.xBatch)
		} else {
			y = implicitarray.DotGeneral(x, c.xContract, c.xBatch, w, c.wContract, c.wBatch)
			dense = graph.DotGeneral(x, c.xContract, c.xBatch, ref, c.wContract, c.wBatch)
		}
		return implicitarray.Materialize(y), dense
	})
	defer e.Finalize()
	out, err := e.Call(x, w, ref)
	if err != nil {
		t.Fatal(err)
	}
	return out[0].(*tensors.Tensor), out[1].(*tensors.Tensor)
}

func TestDotGeneralExact(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	for _, l := range []onebit.Packing{onebit.TwoBit, onebit.OneBit} {
		for _, c := range dotCases {
			if l == onebit.OneBit && c.wDims[0]%8 != 0 {
				continue
			}
			v := randomValues(r, l, testutil.Size(c.wDims...))
			x := tensors.FromFlatDataAndDimensions(smallInts(r, testutil.Size(c.xDims...)), c.xDims...)
			ref := tensors.FromFlatDataAndDimensions(testutil.Converted[float32](v), c.wDims...)
			for _, s := range []lowering.Strategy{lowering.Auto, lowering.SlicedSum, lowering.DecodeDot, lowering.Materialize} {
				if s == lowering.SlicedSum && !packedAxisContracted(c) {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/%s", l, c.name, s), func(t *testing.T) {
					w := withStrategy(packed(t, l, v, c.wDims, &onebit.Options{DType: dtypes.Int8}), s)
					implicitarray.ResetStats()
					got, want := runDot(t, c, x, w, ref)
					st := implicitarray.CurrentStats()
					if len(st.Fallbacks) != 0 {
						t.Errorf("fallbacks %v", st.Fallbacks)
					}
					mats := st.Materializations[fmt.Sprintf("%T", w)]
					if s == lowering.Materialize && mats == 0 || s != lowering.Materialize && mats != 0 {
						t.Errorf("strategy %s: %d materializations", s, mats)
					}
					if !slices.Equal(got.Shape().Dimensions, want.Shape().Dimensions) || got.DType() != dtypes.Float32 {
						t.Fatalf("shape %s, want %s", got.Shape(), want.Shape())
					}
					if g, w := tensors.MustCopyFlatData[float32](got), tensors.MustCopyFlatData[float32](want); !slices.Equal(g, w) {
						t.Fatalf("got %v\nwant %v", g, w)
					}
				})
			}
		}
	}
}

// TestDotGeneralFusedSliced: with XLA CPU's library fusions disabled (lowering.LibraryFusionFlag
// in XLA_FLAGS), SlicedSum sums slices of the packed axis before its reduction; the result is
// still the exact dense product, with no materialization.
func TestDotGeneralFusedSliced(t *testing.T) {
	if lowering.PlatformOf(testutil.Backend(t)) == lowering.PureGo {
		t.Skip("the sliced form is built for XLA only")
	}
	t.Setenv("XLA_FLAGS", lowering.LibraryFusionFlag)
	r := rand.New(rand.NewSource(12))
	for _, l := range []onebit.Packing{onebit.TwoBit, onebit.OneBit} {
		for _, c := range dotCases {
			if l == onebit.OneBit && c.wDims[0]%8 != 0 || !packedAxisContracted(c) {
				continue
			}
			v := randomValues(r, l, testutil.Size(c.wDims...))
			x := tensors.FromFlatDataAndDimensions(smallInts(r, testutil.Size(c.xDims...)), c.xDims...)
			ref := tensors.FromFlatDataAndDimensions(testutil.Converted[float32](v), c.wDims...)
			t.Run(fmt.Sprintf("%s/%s", l, c.name), func(t *testing.T) {
				w := withStrategy(packed(t, l, v, c.wDims, &onebit.Options{DType: dtypes.Int8}), lowering.SlicedSum)
				implicitarray.ResetStats()
				got, want := runDot(t, c, x, w, ref)
				st := implicitarray.CurrentStats()
				if len(st.Fallbacks) != 0 || st.Materializations[fmt.Sprintf("%T", w)] != 0 {
					t.Errorf("fallbacks %v, materializations %v", st.Fallbacks, st.Materializations)
				}
				if g, w := tensors.MustCopyFlatData[float32](got), tensors.MustCopyFlatData[float32](want); !slices.Equal(g, w) {
					t.Fatalf("got %v\nwant %v", g, w)
				}
			})
		}
	}
}

func TestDotGeneralScaled(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	x := testutil.NormalTensor(r, 3, 16)
	wt := testutil.NormalTensor(r, 16, 5)
	quants := map[string]func() implicitarray.Array{
		"binary per output channel": func() implicitarray.Array {
			return onebit.MustQuantizeBinary(wt, &onebit.Options{Scale: true, ScaleAxes: []int{0}})
		},
		"binary bits per channel": func() implicitarray.Array {
			return onebit.MustQuantizeBinaryBits(wt, &onebit.Options{Scale: true, ScaleAxes: []int{0}})
		},
		"binary per input row": func() implicitarray.Array {
			return onebit.MustQuantizeBinary(wt, &onebit.Options{Scale: true, ScaleAxes: []int{1}})
		},
		"bitnet per tensor": func() implicitarray.Array { return onebit.MustQuantizeTernary(wt, &onebit.Options{BitNet: true}) },
		"ternary per channel": func() implicitarray.Array {
			return onebit.MustQuantizeTernary(wt, &onebit.Options{Scale: true, ScaleAxes: []int{0}})
		},
	}
	for name, q := range quants {
		for _, s := range []lowering.Strategy{lowering.SlicedSum, lowering.DecodeDot} {
			t.Run(name+"/"+s.String(), func(t *testing.T) {
				w := withStrategy(q(), s)
				// Reference: the scaled weight rebuilt on the host from the values and the scale.
				ref := scaledOnHost(t, w)
				implicitarray.ResetStats()
				got, want := runDot(t, dotCases[0], x, w, ref)
				if mats := implicitarray.CurrentStats().Materializations[fmt.Sprintf("%T", w)]; mats != 0 {
					t.Errorf("%d materializations", mats)
				}
				g, wv := tensors.MustCopyFlatData[float32](got), tensors.MustCopyFlatData[float32](want)
				for i := range g {
					if math.Abs(float64(g[i]-wv[i])) > 1e-4*(1+math.Abs(float64(wv[i]))) {
						t.Fatalf("element %d: %g, want %g", i, g[i], wv[i])
					}
				}
				// Materialize agrees with the host-side rebuild too.
				m := testutil.Materialize(t, w)
				mv, rv := tensors.MustCopyFlatData[float32](m), tensors.MustCopyFlatData[float32](ref)
				for i := range mv {
					if mv[i] != rv[i] {
						t.Fatalf("materialized %d: %g, want %g", i, mv[i], rv[i])
					}
				}
			})
		}
	}
}

// scaledOnHost returns values × scale computed on the host from the array's accessors.
func scaledOnHost(t *testing.T, a implicitarray.Array) *tensors.Tensor {
	t.Helper()
	type accessors interface {
		Values() (*tensors.Tensor, error)
		Scale() (implicitarray.Component, bool)
	}
	acc := a.(accessors)
	vt, err := acc.Values()
	if err != nil {
		t.Fatal(err)
	}
	v := tensors.MustCopyFlatData[int8](vt)
	sc, _ := acc.Scale()
	s := tensors.MustCopyFlatData[float32](sc.Tensor())
	dims, sDims := a.Shape().Dimensions, sc.Shape().Dimensions
	out := make([]float32, len(v))
	for i := range v {
		out[i] = float32(v[i]) * s[testutil.BroadcastIndex(i, dims, sDims)]
	}
	return tensors.FromFlatDataAndDimensions(out, dims...)
}

func TestHandlersAgainstDense(t *testing.T) {
	backend := testutil.Backend(t)
	r := rand.New(rand.NewSource(21))
	type handlerCase struct {
		name string
		op   func(w implicitarray.Value) implicitarray.Value
		// stays says whether the result must stay packed, and with which type.
		stays bool
	}
	cases := []handlerCase{
		{"transpose first axis kept", func(w implicitarray.Value) implicitarray.Value { return implicitarray.TransposeAllAxes(w, 0, 2, 1) }, true},
		{"transpose repack", func(w implicitarray.Value) implicitarray.Value { return implicitarray.TransposeAllAxes(w, 2, 0, 1) }, true},
		{"transpose not packable", func(w implicitarray.Value) implicitarray.Value { return implicitarray.TransposeAllAxes(w, 1, 0, 2) }, false},
		{"reshape first kept", func(w implicitarray.Value) implicitarray.Value { return implicitarray.Reshape(w, 16, 16) }, true},
		{"reshape repack", func(w implicitarray.Value) implicitarray.Value { return implicitarray.Reshape(w, 32, 8) }, true},
		{"reshape flat", func(w implicitarray.Value) implicitarray.Value { return implicitarray.Reshape(w, -1) }, true},
		{"broadcast new axis", func(w implicitarray.Value) implicitarray.Value {
			return implicitarray.BroadcastInDim(w, []int{16, 2, 3, 8}, []int{0, 1, 3})
		}, true},
		{"broadcast leading axis", func(w implicitarray.Value) implicitarray.Value {
			return implicitarray.BroadcastInDim(w, []int{8, 16, 2, 8}, []int{1, 2, 3})
		}, true},
		{"convert", func(w implicitarray.Value) implicitarray.Value { return implicitarray.ConvertDType(w, dtypes.Float64) }, true},
		{"add", func(w implicitarray.Value) implicitarray.Value { return implicitarray.Add(w, w) }, false},
		{"mul dense", func(w implicitarray.Value) implicitarray.Value {
			return implicitarray.Mul(w, graph.OnesLike(implicitarray.Materialize(w)))
		}, false},
		{"div", func(w implicitarray.Value) implicitarray.Value {
			return implicitarray.Div(w, graph.Scalar(graph.OnesLike(implicitarray.Materialize(w)).Graph(), dtypes.Float32, 2))
		}, false},
		{"max", func(w implicitarray.Value) implicitarray.Value { return implicitarray.Max(w, w) }, false},
		{"lt", func(w implicitarray.Value) implicitarray.Value {
			return implicitarray.ConvertDType(implicitarray.LessThan(w, graph.ZerosLike(implicitarray.Materialize(w))), dtypes.Float32)
		}, false},
		{"exp", func(w implicitarray.Value) implicitarray.Value { return implicitarray.Exp(w) }, false},
		{"log", func(w implicitarray.Value) implicitarray.Value { return implicitarray.Log(implicitarray.Exp(w)) }, false},
		{"sqrt", func(w implicitarray.Value) implicitarray.Value { return implicitarray.Sqrt(w) }, false},
		{"integer_pow", func(w implicitarray.Value) implicitarray.Value { return implicitarray.IntegerPow(w, 3) }, false},
		{"reduce_sum", func(w implicitarray.Value) implicitarray.Value { return implicitarray.ReduceSum(w, 1) }, false},
		{"reduce_max", func(w implicitarray.Value) implicitarray.Value { return implicitarray.ReduceMax(w) }, false},
		{"concatenate", func(w implicitarray.Value) implicitarray.Value {
			return implicitarray.Concatenate([]implicitarray.Value{w, w}, 1)
		}, false},
		{"gather", func(w implicitarray.Value) implicitarray.Value {
			g := implicitarray.Materialize(w).Graph()
			return implicitarray.Gather(w, graph.Const(g, [][]int32{{3}, {0}}), false)
		}, false},
	}
	type sharded interface {
		Sharding() (sharding.Sharding, bool)
	}
	m := sharding.MustNewMesh([]string{"x", "y"}, []int{2, 2})
	for _, l := range []onebit.Packing{onebit.TwoBit, onebit.OneBit} {
		dims := []int{16, 2, 8}
		v := randomValues(r, l, testutil.Size(dims...))
		ref := tensors.FromFlatDataAndDimensions(testutil.Converted[float32](v), dims...)
		for _, scaled := range []bool{false, true} {
			for _, c := range cases {
				t.Run(fmt.Sprintf("%s/scaled=%v/%s", l, scaled, c.name), func(t *testing.T) {
					var w implicitarray.Array = packed(t, l, v, dims, &onebit.Options{DType: dtypes.Float32})
					refT := ref
					if scaled {
						// A per-tensor scale survives every layout op.
						xs := make([]float32, len(v))
						for i := range v {
							xs[i] = 2 * float32(v[i])
						}
						x := tensors.FromFlatDataAndDimensions(xs, dims...)
						if l == onebit.OneBit {
							w = onebit.MustQuantizeBinaryBits(x, &onebit.Options{Scale: true})
						} else {
							w = onebit.MustQuantizeTernary(x, &onebit.Options{BitNet: true})
						}
						refT = scaledOnHost(t, w)
					}
					switch x := w.(type) {
					case *onebit.Array:
						w, _ = x.WithMeshAndAxis(m, []any{"x", nil, "y"})
					case *onebit.BitArray:
						w, _ = x.WithMeshAndAxis(m, []any{"x", nil, "y"})
					}
					implicitarray.ResetStats()
					e := implicitarray.MustNewExec(backend, func(w implicitarray.Array, ref *graph.Node) (implicitarray.Value, *graph.Node) {
						return c.op(w), implicitarray.Materialize(c.op(ref))
					})
					defer e.Finalize()
					out, err := e.Call(w, refT)
					if err != nil {
						t.Fatal(err)
					}
					// Ops without a handler reach the generic fallback; layout ops never do.
					if st := implicitarray.CurrentStats(); c.stays && len(st.Fallbacks) != 0 {
						t.Errorf("fallbacks %v", st.Fallbacks)
					}
					var got *tensors.Tensor
					if a, ok := out[0].(implicitarray.Array); ok {
						if !c.stays {
							t.Errorf("result stayed packed: %T", a)
						}
						if fmt.Sprintf("%T", a) != fmt.Sprintf("%T", w) {
							t.Errorf("result type %T", a)
						}
						if s, ok := a.(sharded); ok {
							if _, has := s.Sharding(); !has {
								t.Errorf("sharding lost")
							}
						}
						if got, err = implicitarray.MaterializeOnHost(backend, a); err != nil {
							t.Fatal(err)
						}
					} else {
						if c.stays {
							t.Errorf("result is dense, want packed")
						}
						got = out[0].(*tensors.Tensor)
					}
					want := out[1].(*tensors.Tensor)
					if !got.Shape().Equal(want.Shape()) {
						t.Fatalf("shape %s, want %s", got.Shape(), want.Shape())
					}
					if got.DType() == dtypes.Float64 {
						if !slices.Equal(tensors.MustCopyFlatData[float64](got), tensors.MustCopyFlatData[float64](want)) {
							t.Fatal("values differ")
						}
					} else if g, w := tensors.MustCopyFlatData[float32](got), tensors.MustCopyFlatData[float32](want); !equalWithNaN(g, w) {
						t.Fatalf("got %v\nwant %v", g, w)
					}
				})
			}
		}
	}
}

func TestConvertIsLazyAndNew(t *testing.T) {
	backend := testutil.Backend(t)
	a := onebit.MustPack(tensors.FromFlatDataAndDimensions([]int8{1, 0, -1, 1}, 4), nil)
	e := implicitarray.MustNewExec(backend, func(w *onebit.Array) implicitarray.Value {
		return implicitarray.ConvertDType(w, dtypes.Float32)
	})
	defer e.Finalize()
	implicitarray.ResetStats()
	out := e.MustCall1(a).(*onebit.Array)
	if out.DType() != dtypes.Float32 || a.DType() != dtypes.Int8 {
		t.Fatalf("converted %s, original %s", out.DType(), a.DType())
	}
	if mats := implicitarray.CurrentStats().Materializations["*onebit.Array"]; mats != 0 {
		t.Fatalf("%d materializations", mats)
	}
}

// TestValuesAfterDelete: Values, which reads the host bytes, reports the deletion.
func TestValuesAfterDelete(t *testing.T) {
	a := onebit.MustQuantizeBinary(tensors.FromValue([]float32{1, -1, 2, -2}), &onebit.Options{Scale: true})
	a.Delete()
	if _, err := a.Values(); !errors.Is(err, implicitarray.ErrDeleted) {
		t.Fatalf("Values after Delete: %v, want implicitarray.ErrDeleted", err)
	}
}

func TestSharding(t *testing.T) {
	a := onebit.MustPack(tensors.FromFlatDataAndDimensions([]int8{1, 0, 0, 1, -1, 0, 1, 1, 0, 0, 1, -1, -1, 1, 0, 1}, 4, 4), nil)
	if a.IsSharded() {
		t.Fatal("fresh array sharded")
	}
	m := sharding.MustNewMesh([]string{"model"}, []int{4})
	s, err := a.WithMeshAndAxis(m, []any{nil, "model"})
	if err != nil {
		t.Fatal(err)
	}
	if a.IsSharded() || !s.IsSharded() {
		t.Fatal("WithMeshAndAxis must return a new array and leave the original")
	}
	got, _ := s.Sharding()
	if !got.Spec.Equal(sharding.PartitionSpec{nil, {"model"}}) || got.Mesh != m {
		t.Fatalf("sharding %s", got)
	}
	if a.Metadata() == s.Metadata() {
		t.Fatal("metadata must include the sharding")
	}
	if r := s.WithSharding(sharding.Sharding{Spec: sharding.PartitionSpec{{"data"}}}); !strings.Contains(r.Metadata(), "'data'") {
		t.Fatalf("WithSharding metadata %s", r.Metadata())
	}
	if _, err := a.WithMeshAndAxis(m, []any{"nope"}); err == nil {
		t.Fatal("unknown mesh axis accepted")
	}
	if _, err := a.WithMeshAndAxis(m, []any{nil, nil, "model"}); err == nil {
		t.Fatal("spec longer than the rank accepted")
	}
	if _, err := a.WithMeshAndAxis(m, "model"); err == nil || !strings.Contains(err.Error(), "packed rows (first axis 4 / 4) are not divisible by its 4 shards") {
		t.Fatalf("4 rows over 4 shards (1 packed row): %v", err)
	}
}

// TestComponentSpecs checks the component specs over a mesh {model:4, data:2}: packed takes the
// logical spec (mesh.OnebitSpecs, mesh.OnebitBitSpecs), a scale too except on its size-1 axes
// (sharding.ScaleSpec).
func TestComponentSpecs(t *testing.T) {
	m := sharding.MustNewMesh([]string{"model", "data"}, []int{4, 2})
	x := tensors.FromFlatDataAndDimensions(testutil.Converted[float32](randomValues(rand.New(rand.NewSource(3)), onebit.TwoBit, 32*8)), 32, 8)
	type sharder interface {
		ComponentSpecs(*sharding.Mesh, sharding.PartitionSpec) ([]sharding.PartitionSpec, error)
	}
	rows, cols := sharding.PartitionSpec{{"model"}}, sharding.PartitionSpec{nil, {"model"}}
	for _, tc := range []struct {
		name    string
		a       sharder
		spec    sharding.PartitionSpec
		want    []string
		wantErr string
	}{
		{"ternary columns", onebit.MustQuantizeTernary(x, nil), cols, []string{"P(None, 'model')"}, ""},
		{"ternary rows", onebit.MustQuantizeTernary(x, nil), rows, []string{"P('model', None)"}, ""},
		{"scaled per column, columns", onebit.MustQuantizeTernary(x, &onebit.Options{Scale: true, ScaleAxes: []int{0}}), cols, []string{"P(None, 'model')", "P(None, 'model')"}, ""},
		{"scaled per column, rows", onebit.MustQuantizeTernary(x, &onebit.Options{Scale: true, ScaleAxes: []int{0}}), rows, []string{"P('model', None)", "P(None, None)"}, ""},
		{"scaled per tensor, rows", onebit.MustQuantizeTernary(x, &onebit.Options{BitNet: true}), rows, []string{"P('model', None)", "P(None, None)"}, ""},
		{"bits columns", onebit.MustQuantizeBinaryBits(x, nil), cols, []string{"P(None, 'model')"}, ""},
		{"bits rows, scaled per row", onebit.MustQuantizeBinaryBits(x, &onebit.Options{Scale: true, ScaleAxes: []int{1}}), rows, []string{"P('model', None)", "P('model', None)"}, ""},
		// 32 rows: 8 packed 2-bit rows split in 4, but 4 packed 1-bit rows do not split in 8.
		{"bits rows over 8", onebit.MustQuantizeBinaryBits(x, nil), sharding.PartitionSpec{{"model", "data"}}, nil, "the 4 packed rows (first axis 32 / 8) are not divisible by its 8 shards"},
		{"ternary rows over 8", onebit.MustQuantizeTernary(x, nil), sharding.PartitionSpec{{"model", "data"}}, []string{"P(('model', 'data'), None)"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			specs, err := tc.a.ComponentSpecs(m, tc.spec)
			if testutil.WantError(t, err, tc.wantErr) {
				return
			}
			got := make([]string, len(specs))
			for i, s := range specs {
				got[i] = s.String()
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("specs %v, want %v", got, tc.want)
			}
		})
	}
}

// equalWithNaN compares exactly, NaN equal to NaN.
func equalWithNaN(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return x == y || x != x && y != y })
}

// TestShardRows packs rows in the quarter-strided 2-bit layout (packed[p] = c[p] | c[Q+p]<<2 |
// c[2Q+p]<<4 | c[3Q+p]<<6), shards the packed rows as ComponentSpecs says, and checks which
// logical rows each shard decodes to.
func TestShardRows(t *testing.T) {
	const d0, n = 16, 2
	if got, err := onebit.ShardRows(d0, 4, n, 1); err != nil || !slices.Equal(got, []int{2, 3, 6, 7, 10, 11, 14, 15}) {
		t.Fatalf("ShardRows(16, 4, 2, 1) = %v, %v; want [2 3 6 7 10 11 14 15]", got, err)
	}
	if _, err := onebit.ShardRows(d0, 4, 3, 0); err == nil {
		t.Errorf("ShardRows with 4 packed rows over 3 shards: no error")
	}
	m := sharding.MustNewMesh([]string{"x"}, []int{n})
	// Row r holds code r%3 (a ternary value), tagged by nothing else: decode per row index instead.
	code := func(r int) uint8 { return uint8(r % 3) }
	q := d0 / 4
	packed := make([]uint8, q)
	for p := range q {
		packed[p] = code(p) | code(q+p)<<2 | code(2*q+p)<<4 | code(3*q+p)<<6
	}
	values := make([]int8, d0)
	for r := range values {
		values[r] = int8(code(r)) - 1
	}
	specs, err := onebit.MustPack(tensors.FromFlatDataAndDimensions(values, d0), nil).ComponentSpecs(m, sharding.PartitionSpec{{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	spec := specs[0]
	ss, err := sharding.ShardingSpec(m, spec, shapes.Make(dtypes.Uint8, q))
	if err != nil {
		t.Fatal(err)
	}
	dt, err := distributed.ShardTensor(ss, tensors.FromValue(packed))
	if err != nil {
		t.Fatal(err)
	}
	for s, shard := range dt.Shards() {
		bytes := shard.Value().([]uint8)
		rows, _ := onebit.ShardRows(d0, 4, n, s)
		per := q / n
		for g := range 4 {
			for j, b := range bytes {
				if got, want := (b>>(2*g))&3, code(rows[g*per+j]); got != want {
					t.Errorf("shard %d, byte %d, quarter %d: code %d, want row %d's code %d", s, j, g, got, rows[g*per+j], want)
				}
			}
		}
	}
}

// TestIdentityReshape: a reshape to the array's own dimensions returns the array as it is, even
// with a per-channel scale, which no other reshape can follow without materializing.
func TestIdentityReshape(t *testing.T) {
	w := onebit.MustQuantizeTernary(testutil.RandomTensor(1, 8, 5), &onebit.Options{Scale: true, ScaleAxes: []int{0}})
	out, st := testutil.ApplyOp(t, w, func(w implicitarray.Value) implicitarray.Value { return implicitarray.Reshape(w, -1, 5) })
	got, ok := out.(*onebit.Array)
	if !ok {
		t.Fatalf("got %T, want an *onebit.Array", out)
	}
	if len(st.Materializations) != 0 {
		t.Errorf("stats %+v: want no materialization", st)
	}
	testutil.SameBits(t, "values", testutil.Float32s(t, testutil.Materialize(t, got)), testutil.Float32s(t, testutil.Materialize(t, w)))
}

// TestConvertFloatToUnsigned: converting an array that materializes in float32 to an unsigned
// dtype gives what converting its dense float values gives on the backend (the lazy array wrapped
// -1 around to 255), and an array that materializes in int8 still converts lazily, with the
// integer wrap-around of the dense int8 values.
func TestConvertFloatToUnsigned(t *testing.T) {
	backend := testutil.Backend(t)
	values := [][]float32{{-1, 0}, {1, -1}, {0, 1}, {1, 1}}
	for _, dtype := range []dtypes.DType{dtypes.Float32, dtypes.Int8} {
		t.Run(dtype.String(), func(t *testing.T) {
			w := onebit.MustPack(tensors.FromValue(values), nil).WithDType(dtype)
			e := implicitarray.MustNewExec(backend, func(w *onebit.Array) implicitarray.Value {
				return implicitarray.ConvertDType(w, dtypes.Uint8)
			})
			defer e.Finalize()
			out := e.MustCall1(w)
			if _, lazy := out.(*onebit.Array); lazy != (dtype == dtypes.Int8) {
				t.Errorf("result %T", out)
			}
			got := out
			if a, ok := out.(*onebit.Array); ok {
				got = testutil.Materialize(t, a)
			}
			want := graph.MustExecOnce(backend, func(x *graph.Node) *graph.Node {
				return graph.ConvertDType(graph.ConvertDType(x, dtype), dtypes.Uint8)
			}, values)
			if !slices.Equal(testutil.Float64s(t, got.(*tensors.Tensor)), testutil.Float64s(t, want)) {
				t.Errorf("got %v, want %v (the dense conversion)", testutil.Float64s(t, got.(*tensors.Tensor)), testutil.Float64s(t, want))
			}
		})
	}
}

// TestTransposeShardingFitsPacking transposes arrays sharded over 4 devices: the sharding follows
// the axes unless the axis brought to the front is sharded in more pieces than the new packed rows
// allow, where that axis is replicated, so that the result can be placed (its ComponentSpecs
// accepts its own sharding).
func TestTransposeShardingFitsPacking(t *testing.T) {
	m := sharding.MustNewMesh([]string{"model"}, []int{4})
	columns := sharding.PartitionSpec{nil, {"model"}}
	e := implicitarray.MustNewExec(testutil.Backend(t), func(w implicitarray.Value) implicitarray.Value {
		return implicitarray.Transpose(w, 1, 0)
	})
	defer e.Finalize()
	for _, tc := range []struct {
		name string
		a    interface {
			implicitarray.Array
			sharding.Sharded
		}
		want sharding.PartitionSpec
	}{
		// 32 columns become 32 rows: 8 packed 2-bit rows, 2 a device.
		{"ternary 16x32", onebit.MustQuantizeTernary(testutil.RandomTensor(1, 16, 32), nil).WithSharding(sharding.Sharding{Mesh: m, Spec: columns}),
			sharding.PartitionSpec{{"model"}, nil}},
		// 8 columns become 8 rows: 2 packed 2-bit rows, fewer than the 4 shards.
		{"ternary 16x8", onebit.MustQuantizeTernary(testutil.RandomTensor(1, 16, 8), nil).WithSharding(sharding.Sharding{Mesh: m, Spec: columns}),
			sharding.PartitionSpec{nil, nil}},
		// 16 columns become 16 rows: 2 packed 1-bit rows, fewer than the 4 shards.
		{"bits 8x16", onebit.MustQuantizeBinaryBits(testutil.RandomTensor(1, 8, 16), nil).WithSharding(sharding.Sharding{Mesh: m, Spec: columns}),
			sharding.PartitionSpec{nil, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, ok := e.MustCall1(tc.a).(interface {
				implicitarray.Array
				sharding.Sharded
				ComponentSpecs(*sharding.Mesh, sharding.PartitionSpec) ([]sharding.PartitionSpec, error)
			})
			if !ok {
				t.Fatalf("transpose returned %T, want a packed array", e.MustCall1(tc.a))
			}
			s, isSharded := out.Sharding()
			if !isSharded || s.Mesh != m || !s.Spec.Equal(tc.want) {
				t.Fatalf("transposed sharding %s (%v), want %s over %s", s, isSharded, tc.want, m)
			}
			if _, err := out.ComponentSpecs(m, s.Spec); err != nil {
				t.Errorf("the transposed array refuses its own sharding: %v", err)
			}
		})
	}
}

// TestTransposeSpecAloneFitsPacking: a sharding given as a spec alone (no mesh) does not say into
// how many pieces an axis is cut, so an axis a transpose brings to the front is replicated: kept,
// it made a (16, 8) ternary array sharded P(None, 'model') transposed unplaceable over 4 devices
// (2 packed rows). An axis that stays first keeps its entry.
func TestTransposeSpecAloneFitsPacking(t *testing.T) {
	m := sharding.MustNewMesh([]string{"model"}, []int{4})
	specAlone := func(spec sharding.PartitionSpec) sharding.Sharding { return sharding.Sharding{Spec: spec} }
	for _, tc := range []struct {
		name string
		a    *onebit.Array
		perm []int
		want sharding.PartitionSpec
	}{
		{"ternary 16x8", onebit.MustQuantizeTernary(testutil.RandomTensor(1, 16, 8), nil).WithSharding(specAlone(sharding.PartitionSpec{nil, {"model"}})),
			[]int{1, 0}, sharding.PartitionSpec{nil, nil}},
		{"ternary 16x4x8, first axis kept", onebit.MustQuantizeTernary(testutil.RandomTensor(1, 16, 4, 8), nil).
			WithSharding(specAlone(sharding.PartitionSpec{{"model"}, nil, {"data"}})), []int{0, 2, 1}, sharding.PartitionSpec{{"model"}, {"data"}, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := implicitarray.MustNewExec(testutil.Backend(t), func(w implicitarray.Value) implicitarray.Value {
				return implicitarray.TransposeAllAxes(w, tc.perm...)
			})
			defer e.Finalize()
			out, ok := e.MustCall1(tc.a).(*onebit.Array)
			if !ok {
				t.Fatalf("transpose returned %T, want an *onebit.Array", e.MustCall1(tc.a))
			}
			s, isSharded := out.Sharding()
			if !isSharded || s.Mesh != nil || !s.Spec.Equal(tc.want) {
				t.Fatalf("transposed sharding %s (%v), want %s alone", s, isSharded, tc.want)
			}
			if tc.perm[0] != 0 {
				if _, err := out.ComponentSpecs(m, s.Spec); err != nil {
					t.Errorf("the transposed array does not fit %s: %v", m, err)
				}
			}
		})
	}
}
