package mesh_test

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/ggml"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/mesh"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/onebit"
	"github.com/quanta-ml/quanta/sharding"
)

// shardable is what the tests need of the quantized weights: an implicit array that takes a
// sharding. It lets one table hold *nf4.Array, *int8.Array and *onebit.Array.
type shardable interface {
	implicitarray.Array
	sharding.Sharded
}

// withSharding shards w (one of the formats) by spec over m.
func withSharding(t *testing.T, w implicitarray.Array, m *sharding.Mesh, spec sharding.PartitionSpec) shardable {
	t.Helper()
	s := sharding.Sharding{Mesh: m, Spec: spec}
	switch w := w.(type) {
	case *nf4.Array:
		return w.WithSharding(s)
	case *qint8.Array:
		return w.WithSharding(s)
	case *onebit.Array:
		return w.WithSharding(s)
	case *ggml.Array:
		return w.WithSharding(s)
	}
	t.Fatalf("withSharding: %T is not a format under test", w)
	return nil
}

// quantizedWeights returns the weight, (K, N) in the products, quantized in each format under test.
func quantizedWeights(t *testing.T, w *tensors.Tensor) map[string]implicitarray.Array {
	t.Helper()
	n4, err := nf4.Quantize(w, 64)
	if err != nil {
		t.Fatal(err)
	}
	i8, err := qint8.Quantize(w, 0) // one scale per output column: scale (1, N).
	if err != nil {
		t.Fatal(err)
	}
	ternary, err := onebit.QuantizeTernary(w, &onebit.Options{DType: dtypes.Float32})
	if err != nil {
		t.Fatal(err)
	}
	scaled, err := onebit.QuantizeTernary(w, &onebit.Options{Scale: true, ScaleAxes: []int{0}}) // scale (1, N).
	if err != nil {
		t.Fatal(err)
	}
	// Q8_0: its products take float activations with or without kernels, so sharding changes
	// nothing but the order of the sums.
	q8, err := ggml.Quantize(w, gguf.TypeQ8_0)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]implicitarray.Array{"nf4": n4, "int8": i8, "ternary": ternary, "ternary scaled": scaled, "ggml": q8}
}

// TestQuantizedMatmul runs x @ W over 4 devices with W a real *nf4.Array (blocks of 64),
// *int8.Array (per-column scale) and ternary *onebit.Array (unscaled and with a per-column scale),
// sharded column parallel (W's output axis) and row parallel (W's contracting axis, x's columns
// too, XLA adding the all-reduce). It compares with the same function on one device and reads the
// shape of every component's buffer on every device: each holds only its shard.
func TestQuantizedMatmul(t *testing.T) {
	backend := multiDevice(t)
	const m, k, n = 3, 32, 256
	x := tensors.FromValue(matrix(m, k, 3))
	weights := quantizedWeights(t, tensors.FromValue(matrix(k, n, 4)))
	matmul := func(x *graph.Node, w implicitarray.Value) *graph.Node {
		return implicitarray.Materialize(implicitarray.MatMul(x, w))
	}
	single := implicitarray.MustNewExec(backend, matmul)
	defer single.Finalize()

	columns, rows := sharding.PartitionSpec{nil, {"model"}}, sharding.PartitionSpec{{"model"}}
	const nb = n / 64 // NF4 blocks per row.
	for _, tc := range []struct {
		format, layout string
		xSpec, spec    sharding.PartitionSpec
		shardShapes    [][]int // per component of the weight, on every device
	}{
		{"nf4", "column parallel", nil, columns, [][]int{{k, nb / 4, 32}, {k, nb / 4}}},
		{"nf4", "row parallel", columns, rows, [][]int{{k / 4, nb, 32}, {k / 4, nb}}},
		{"int8", "column parallel", nil, columns, [][]int{{k, n / 4}, {1, n / 4}}},
		{"int8", "row parallel", columns, rows, [][]int{{k / 4, n}, {1, n}}},
		{"ternary", "column parallel", nil, columns, [][]int{{k / 4, n / 4}}},
		{"ternary", "row parallel", columns, rows, [][]int{{k / 16, n}}},
		{"ternary scaled", "column parallel", nil, columns, [][]int{{k / 4, n / 4}, {1, n / 4}}},
		{"ternary scaled", "row parallel", columns, rows, [][]int{{k / 16, n}, {1, n}}},
	} {
		t.Run(tc.format+"/"+tc.layout, func(t *testing.T) {
			w := weights[tc.format]
			want := single.MustCall1(x, w).(*tensors.Tensor)
			e := mesh.MustNewExec(backend, mesh4, matmul).WithArgSpecs(tc.xSpec)
			defer e.Finalize()
			placed, err := e.Place(x, withSharding(t, w, mesh4, tc.spec))
			if err != nil {
				t.Fatalf("%+v", err)
			}
			if got := len(placed.Leaves) - 1; got != len(tc.shardShapes) {
				t.Fatalf("%d weight components placed, want %d", got, len(tc.shardShapes))
			}
			checkShardShapes(t, backend, placed, 1, tc.shardShapes)
			lowering.ResetBuilt()
			out, err := e.CallPlaced(placed)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			// A sharded graph never calls a kernel: the partitioner would replicate its operands.
			for choice := range lowering.Built() {
				if choice.Strategy == lowering.Kernel {
					t.Errorf("the sharded product was built as %s", choice)
				}
			}
			d := maxDiff(t, out[0].(*tensors.Tensor), want)
			if d > 1e-4 {
				t.Errorf("max |sharded - single device| = %g", d)
			}
			t.Logf("max |sharded - single device| = %g", d)
		})
	}
}

