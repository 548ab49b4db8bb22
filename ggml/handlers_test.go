package ggml_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/ggml"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/sharding"
)

// TestHandlersKeepBlocks: reshape, transpose, broadcast and concatenate that move whole rows of
// blocks keep the array in its type without decoding, equal bit for bit to the dense op on the
// materialized value; ops that cut through blocks give that dense op through the generic
// fallback, counted (and logged) as a fallback.
func TestHandlersKeepBlocks(t *testing.T) {
	backend := testutil.Backend(t)
	shard := sharding.Sharding{Spec: sharding.PartitionSpec{{"model"}}}
	w := ggml.MustQuantize(testutil.RandomTensor(3, 3, 4, 64), gguf.TypeQ4_1).WithSharding(shard)
	other := ggml.MustQuantize(testutil.RandomTensor(4, 2, 4, 64), gguf.TypeQ4_1)
	dense := map[*ggml.Array]*tensors.Tensor{w: testutil.Materialize(t, w), other: testutil.Materialize(t, other)}
	type handlerCase struct {
		name string
		kept bool // the result is still a ggml.Array
		op   func(implicitarray.Value) implicitarray.Value
		// with: the op concatenates the operand with this array along axis.
		with *ggml.Array
		axis int
	}
	var cases []handlerCase
	for _, r := range testutil.RowOps(64) {
		cases = append(cases, handlerCase{name: r.Name, kept: true, op: r.Op})
	}
	for _, tc := range append(cases, []handlerCase{
		{name: "concatenate", kept: true, with: other, axis: 0},
		{name: "reshape-last-axis", op: func(v implicitarray.Value) implicitarray.Value { return implicitarray.Reshape(v, 3, 8, 32) }},
		{name: "broadcast-last-axis", op: func(v implicitarray.Value) implicitarray.Value {
			return implicitarray.BroadcastInDim(v, []int{3, 4, 64, 2}, []int{0, 1, 2})
		}},
		{name: "concatenate-last-axis", with: w, axis: 2},
	}...) {
		if tc.with != nil {
			with, withDense, axis := tc.with, dense[tc.with], tc.axis
			tc.op = func(v implicitarray.Value) implicitarray.Value {
				if a, ok := v.(*ggml.Array); ok {
					return implicitarray.Concatenate([]implicitarray.Value{a, implicitarray.OnGraph(a.Blocks().Node().Graph(), with)}, axis)
				}
				return graph.Concatenate([]*graph.Node{v.(*graph.Node), graph.Const(v.(*graph.Node).Graph(), withDense)}, axis)
			}
		}
		t.Run(tc.name, func(t *testing.T) {
			out, st := testutil.ApplyOp(t, w, tc.op)
			var got *tensors.Tensor
			if a, ok := out.(*ggml.Array); ok {
				if !tc.kept {
					t.Fatalf("result is a ggml.Array: want the dense op")
				}
				if st.Materializations["*ggml.Array"] != 0 || len(st.Fallbacks) != 0 {
					t.Errorf("stats %+v: want no fallback and no materialization", st)
				}
				if a.Type() != gguf.TypeQ4_1 {
					t.Errorf("type %s, want Q4_1", a.Type())
				}
				got = testutil.Materialize(t, a)
			} else {
				if tc.kept {
					t.Fatalf("result %T: want a ggml.Array", out)
				}
				if st.Materializations["*ggml.Array"] == 0 || len(st.Fallbacks) != 1 {
					t.Errorf("stats %+v: want the materialization counted as a fallback", st)
				}
				got = out.(*tensors.Tensor)
			}
			want := graph.MustExecOnce(backend, func(x *graph.Node) *graph.Node { return tc.op(x).(*graph.Node) }, dense[w])
			if !got.Shape().Equal(want.Shape()) {
				t.Fatalf("shape %s, want %s", got.Shape(), want.Shape())
			}
			testutil.SameBits(t, "values", testutil.Float32s(t, got), testutil.Float32s(t, want))
		})
	}
}

