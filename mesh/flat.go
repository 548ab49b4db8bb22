package mesh

import (
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/sharding"
)

// flatSpecs returns the sharding.PartitionSpec of each leaf that implicitarray.Flatten(arg) returns, in the
// same order: the per-component specs of every implicit array in arg, so that a sharded graph can
// take arg's flattened components as parameters.
//
// An implicit array is placed by its own Sharding when it has one (its sharding.Mesh must be nil or equal
// to m); otherwise by argSpec when the array is arg itself; otherwise it is replicated. So is an
// array nested in another (the inner array of an implicitarray.Transposed) whose outer array
// leaves it replicated. A sharded array must implement sharding.ComponentSharder. A dense leaf (a
// tensor or Go number) gets argSpec when it is arg itself, and is replicated inside a structure.
// argSpec must be nil for a structure.
func flatSpecs(m *sharding.Mesh, arg any, argSpec sharding.PartitionSpec) ([]sharding.PartitionSpec, error) {
	items, _, err := implicitarray.FlattenWithImplicit(arg)
	if err != nil {
		return nil, err
	}
	whole := len(items) == 1
	if !whole && !isReplicated(argSpec) {
		return nil, errors.Errorf("mesh.flatSpecs: spec %s given for a structure of %d leaves; accepted: a spec for a tensor or an implicit array, "+
			"and a Sharding on each implicit array inside a structure", argSpec, len(items))
	}
	var specs []sharding.PartitionSpec
	for _, item := range items {
		switch x := item.(type) {
		case implicitarray.Array:
			logical := sharding.PartitionSpec(nil)
			if whole {
				logical = argSpec
			}
			own, isSharded, err := ownSpec(m, x)
			if err != nil {
				return nil, err
			}
			if isSharded {
				logical = own
			}
			arraySpecs, err := componentSpecs(m, x, logical)
			if err != nil {
				return nil, err
			}
			specs = append(specs, arraySpecs...)
		case *tensors.Tensor:
			spec := sharding.PartitionSpec(nil)
			if whole {
				spec = argSpec
			}
			if err := sharding.Validate(m, spec, x.Shape()); err != nil {
				return nil, errors.WithMessage(err, "mesh.flatSpecs: dense argument")
			}
			specs = append(specs, spec.Padded(x.Shape().Rank()))
		default:
			return nil, errors.Errorf("mesh.flatSpecs: leaf %T; accepted: host tensors, Go numbers and implicit arrays of host tensors", item)
		}
	}
	return specs, nil
}

// componentSpecs returns the specs of a's flattened components when a's logical array is sharded
// by logical over m.
func componentSpecs(m *sharding.Mesh, a implicitarray.Array, logical sharding.PartitionSpec) ([]sharding.PartitionSpec, error) {
	name := implicitarray.TypeName(a)
	if err := sharding.Validate(m, logical, a.Shape()); err != nil {
		return nil, errors.WithMessagef(err, "mesh: %s", name)
	}
	components := a.Components()
	perComponent := make([]sharding.PartitionSpec, len(components))
	if !isReplicated(logical) {
		sharder, ok := a.(sharding.ComponentSharder)
		if !ok {
			return nil, errors.Errorf("mesh: %s of shape %s is sharded by %s but does not implement sharding.ComponentSharder, "+
				"so its components cannot be placed; accepted: replicated, or a type with ComponentSpecs", name, a.Shape(), logical)
		}
		var err error
		if perComponent, err = sharder.ComponentSpecs(m, logical); err != nil {
			return nil, errors.WithMessagef(err, "mesh: %s of shape %s sharded by %s", name, a.Shape(), logical)
		}
		if len(perComponent) != len(components) {
			return nil, errors.Errorf("mesh: %s.ComponentSpecs returned %d specs for %d components", name, len(perComponent), len(components))
		}
	}
	var specs []sharding.PartitionSpec
	for i, c := range components {
		if c.IsArray() {
			spec := perComponent[i]
			if isReplicated(spec) {
				// A nested array (e.g. the inner array of an implicitarray.Transposed) that the
				// outer one does not shard is placed by its own Sharding, as a top-level one.
				own, isSharded, err := ownSpec(m, c.Array())
				if err != nil {
					return nil, errors.WithMessagef(err, "component #%d of %s", i, name)
				}
				if isSharded {
					spec = own
				}
			}
			nested, err := componentSpecs(m, c.Array(), spec)
			if err != nil {
				return nil, errors.WithMessagef(err, "component #%d of %s", i, name)
			}
			specs = append(specs, nested...)
			continue
		}
		if err := sharding.Validate(m, perComponent[i], c.Shape()); err != nil {
			return nil, errors.WithMessagef(err, "mesh: component #%d of %s sharded by %s", i, name, logical)
		}
		specs = append(specs, perComponent[i].Padded(c.Shape().Rank()))
	}
	return specs, nil
}

// ownSpec returns the spec of a's own Sharding and true when a carries one, whose mesh must be nil
// or equal to m.
func ownSpec(m *sharding.Mesh, a implicitarray.Array) (sharding.PartitionSpec, bool, error) {
	s, ok := a.(sharding.Sharded)
	if !ok {
		return nil, false, nil
	}
	own, isSharded := s.Sharding()
	if !isSharded {
		return nil, false, nil
	}
	if own.Mesh != nil && !own.Mesh.Equal(m) {
		return nil, false, errors.Errorf("mesh.flatSpecs: %s is sharded over %s, not over the execution mesh %s",
			implicitarray.TypeName(a), own.Mesh, m)
	}
	return own.Spec, true, nil
}

// isReplicated reports whether spec shards no axis.
func isReplicated(spec sharding.PartitionSpec) bool {
	for _, a := range spec {
		if len(a) > 0 {
			return false
		}
	}
	return true
}
