package nf4_test

import (
	"math"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/sharding"
)

// TestLayoutHandlersExact: reshape, transpose, broadcast and concatenate that leave the block
// (last) axis alone keep the array NF4 without re-quantizing, bitwise equal to the dense op on
// the materialized value.
func TestLayoutHandlersExact(t *testing.T) {
	backend := testutil.Backend(t)
	shard := sharding.Sharding{Spec: sharding.PartitionSpec{{"model"}}}
	w := nf4.MustQuantize(testutil.RandomTensor(3, 3, 4, 40), 16).WithSharding(shard)
	other := nf4.MustQuantize(testutil.RandomTensor(4, 2, 4, 40), 16)
	concatenate := testutil.RowOp{Name: "concatenate", Op: func(v implicitarray.Value) implicitarray.Value {
		o := implicitarray.OnGraph(v.(*nf4.Array).Packed().Node().Graph(), other)
		return implicitarray.Concatenate([]implicitarray.Value{v, o}, 0)
	}}
	for _, tc := range append(testutil.RowOps(40), concatenate) {
		t.Run(tc.Name, func(t *testing.T) {
			result, st := testutil.ApplyOp(t, w, tc.Op)
			out, ok := result.(*nf4.Array)
			if !ok {
				t.Fatalf("result is not an *nf4.Array")
			}
			if len(st.Fallbacks) != 0 || st.Materializations["*nf4.Array"] != 0 {
				t.Errorf("stats %+v: want no fallback and no materialization", st)
			}
			// The sharding follows the axes: a transpose or a broadcast moves its entries; a reshape
			// that changes the (sharded) first axis, or a concatenation along it, replicates it.
			wantSpec := map[string]sharding.PartitionSpec{"transpose": {nil, {"model"}}, "broadcast": {nil, {"model"}},
				"reshape": {}, "reshape-split": {}, "concatenate": {}}[tc.Name]
			if wantSpec == nil {
				wantSpec = shard.Spec
			}
			if s, ok := out.Sharding(); !ok || !s.Spec.Equal(wantSpec) || out.BlockSize() != 16 {
				t.Errorf("sharding %v (%v), block %d: want %v, block 16", s, ok, out.BlockSize(), wantSpec)
			}
			var wantDense *tensors.Tensor
			if tc.Name == "concatenate" {
				wantDense = graph.MustExecOnce(backend, func(x, y *graph.Node) *graph.Node {
					return graph.Concatenate([]*graph.Node{x, y}, 0)
				}, testutil.Materialize(t, w), testutil.Materialize(t, other))
			} else {
				wantDense = testutil.DenseOp(t, w, tc.Op)
			}
			got := testutil.Materialize(t, out)
			if !got.Shape().Equal(wantDense.Shape()) {
				t.Fatalf("shape %s, want %s", got.Shape(), wantDense.Shape())
			}
			if g, want := testutil.Float32s(t, got), testutil.Float32s(t, wantDense); !slices.Equal(g, want) {
				t.Errorf("values differ from the dense op on the materialized value")
			}
		})
	}
}

// TestRequantizingHandlers: reshapes and broadcasts that move the block axis materialize, apply
// the op and re-quantize (a second rounding, within the round-trip bound, counted in
// Stats.Requantizations), keeping block size and sharding.
func TestRequantizingHandlers(t *testing.T) {
	shard := sharding.Sharding{Spec: sharding.PartitionSpec{nil, {"data"}}}
	w := nf4.MustQuantize(testutil.RandomTensor(5, 48, 80), 32).WithSharding(shard)
	for _, tc := range []struct {
		name string
		op   func(implicitarray.Value) implicitarray.Value
		key  implicitarray.Op
	}{
		{"reshape", func(v implicitarray.Value) implicitarray.Value { return implicitarray.Reshape(v, 96, 40) }, implicitarray.OpReshape},
		{"broadcast", func(v implicitarray.Value) implicitarray.Value {
			return implicitarray.BroadcastInDim(v, []int{48, 80, 3}, []int{0, 1})
		}, implicitarray.OpBroadcastInDim},
	} {
		t.Run(tc.name, func(t *testing.T) {
			result, st := testutil.ApplyOp(t, w, tc.op)
			out, ok := result.(*nf4.Array)
			if !ok {
				t.Fatalf("result is not an *nf4.Array")
			}
			if st.Requantizations[implicitarray.Key{Op: tc.key, Type: "*nf4.Array"}] != 1 {
				t.Errorf("stats %+v: want one re-quantization by %s", st, tc.key)
			}
			wantSpec := shard.Spec // a reshape of the first axis drops it
			if tc.name == "reshape" {
				wantSpec = sharding.PartitionSpec{}
			}
			if s, ok := out.Sharding(); !ok || !s.Spec.Equal(wantSpec) || out.BlockSize() != 32 {
				t.Errorf("sharding %v (%v), block %d: want %v, block 32", s, ok, out.BlockSize(), wantSpec)
			}
			want := testutil.Float64s(t, testutil.DenseOp(t, w, tc.op))
			got := testutil.Float64s(t, testutil.Materialize(t, out))
			if diff, scale := testutil.MaxAbsDiff(got, want); diff > nf4.MaxCodeGap()/2*scale {
				t.Errorf("re-quantized values off by %g > bound %g", diff, nf4.MaxCodeGap()/2*scale)
			}
		})
	}
}