// TestTransposedProduct runs x · Wᵀ (MatMul of Transpose(W)) over 4 devices with W sharded along
// each axis in every format and compares with the same function on one device: sharding never
// changes the product (an NF4 transpose of the block axis once re-quantized a sharded weight,
// a second rounding the unsharded one does not have).
func TestTransposedProduct(t *testing.T) {
	backend := multiDevice(t)
	const m, k, n = 3, 32, 256
	x := tensors.FromValue(matrix(m, n, 6))
	weights := quantizedWeights(t, tensors.FromValue(matrix(k, n, 7)))
	matmul := func(x *graph.Node, w implicitarray.Value) *graph.Node {
		return implicitarray.Materialize(implicitarray.MatMul(x, implicitarray.Transpose(w, 1, 0)))
	}
	single := implicitarray.MustNewExec(backend, matmul)
	defer single.Finalize()
	for format, w := range weights {
		want := single.MustCall1(x, w).(*tensors.Tensor)
		for _, tc := range []struct {
			name        string
			xSpec, spec sharding.PartitionSpec
		}{
			{"first axis", nil, sharding.PartitionSpec{{"model"}}},
			{"last axis", sharding.PartitionSpec{nil, {"model"}}, sharding.PartitionSpec{nil, {"model"}}},
		} {
			t.Run(format+"/"+tc.name, func(t *testing.T) {
				e := mesh.MustNewExec(backend, mesh4, matmul).WithArgSpecs(tc.xSpec)
				defer e.Finalize()
				out, err := e.Call(x, withSharding(t, w, mesh4, tc.spec))
				if err != nil {
					t.Fatalf("%+v", err)
				}
				// Float tolerance: the one-device product may take quanta's CPU kernels, which sum
				// in another order than XLA's sharded dot.
				if d, tol := maxDiff(t, out[0].(*tensors.Tensor), want), 1e-5*maxAbs(want); d > tol {
					t.Errorf("max |sharded - single device| = %g > %g", d, tol)
				}
			})
		}
	}
}

