package mesh

import (
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/pkg/errors"
)

// ComponentSharder is implemented by implicit array types whose components can be sharded: given
// the PartitionSpec of the logical array over m, it returns the PartitionSpec of each component, in
// Components() order (a nested Array component gets the spec of its own logical array). Formats
// implement it with the rule functions of this package (NF4Specs, Int8Specs, OnebitSpecs,
// OnebitBitSpecs, ScaleSpec).
type ComponentSharder interface {
	ComponentSpecs(m *Mesh, logical PartitionSpec) ([]PartitionSpec, error)
}

// Sharded is implemented by implicit array types that carry a Sharding as metadata (nf4.Array,
// int8.Array, onebit.Array, onebit.BitArray): Exec places them by it.
type Sharded interface {
	Sharding() (Sharding, bool)
}

// NF4Specs returns the specs of the components of an NF4 array of logical shape (…, F) and block
// size blockSize sharded by logical over m: packed (…, F/blockSize, blockSize/2) and absmax
// (…, F/blockSize). Leading axes keep their spec; a sharded last axis shards the block axis, and the
// byte axis of packed is replicated. With the last axis in n shards, each shard must hold whole
// blocks: F/n must be a multiple of blockSize (which also rules out a zero-padded last block).
func NF4Specs(m *Mesh, logical PartitionSpec, shape shapes.Shape, blockSize int) (packed, absmax PartitionSpec, err error) {
	if shape.Rank() < 1 || blockSize <= 0 {
		return nil, nil, errors.Errorf("mesh.NF4Specs: shape %s, block size %d; accepted: rank >= 1 and a positive block size", shape, blockSize)
	}
	if err := Validate(m, logical, shape); err != nil {
		return nil, nil, errors.WithMessage(err, "mesh.NF4Specs")
	}
	rank := shape.Rank()
	n, _ := NumShards(m, logical, rank)
	if f, shards := shape.Dimensions[rank-1], n[rank-1]; shards > 1 && (f/shards)%blockSize != 0 {
		return nil, nil, errors.Errorf("mesh.NF4Specs: spec %s, shape %s, mesh %s: the last axis (size %d) in %d shards gives %d elements per shard, "+
			"not a multiple of the block size %d, so NF4 blocks would straddle shards; accepted: (last axis / shards) a multiple of the block size",
			logical, shape, m, f, shards, f/shards, blockSize)
	}
	spec := normalize(logical, rank)
	absmax = spec
	packed = append(normalize(spec, rank), nil)
	return packed, absmax, nil
}

// Int8Specs returns the specs of the components of an int8 array of logical shape shape sharded by
// logical over m, with a scale of shape scaleShape (the logical shape with size 1 on the quantized
// axes): the weight has the logical spec, the scale ScaleSpec's.
func Int8Specs(m *Mesh, logical PartitionSpec, shape, scaleShape shapes.Shape) (weight, scale PartitionSpec, err error) {
	if err := Validate(m, logical, shape); err != nil {
		return nil, nil, errors.WithMessage(err, "mesh.Int8Specs")
	}
	if scale, err = ScaleSpec(m, logical, shape, scaleShape); err != nil {
		return nil, nil, errors.WithMessage(err, "mesh.Int8Specs")
	}
	return normalize(logical, shape.Rank()), scale, nil
}

// ScaleSpec returns the spec of a scale of shape scaleShape that multiplies an array of logical
// shape shape sharded by logical over m (int8's scale, onebit's optional scale): the scale keeps
// the array's rank, with size 1 on the axes it was reduced over. Those axes are replicated (every
// shard of the axis shares the one scale); the others have the logical spec.
func ScaleSpec(m *Mesh, logical PartitionSpec, shape, scaleShape shapes.Shape) (PartitionSpec, error) {
	if _, err := NumShards(m, logical, shape.Rank()); err != nil {
		return nil, errors.WithMessagef(err, "mesh.ScaleSpec: shape %s", shape)
	}
	if scaleShape.Rank() != shape.Rank() {
		return nil, errors.Errorf("mesh.ScaleSpec: scale shape %s and shape %s have different ranks; accepted: the scale keeps the array's rank", scaleShape, shape)
	}
	scale := normalize(logical, shape.Rank())
	for axis, dim := range scaleShape.Dimensions {
		switch {
		case dim == shape.Dimensions[axis]:
		case dim == 1:
			scale[axis] = nil
		default:
			return nil, errors.Errorf("mesh.ScaleSpec: scale shape %s does not fit shape %s at axis %d; accepted: each scale axis of size 1 or the array's size",
				scaleShape, shape, axis)
		}
	}
	return scale, nil
}

