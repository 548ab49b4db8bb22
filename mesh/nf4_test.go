package mesh_test

import (
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/mesh"
	"github.com/quanta-ml/quanta/nf4"
)

// shardableNF4 adds the mesh.ComponentSharder rule to *nf4.Array for these tests; inside the graph
// the components come back as a plain *nf4.Array (WithComponents is nf4's), so nf4's own handlers run.
type shardableNF4 struct{ *nf4.Array }

func (a shardableNF4) ComponentSpecs(m *mesh.Mesh, logical mesh.PartitionSpec) ([]mesh.PartitionSpec, error) {
	packed, absmax, err := mesh.NF4Specs(m, logical, a.Shape(), a.BlockSize())
	return []mesh.PartitionSpec{packed, absmax}, err
}

// TestNF4Layouts runs x @ W with W NF4-quantized and sharded column- and row-parallel over 4
// devices, compares with the same function on one device, and checks each device's shards.
func TestNF4Layouts(t *testing.T) {
	backend := multiDevice(t)
	const m, k, n, blockSize = 3, 32, 256, 64
	x := tensors.FromValue(matrix(m, k, 3))
	w, err := nf4.Quantize(tensors.FromValue(matrix(k, n, 4)), blockSize)
	if err != nil {
		t.Fatal(err)
	}
	matmul := func(x *graph.Node, w implicitarray.Value) *graph.Node {
		return implicitarray.Materialize(implicitarray.MatMul(x, w))
	}
	single := implicitarray.MustNewExec(backend, matmul)
	defer single.Finalize()
	want := single.MustCall1(x, w).(*tensors.Tensor)

	nb := n / blockSize
	for _, tc := range []struct {
		name        string
		xSpec, spec mesh.PartitionSpec
		shardShapes [][]int // packed, absmax
	}{
		{"column parallel", nil, mesh.PartitionSpec{nil, {"model"}}, [][]int{{k, nb / 4, blockSize / 2}, {k, nb / 4}}},
		{"row parallel", mesh.PartitionSpec{nil, {"model"}}, mesh.PartitionSpec{{"model"}}, [][]int{{k / 4, nb, blockSize / 2}, {k / 4, nb}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sharded := shardableNF4{w.WithSharding(mesh.Sharding{Mesh: mesh4, Spec: tc.spec})}
			e := mesh.MustNewExec(backend, mesh4, matmul).WithArgSpecs(tc.xSpec)
			defer e.Finalize()
			placed, err := e.Place(x, sharded)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			for c, wantShape := range tc.shardShapes {
				shards, err := placed.ShardShapes(backend, 1+c)
				if err != nil {
					t.Fatal(err)
				}
				for d, s := range shards {
					if !slices.Equal(s.Dimensions, wantShape) {
						t.Errorf("component #%d on device %d has shape %s, want %v", c, d, s, wantShape)
					}
				}
			}
			out, err := e.CallPlaced(placed)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			if d := maxDiff(t, out[0].(*tensors.Tensor), want); d > 1e-4 {
				t.Errorf("max |sharded - single device| = %g", d)
			}
		})
	}
}