// maxAbs is the largest magnitude of a float32 tensor's values.
func maxAbs(x *tensors.Tensor) float64 {
	var m float64
	for _, v := range tensors.MustCopyFlatData[float32](x) {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}

// TestShardingKeptOnMesh runs reshape and transpose of weights sharded over 4 devices, each
// format's handlers keeping them quantized (re-quantizing where needed), and checks that the
// results come back with a sharding over the same mesh (NF4's transpose of the block axis is lazy:
// its inner array keeps it). The per-column scale of the scaled ternary weight does not survive a
// reshape (onebit materializes then), so it is only transposed.
func TestShardingKeptOnMesh(t *testing.T) {
	backend := multiDevice(t)
	const k, n = 32, 256
	weights := quantizedWeights(t, tensors.FromValue(matrix(k, n, 5)))
	type layoutOp struct {
		name string
		fn   func(implicitarray.Value) implicitarray.Value
	}
	reshape := layoutOp{"reshape", func(w implicitarray.Value) implicitarray.Value { return implicitarray.Reshape(w, 2*k, n/2) }}
	transpose := layoutOp{"transpose", func(w implicitarray.Value) implicitarray.Value { return implicitarray.Transpose(w, 1, 0) }}
	for _, tc := range []struct {
		format string
		ops    []layoutOp
	}{
		{"nf4", []layoutOp{reshape, transpose}},
		{"int8", []layoutOp{reshape, transpose}},
		{"ternary", []layoutOp{reshape, transpose}},
		{"ternary scaled", []layoutOp{transpose}},
	} {
		for _, op := range tc.ops {
			t.Run(tc.format+"/"+op.name, func(t *testing.T) {
				w := withSharding(t, weights[tc.format], mesh4, sharding.PartitionSpec{nil, {"model"}})
				e := mesh.MustNewExec(backend, mesh4, op.fn)
				defer e.Finalize()
				outs, err := e.Call(w)
				if err != nil {
					t.Fatalf("%+v", err)
				}
				out := outs[0]
				if tr, ok := out.(*implicitarray.Transposed); ok && tc.format == "nf4" && op.name == "transpose" {
					out = tr.Inner() // NF4's transpose of the block axis is lazy; the inner array keeps the sharding
				}
				a, ok := out.(shardable)
				if !ok {
					t.Fatalf("result is a %T, want a quantized array", out)
				}
				if s, ok := a.Sharding(); !ok || !s.Mesh.Equal(mesh4) {
					t.Errorf("sharding %v (%v), want one over %s", s, ok, mesh4)
				}
			})
		}
	}
}

// TestTransposedArgumentSharded places an implicitarray.Transposed of a sharded NF4 weight (what
// a transpose of it returns): the inner array is placed by its own sharding, each device holding
// only its shard (it was replicated, its sharding dropped), and the product matches one device's.
func TestTransposedArgumentSharded(t *testing.T) {
	backend := multiDevice(t)
	const m, k, n = 3, 32, 256
	x := tensors.FromValue(matrix(m, n, 8))
	w := quantizedWeights(t, tensors.FromValue(matrix(k, n, 9)))["nf4"].(*nf4.Array)
	matmul := func(x *graph.Node, w implicitarray.Value) *graph.Node {
		return implicitarray.Materialize(implicitarray.MatMul(x, w))
	}
	single := implicitarray.MustNewExec(backend, matmul)
	defer single.Finalize()
	want := single.MustCall1(x, implicitarray.NewTransposed(w, []int{1, 0})).(*tensors.Tensor)
	const nb = n / 64
	for _, tc := range []struct {
		name        string
		spec        sharding.PartitionSpec
		shardShapes [][]int // packed and absmax, on every device
	}{
		{"first axis", sharding.PartitionSpec{{"model"}}, [][]int{{k / 4, nb, 32}, {k / 4, nb}}},
		{"last axis", sharding.PartitionSpec{nil, {"model"}}, [][]int{{k, nb / 4, 32}, {k, nb / 4}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			arg := implicitarray.NewTransposed(w.WithSharding(sharding.Sharding{Mesh: mesh4, Spec: tc.spec}), []int{1, 0})
			e := mesh.MustNewExec(backend, mesh4, matmul)
			defer e.Finalize()
			placed, err := e.Place(x, arg)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			checkShardShapes(t, backend, placed, 1, tc.shardShapes)
			out, err := e.CallPlaced(placed)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			if d, tol := maxDiff(t, out[0].(*tensors.Tensor), want), 1e-5*maxAbs(want); d > tol {
				t.Errorf("max |sharded - single device| = %g > %g", d, tol)
			}
		})
	}
}

// TestReshapeKeepsTrailingSharding reshapes a (4, 8, 256) weight sharded P(None, None, 'model')
// over 4 devices to (32, 256) in each format: the last axis, unchanged, keeps its sharding
// (P(None, 'model'), it was dropped), the result is placed by it in the next Exec, and its values
// are those of the unsharded weight reshaped on one device.
func TestReshapeKeepsTrailingSharding(t *testing.T) {
	backend := multiDevice(t)
	dense := tensors.FromValue([][][]float32{matrix(8, 256, 10), matrix(8, 256, 11), matrix(8, 256, 12), matrix(8, 256, 13)})
	weights := quantizedWeights(t, dense)
	delete(weights, "ternary scaled") // its per-column scale does not survive a reshape (TestShardingKeptOnMesh)
	reshape := func(w implicitarray.Value) implicitarray.Value { return implicitarray.Reshape(w, 32, 256) }
	materialize := func(w implicitarray.Value) *graph.Node { return implicitarray.Materialize(w) }
	single := implicitarray.MustNewExec(backend, func(w implicitarray.Value) *graph.Node { return materialize(reshape(w)) })
	defer single.Finalize()
	for format, w := range weights {
		t.Run(format, func(t *testing.T) {
			want := single.MustCall1(w).(*tensors.Tensor)
			e := mesh.MustNewExec(backend, mesh4, reshape)
			defer e.Finalize()
			outs, err := e.Call(withSharding(t, w, mesh4, sharding.PartitionSpec{nil, nil, {"model"}}))
			if err != nil {
				t.Fatalf("%+v", err)
			}
			a, ok := outs[0].(shardable)
			if !ok {
				t.Fatalf("result is a %T, want a quantized array", outs[0])
			}
			if s, ok := a.Sharding(); !ok || !s.Mesh.Equal(mesh4) || !s.Spec.Equal(sharding.PartitionSpec{nil, {"model"}}) {
				t.Errorf("sharding %v (%v), want %s P(None, 'model')", s, ok, mesh4)
			}
			next := mesh.MustNewExec(backend, mesh4, materialize)
			defer next.Finalize()
			got, err := next.Call(a)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			if d := maxDiff(t, got[0].(*tensors.Tensor), want); d != 0 {
				t.Errorf("max |sharded - single device| = %g", d)
			}
		})
	}
}