// TestGatherRows: gathering rows (the indices index leading axes) keeps the array in its blocks
// without decoding the others, and its values are the rows of the materialized array, bit for
// bit; indexing the last axis materializes.
func TestGatherRows(t *testing.T) {
	backend := testutil.Backend(t)
	w := ggml.MustQuantize(testutil.RandomTensor(7, 6, 2, 64), gguf.TypeQ5_0)
	for _, tc := range []struct {
		name    string
		indices any
		kept    bool
		want    []int
	}{
		{"rows", [][]int32{{5}, {0}, {5}}, true, []int{3, 2, 64}},
		{"rows-2d", [][][]int32{{{1}, {2}}, {{4}, {0}}}, true, []int{2, 2, 2, 64}},
		{"leading-two-axes", [][]int32{{5, 1}, {0, 1}}, true, []int{2, 64}},
		{"last-axis", [][]int32{{1, 1, 63}}, false, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			implicitarray.ResetStats()
			e := implicitarray.MustNewExec(backend, func(w *ggml.Array, idx *graph.Node) (*graph.Node, *graph.Node) {
				out := implicitarray.Gather(w, idx, false)
				if _, ok := out.(*ggml.Array); ok != tc.kept {
					t.Fatalf("gather result %T; kept in blocks: %v, want %v", out, ok, tc.kept)
				}
				return implicitarray.Materialize(out), graph.Gather(implicitarray.Materialize(w), idx)
			})
			defer e.Finalize()
			outs := e.MustCall(w, tensors.FromAnyValue(tc.indices))
			got, ref := outs[0].(*tensors.Tensor), outs[1].(*tensors.Tensor)
			fellBack := implicitarray.CurrentStats().Fallbacks[implicitarray.Key{Op: implicitarray.OpGather, Type: "*ggml.Array"}] > 0
			if fellBack == tc.kept {
				t.Errorf("gather fell back to the dense op: %v, want %v", fellBack, !tc.kept)
			}
			if !slices.Equal(got.Shape().Dimensions, tc.want) {
				t.Errorf("shape %v, want %v", got.Shape().Dimensions, tc.want)
			}
			testutil.SameBits(t, "gathered rows", testutil.Float32s(t, got), testutil.Float32s(t, ref))
		})
	}
}

// TestEmptyArray: an array without blocks (no rows, as a gather of no rows leaves it, or no
// blocks per row) materializes to an empty array of its dimensions.
func TestEmptyArray(t *testing.T) {
	for _, typ := range []gguf.Type{gguf.TypeQ4_0, gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeQ6_K} {
		for _, dims := range [][]int{{0, 2}, {3, 0}, {2, 0, 1}} {
			t.Run(fmt.Sprintf("%s/%v", typ, dims), func(t *testing.T) {
				blocks := tensors.FromShape(shapes.Make(dtypes.Uint8, append(slices.Clone(dims), typ.BlockBytes())...))
				a, err := ggml.New(implicitarray.TensorComponent(blocks), typ, dtypes.Float32)
				if err != nil {
					t.Fatal(err)
				}
				got := testutil.Materialize(t, a)
				if want := a.Shape(); !got.Shape().Equal(want) {
					t.Errorf("materialized %s, want %s", got.Shape(), want)
				}
			})
		}
	}
}

// TestConvertDTypeIsLazy: convert_element_type returns a new array materializing in the new
// dtype, leaving the operand unchanged, without decoding.
func TestConvertDTypeIsLazy(t *testing.T) {
	conv := testutil.LazyConvertDType(t, ggml.MustQuantize(testutil.RandomTensor(6, 8, 256), gguf.TypeQ6_K))
	if conv.Type() != gguf.TypeQ6_K {
		t.Errorf("converted array of type %s, want Q6_K", conv.Type())
	}
}

