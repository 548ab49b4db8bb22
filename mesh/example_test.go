package mesh_test

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/quanta-ml/quanta/mesh"
)

// An NF4 weight (K, N) = (32, 256) with blocks of 64, sharded column-parallel over 4 devices:
// each device holds one block per row of packed codes and absmax.
func ExampleNF4Specs() {
	m := mesh.MustNewMesh([]string{"model"}, []int{4})
	logical := mesh.PartitionSpec{nil, {"model"}}
	packed, absmax, err := mesh.NF4Specs(m, logical, shapes.Make(dtypes.Float32, 32, 256), 64)
	if err != nil {
		panic(err)
	}
	packedShard, _ := mesh.ShardShape(m, packed, shapes.Make(dtypes.Uint8, 32, 4, 32))
	fmt.Println("packed:", packed, packedShard)
	fmt.Println("absmax:", absmax)

	// With blocks of 128, the 4 shards of 64 elements would split blocks.
	_, _, err = mesh.NF4Specs(m, logical, shapes.Make(dtypes.Float32, 32, 256), 128)
	fmt.Println(err != nil)
	// Output:
	// packed: P(None, 'model', None) (Uint8)[32 1 32]
	// absmax: P(None, 'model')
	// true
}

// Which logical rows shard 1 of 2 holds when a 2-bit array of 16 rows is sharded on its first axis.
func ExampleOnebitShardRows() {
	fmt.Println(mesh.OnebitShardRows(16, 2, 1))
	// Output: [2 3 6 7 10 11 14 15]
}