// TestShardedTransposeIsLazy: a transpose that moves the block axis of a sharded array is lazy as
// for an unsharded one (an implicitarray.Transposed whose inner array keeps its sharding), with
// the dense transpose's values bit for bit: no second rounding, so that sharding a weight never
// changes what x·Wᵀ computes. A double-quantized array takes only a replicated spec, which it
// then carries.
func TestShardedTransposeIsLazy(t *testing.T) {
	plain := nf4.MustQuantize(testutil.RandomTensor(5, 48, 80), 32)
	m := sharding.MustNewMesh([]string{"data"}, []int{2})
	replicated, err := nf4.MustDoubleQuantize(plain).WithMeshAndAxis(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	op := func(v implicitarray.Value) implicitarray.Value { return implicitarray.Transpose(v, 1, 0) }
	split := sharding.Sharding{Spec: sharding.PartitionSpec{nil, {"data"}}}
	for _, tc := range []struct {
		name string
		w    *nf4.Array
		s    sharding.Sharding // the sharding w was given
	}{
		{"nf4", plain.WithSharding(split), split},
		{"nf4-dq, replicated", replicated, sharding.Sharding{Mesh: m, Spec: sharding.PartitionSpec{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testutil.ShardedTransposeIsLazy(t, tc.w, tc.s, op, testutil.DenseOp(t, tc.w, op))
		})
	}
}

// TestConvertDTypeIsLazy: convert_element_type returns a new NF4 array materializing in the new
// dtype, and leaves the operand unchanged (eformer mutates it in place).
func TestConvertDTypeIsLazy(t *testing.T) {
	testutil.LazyConvertDType(t, nf4.MustQuantize(testutil.RandomTensor(6, 8, 64), 64))
}

// TestFallbackOps: element-wise ops, gathers of single elements and reductions have no NF4 handler: the generic
// fallback gives the dense op on the materialized value, as dense nodes, counted.
func TestFallbackOps(t *testing.T) {
	backend := testutil.Backend(t)
	w := nf4.MustQuantize(testutil.RandomTensor(8, 4, 32), 16)
	y := testutil.RandomTensor(9, 4, 32)
	ops := []struct {
		name string
		op   func(w, y implicitarray.Value) implicitarray.Value
	}{
		{"add", func(w, y implicitarray.Value) implicitarray.Value { return implicitarray.Add(w, y) }},
		{"add-rev", func(w, y implicitarray.Value) implicitarray.Value { return implicitarray.Add(y, w) }},
		{"add-nf4-nf4", func(w, y implicitarray.Value) implicitarray.Value { return implicitarray.Add(w, w) }},
		{"mul", func(w, y implicitarray.Value) implicitarray.Value { return implicitarray.Mul(w, y) }},
		{"max", func(w, y implicitarray.Value) implicitarray.Value { return implicitarray.Max(y, w) }},
		{"div", func(w, y implicitarray.Value) implicitarray.Value { return implicitarray.Div(y, w) }},
		{"lt", func(w, y implicitarray.Value) implicitarray.Value {
			return graph.ConvertDType(implicitarray.LessThan(w, y).(*graph.Node), dtypes.Float32)
		}},
		{"exp", func(w, y implicitarray.Value) implicitarray.Value { return implicitarray.Exp(w) }},
		{"log", func(w, y implicitarray.Value) implicitarray.Value { return implicitarray.Log(w) }},
		{"sqrt", func(w, y implicitarray.Value) implicitarray.Value { return implicitarray.Sqrt(w) }},
		{"integer_pow", func(w, y implicitarray.Value) implicitarray.Value { return implicitarray.IntegerPow(w, 3) }},
		{"reduce_sum", func(w, y implicitarray.Value) implicitarray.Value { return implicitarray.ReduceSum(w, 1) }},
		{"reduce_max", func(w, y implicitarray.Value) implicitarray.Value { return implicitarray.ReduceMax(w) }},
		{"gather-elements", func(w, y implicitarray.Value) implicitarray.Value {
			idx := graph.Const(y.(*graph.Node).Graph(), [][]int32{{2, 31}, {0, 5}})
			return implicitarray.Gather(w, idx, false)
		}},
		{"concatenate-last-axis", func(w, y implicitarray.Value) implicitarray.Value {
			return implicitarray.Concatenate([]implicitarray.Value{w, y}, 1)
		}},
	}
	wDense := testutil.Materialize(t, w)
	for _, tc := range ops {
		t.Run(tc.name, func(t *testing.T) {
			implicitarray.ResetStats()
			e := implicitarray.MustNewExec(backend, func(w *nf4.Array, y *graph.Node) *graph.Node {
				out, ok := tc.op(w, y).(*graph.Node)
				if !ok {
					t.Errorf("result is not dense")
				}
				return out
			})
			defer e.Finalize()
			got := testutil.Float32s(t, e.MustCall1(w, y).(*tensors.Tensor))
			if st := implicitarray.CurrentStats(); tc.name != "concatenate-last-axis" && len(st.Fallbacks) == 0 {
				t.Errorf("no fallback counted: ops without a handler reach the generic fallback")
			}
			want := testutil.Float32s(t, graph.MustExecOnce(backend, func(w, y *graph.Node) *graph.Node {
				return tc.op(w, y).(*graph.Node)
			}, wDense, y))
			for i := range want {
				// XLA may fuse the decode's multiply with the op (an FMA): allow a few ulps.
				close := math.Abs(float64(got[i])-float64(want[i])) <= 1e-6*math.Max(1, math.Abs(float64(want[i])))
				if !close && got[i] != want[i] && !(math.IsNaN(float64(got[i])) && math.IsNaN(float64(want[i]))) {
					t.Fatalf("element %d: %v, want %v", i, got[i], want[i])
				}
			}
		})
	}
}

// TestGatherRows: gathering rows (the indices index leading axes) keeps the array NF4 without
// materializing, and its values are the rows of the materialized array, bit for bit.
func TestGatherRows(t *testing.T) {
	backend := testutil.Backend(t)
	w := nf4.MustQuantize(testutil.RandomTensor(12, 6, 3, 40), 16) // last axis padded: 40 = 2.5 blocks
	for _, tc := range []struct {
		name    string
		indices any
		want    []int
	}{
		{"rows", [][]int32{{5}, {0}, {5}}, []int{3, 3, 40}},
		{"rows-2d", [][][]int32{{{1}, {2}}, {{4}, {0}}}, []int{2, 2, 3, 40}},
		{"leading-two-axes", [][]int32{{5, 2}, {0, 1}}, []int{2, 40}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			implicitarray.ResetStats()
			e := implicitarray.MustNewExec(backend, func(w *nf4.Array, idx *graph.Node) (*nf4.Array, *graph.Node) {
				out, ok := implicitarray.Gather(w, idx, false).(*nf4.Array)
				if !ok {
					t.Fatalf("gather of rows is not an *nf4.Array")
				}
				return out, graph.Gather(implicitarray.Materialize(w), idx)
			})
			defer e.Finalize()
			outs := e.MustCall(w, tensors.FromAnyValue(tc.indices))
			got, ref := outs[0].(*nf4.Array), outs[1].(*tensors.Tensor)
			if n := implicitarray.CurrentStats().Materializations["*nf4.Array"]; n != 1 {
				t.Errorf("%d materializations; want 1 (the reference's)", n)
			}
			if !slices.Equal(got.Shape().Dimensions, tc.want) {
				t.Errorf("shape %v, want %v", got.Shape().Dimensions, tc.want)
			}
			if g, r := testutil.Float32s(t, testutil.Materialize(t, got)), testutil.Float32s(t, ref); !slices.Equal(g, r) {
				t.Errorf("gathered rows differ from the rows of the materialized array")
			}
		})
	}
}

// TestTransposeIsLazy: the transpose of a weight stored (out, in) moves its block axis, which the
// blocks cannot follow: it is lazy in every NF4 format (no second rounding), and x·wᵀ contracts
// the blocks where they are.
func TestTransposeIsLazy(t *testing.T) {
	w := nf4.MustQuantize(testutil.RandomTensor(3, 48, 128), 64)
	flat, err := nf4.FromTensors(w.Shape(), nf4.Format{BlockSize: 64, FlatBlocks: true},
		tensors.FromFlatDataAndDimensions(tensors.MustCopyFlatData[uint8](w.Packed().Tensor()), 48*2, 32),
		tensors.FromFlatDataAndDimensions(tensors.MustCopyFlatData[float32](w.Absmax().Tensor()), 48*2))
	if err != nil {
		t.Fatal(err)
	}
	for name, a := range map[string]*nf4.Array{"blocks-along-last-axis": w, "flat-blocks": flat, "double-quantized": nf4.MustDoubleQuantize(w)} {
		t.Run(name, func(t *testing.T) { testutil.TransposedProduct(t, a, 3) })
	}
}

// TestLazyTransposeComposes: a transpose of a lazy transpose whose composed permutation leaves the
// block axis last is the NF4 array's own exact transpose (still NF4, no re-quantization), and its
// values are the dense ops' bit for bit.
func TestLazyTransposeComposes(t *testing.T) {
	w := nf4.MustQuantize(testutil.RandomTensor(5, 2, 3, 64), 32)
	op := func(v implicitarray.Value) implicitarray.Value {
		return implicitarray.TransposeAllAxes(implicitarray.TransposeAllAxes(v, 2, 1, 0), 1, 2, 0)
	}
	result, st := testutil.ApplyOp(t, w, op)
	out, ok := result.(*nf4.Array)
	if !ok {
		t.Fatalf("result is not an *nf4.Array")
	}
	if len(st.Requantizations) != 0 || len(st.Fallbacks) != 0 {
		t.Errorf("stats %+v: want no re-quantization and no fallback", st)
	}
	want := testutil.DenseOp(t, w, op)
	if !slices.Equal(out.Shape().Dimensions, want.Shape().Dimensions) {
		t.Fatalf("shape %v, want %v", out.Shape().Dimensions, want.Shape().Dimensions)
	}
	testutil.SameBits(t, "values", testutil.Float32s(t, testutil.Materialize(t, out)), testutil.Float32s(t, want))
}

// TestReshapeToScalar: a one-element array reshaped to a scalar, which has no axis for the
// blocks, is the dense scalar (a scalar cannot be re-quantized), for plain and double-quantized
// arrays.
func TestReshapeToScalar(t *testing.T) {
	plain := nf4.MustQuantize(tensors.FromValue([][]float32{{-2.5}}), 2)
	for name, a := range map[string]*nf4.Array{"nf4": plain, "nf4-dq": nf4.MustDoubleQuantize(plain)} {
		t.Run(name, func(t *testing.T) {
			want := testutil.Float64s(t, testutil.Materialize(t, a))[0]
			e := implicitarray.MustNewExec(testutil.Backend(t), func(a *nf4.Array) implicitarray.Value { return implicitarray.Reshape(a) })
			defer e.Finalize()
			got, err := e.Call1(a)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			if out, ok := got.(*tensors.Tensor); !ok || out.Shape().Rank() != 0 || float64(out.Value().(float32)) != want {
				t.Errorf("got %v, want the dense scalar %v", got, want)
			}
		})
	}
}

// TestConcatenateShardingOperandOrder: a concatenation of a sharded array with one that has no
// sharding carries the sharded operand's spec (the concatenation axis replicated) whichever comes
// first, and sharded operands that disagree on an axis leave it replicated.
func TestConcatenateShardingOperandOrder(t *testing.T) {
	backend := testutil.Backend(t)
	m := sharding.MustNewMesh([]string{"data", "model"}, []int{2, 2})
	plain := nf4.MustQuantize(testutil.RandomTensor(6, 4, 64), 16)
	sharded := nf4.MustQuantize(testutil.RandomTensor(7, 4, 64), 16).WithSharding(sharding.Sharding{Mesh: m, Spec: sharding.PartitionSpec{{"data"}, {"model"}}})
	byData := plain.WithSharding(sharding.Sharding{Mesh: m, Spec: sharding.PartitionSpec{nil, {"data"}}})
	e := implicitarray.MustNewExec(backend, func(a, b *nf4.Array) implicitarray.Value {
		return implicitarray.Concatenate([]implicitarray.Value{a, b}, 0)
	})
	defer e.Finalize()
	for _, tc := range []struct {
		name string
		a, b *nf4.Array
		want sharding.PartitionSpec
	}{
		{"sharded first", sharded, plain, sharding.PartitionSpec{nil, {"model"}}},
		{"sharded second", plain, sharded, sharding.PartitionSpec{nil, {"model"}}},
		{"specs differ", sharded, byData, sharding.PartitionSpec{}},
		{"specs differ, swapped", byData, sharded, sharding.PartitionSpec{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, ok := e.MustCall1(tc.a, tc.b).(*nf4.Array)
			if !ok {
				t.Fatalf("result is not an *nf4.Array")
			}
			if s, ok := out.Sharding(); !ok || s.Mesh != m || !s.Spec.Equal(tc.want) {
				t.Errorf("sharding %v (%v), want %v over %s", s, ok, tc.want, m)
			}
		})
	}
}