// OnebitSpecs returns the spec of the packed component (d0/4, …) of a 2-bit (binary/ternary) array
// of logical shape (d0, …) sharded by logical over m: the same spec, axis by axis. The first axis
// must have d0 % 4 == 0, and, when sharded in n shards, (d0/4) % n == 0.
//
// A sharded first axis does not keep the logical placement: packed row p holds logical rows p,
// Q+p, 2Q+p and 3Q+p (Q = d0/4), so shard s of the packed rows holds the logical rows of
// OnebitShardRows, a slice of each quarter, not the block of rows [s·d0/n, (s+1)·d0/n). Each
// logical element is still stored once over the shards, and XLA keeps the computation exact, but
// the materialized array then needs communication to reach the logical spec; see the package
// documentation.
func OnebitSpecs(m *Mesh, logical PartitionSpec, shape shapes.Shape) (PartitionSpec, error) {
	return packedRowSpecs("mesh.OnebitSpecs", m, logical, shape, 4)
}

// OnebitBitSpecs is OnebitSpecs for the 1-bit layout (onebit.BitArray): packed (d0/8, …) with row p
// holding logical rows p, E+p, …, 7E+p (E = d0/8, eighth-strided). The first axis must have
// d0 % 8 == 0, and, when sharded in n shards, (d0/8) % n == 0; shard s then holds, of each eighth
// g, the rows g·E + s·E/n … g·E + (s+1)·E/n − 1.
func OnebitBitSpecs(m *Mesh, logical PartitionSpec, shape shapes.Shape) (PartitionSpec, error) {
	return packedRowSpecs("mesh.OnebitBitSpecs", m, logical, shape, 8)
}

// packedRowSpecs is the rule of arrays packed perByte rows a byte along the first axis, strided.
func packedRowSpecs(what string, m *Mesh, logical PartitionSpec, shape shapes.Shape, perByte int) (PartitionSpec, error) {
	if shape.Rank() < 1 || shape.Dimensions[0]%perByte != 0 {
		return nil, errors.Errorf("%s: shape %s; accepted: rank >= 1 and a first axis divisible by %d (%d rows per packed byte)", what, shape, perByte, perByte)
	}
	if err := Validate(m, logical, shape); err != nil {
		return nil, errors.WithMessage(err, what)
	}
	n, _ := NumShards(m, logical, shape.Rank())
	if q := shape.Dimensions[0] / perByte; q%n[0] != 0 {
		return nil, errors.Errorf("%s: spec %s, shape %s, mesh %s: the %d packed rows (first axis %d / %d) are not divisible by its %d shards; "+
			"accepted: (first axis / %d) divisible by the number of shards", what, logical, shape, m, q, shape.Dimensions[0], perByte, n[0], perByte)
	}
	return normalize(logical, shape.Rank()), nil
}

// OnebitShardRows returns the logical rows (first-axis indices) held by shard s of n of a 2-bit
// array with d0 rows whose packed rows are sharded along the first axis: for each quarter g,
// rows g·Q + s·Q/n … g·Q + (s+1)·Q/n − 1, with Q = d0/4. It panics unless (d0/4) % n == 0 and
// 0 <= s < n (OnebitSpecs checks the former).
func OnebitShardRows(d0, n, s int) []int {
	q := d0 / 4
	if d0%4 != 0 || n <= 0 || q%n != 0 || s < 0 || s >= n {
		panic(errors.Errorf("mesh.OnebitShardRows(d0=%d, n=%d, s=%d): accepted: d0 %% 4 == 0, (d0/4) %% n == 0, 0 <= s < n", d0, n, s))
	}
	per := q / n
	rows := make([]int, 0, 4*per)
	for g := range 4 {
		for j := range per {
			rows = append(rows, g*q+s*per+j)
		}
	}
	return rows
}