// TestComponentSpecs: leading axes keep their spec; a sharded last axis shards whole blocks.
func TestComponentSpecs(t *testing.T) {
	m, err := sharding.NewMesh([]string{"x"}, []int{2})
	if err != nil {
		t.Fatal(err)
	}
	w := ggml.MustQuantize(testutil.RandomTensor(1, 4, 512), gguf.TypeQ4_K)
	for _, tc := range []struct {
		spec    sharding.PartitionSpec
		want    sharding.PartitionSpec
		wantErr string
	}{
		{spec: sharding.PartitionSpec{{"x"}}, want: sharding.PartitionSpec{{"x"}, nil, nil}},
		{spec: sharding.PartitionSpec{nil, {"x"}}, want: sharding.PartitionSpec{nil, {"x"}, nil}},
	} {
		specs, err := w.ComponentSpecs(m, tc.spec)
		if err != nil || len(specs) != 1 || !specs[0].Equal(tc.want) {
			t.Errorf("ComponentSpecs(%v) = %v, %v; want [%v]", tc.spec, specs, err, tc.want)
		}
	}
	// 512 in 2 shards of 256 is whole Q4_K blocks; 64 in 2 shards of 32 is not.
	small := ggml.MustQuantize(testutil.RandomTensor(1, 4, 64), gguf.TypeQ4_0)
	if _, err := small.ComponentSpecs(m, sharding.PartitionSpec{nil, {"x"}}); err != nil {
		t.Errorf("Q4_0 64 in 2 shards: %v", err)
	}
	big := ggml.MustQuantize(testutil.RandomTensor(1, 4, 256), gguf.TypeQ4_K)
	if _, err := big.ComponentSpecs(m, sharding.PartitionSpec{nil, {"x"}}); !testutil.WantError(t, err, "not a multiple of the Q4_K block size 256") {
		t.Errorf("Q4_K 256 in 2 shards: %v", err)
	}
}

// TestShardedTransposeIsLazy: a transpose that moves the last axis of an array carrying a
// sharding (a spec alone, replicated over a mesh, sharded over a mesh) is lazy as for an unsharded
// one: no fallback, the inner array keeps its sharding, and the values are the dense transpose of
// the unsharded array's, bit for bit (it was materialized through the fallback).
func TestShardedTransposeIsLazy(t *testing.T) {
	plain := ggml.MustQuantize(testutil.RandomTensor(3, 3, 4, 64), gguf.TypeQ4_1)
	m := sharding.MustNewMesh([]string{"model"}, []int{2})
	op := func(v implicitarray.Value) implicitarray.Value { return implicitarray.Transpose(v, 1, 2) }
	want := testutil.DenseOp(t, plain, op)
	for _, tc := range []struct {
		name string
		s    sharding.Sharding
	}{
		{"spec alone", sharding.Sharding{Spec: sharding.PartitionSpec{{"model"}}}},
		{"replicated", sharding.Sharding{Mesh: m, Spec: sharding.PartitionSpec{}}},
		{"sharded", sharding.Sharding{Mesh: m, Spec: sharding.PartitionSpec{nil, {"model"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) { testutil.ShardedTransposeIsLazy(t, plain.WithSharding(tc.s), tc.s, op, want) })
	}
}

// TestTransposeIsLazy: the transpose of a weight stored as GGUF stores it, (out, in), moves its
// block axis, which the blocks cannot follow: it is lazy for every type (the file's values kept),
// and x·wᵀ contracts the blocks where they are.
func TestTransposeIsLazy(t *testing.T) {
	for _, typ := range []gguf.Type{gguf.TypeQ4_0, gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeQ6_K} {
		t.Run(typ.String(), func(t *testing.T) {
			testutil.TransposedProduct(t, ggml.MustQuantize(testutil.RandomTensor(4, 40, 512), typ), 3)
		})
	}
}
