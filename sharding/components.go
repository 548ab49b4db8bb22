package sharding

import (
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/pkg/errors"
)

// ComponentSharder is implemented by implicit array types whose components can be sharded: given
// the PartitionSpec of the logical array over m, it returns the PartitionSpec of each component, in
// Components() order (a nested Array component gets the spec of its own logical array). Each format
// implements its own rule, with the helpers of this package (Validate, NumShards, ScaleSpec,
// PackedRowsSpec).
type ComponentSharder interface {
	ComponentSpecs(m *Mesh, logical PartitionSpec) ([]PartitionSpec, error)
}

// Sharded is implemented by implicit array types that carry a Sharding as metadata: sharded
// execution places them by it.
type Sharded interface {
	Sharding() (Sharding, bool)
}

// ScaleSpec returns the spec of a scale of shape scaleShape that multiplies an array of logical
// shape shape sharded by logical over m: the scale keeps the array's rank, with size 1 on the axes
// it was reduced over. Those axes are replicated (every shard of the axis shares the one scale);
// the others have the logical spec.
func ScaleSpec(m *Mesh, logical PartitionSpec, shape, scaleShape shapes.Shape) (PartitionSpec, error) {
	if _, err := NumShards(m, logical, shape.Rank()); err != nil {
		return nil, errors.WithMessagef(err, "sharding.ScaleSpec: shape %s", shape)
	}
	if scaleShape.Rank() != shape.Rank() {
		return nil, errors.Errorf("sharding.ScaleSpec: scale shape %s and shape %s have different ranks; accepted: the scale keeps the array's rank", scaleShape, shape)
	}
	scale := logical.Padded(shape.Rank())
	for axis, dim := range scaleShape.Dimensions {
		switch {
		case dim == shape.Dimensions[axis]:
		case dim == 1:
			scale[axis] = nil
		default:
			return nil, errors.Errorf("sharding.ScaleSpec: scale shape %s does not fit shape %s at axis %d; accepted: each scale axis of size 1 or the array's size",
				scaleShape, shape, axis)
		}
	}
	return scale, nil
}

// PackedRowsSpec returns the spec of a component packing perByte logical rows a byte along the
// first axis, strided (logical (d0, …), packed (d0/perByte, …), packed row p holding logical rows
// p, Q+p, 2Q+p, … with Q = d0/perByte): the logical spec, axis by axis. The first axis must have
// d0 % perByte == 0 and, when sharded in n shards, Q % n == 0.
//
// A sharded first axis does not keep the logical placement: shard s of the packed rows holds, of
// each group g, the logical rows g·Q + s·Q/n … g·Q + (s+1)·Q/n − 1, not a contiguous block. Each
// logical element is still stored once over the shards and XLA keeps the computation exact, but
// the materialized array then needs communication to reach the logical spec.
func PackedRowsSpec(m *Mesh, logical PartitionSpec, shape shapes.Shape, perByte int) (PartitionSpec, error) {
	if perByte < 1 || shape.Rank() < 1 || shape.Dimensions[0]%perByte != 0 {
		return nil, errors.Errorf("sharding.PackedRowsSpec: shape %s, %d rows a byte; accepted: rank >= 1 and a first axis divisible by the rows a byte",
			shape, perByte)
	}
	if err := Validate(m, logical, shape); err != nil {
		return nil, errors.WithMessage(err, "sharding.PackedRowsSpec")
	}
	n, _ := NumShards(m, logical, shape.Rank())
	if q := shape.Dimensions[0] / perByte; q%n[0] != 0 {
		return nil, errors.Errorf("sharding.PackedRowsSpec: spec %s, shape %s, mesh %s: the %d packed rows (first axis %d / %d) are not divisible by its %d shards; "+
			"accepted: (first axis / %d) divisible by the number of shards", logical, shape, m, q, shape.Dimensions[0], perByte, n[0], perByte)
	}
	return logical.Padded(shape.Rank()), nil
}
