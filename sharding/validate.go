package sharding

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/pkg/errors"
)

// Equal reports whether two meshes have the same axis names and sizes, in the same order.
func (m *Mesh) Equal(o *Mesh) bool {
	if m == nil || o == nil {
		return m == o
	}
	return slices.Equal(m.names, o.names) && slices.Equal(m.sizes, o.sizes)
}

// DeviceMesh returns the GoMLX distributed.DeviceMesh with the same axes: the mesh that XLA
// sharding annotations refer to. It is built once; every call returns the same one. A nil mesh
// is an error.
func (m *Mesh) DeviceMesh() (*distributed.DeviceMesh, error) {
	if m == nil {
		return nil, errNilMesh("DeviceMesh")
	}
	m.deviceMeshOnce.Do(func() {
		if len(m.names) == 0 {
			m.deviceMeshErr = errors.New("sharding: a Mesh with no axes (build it with sharding.NewMesh)")
			return
		}
		m.deviceMesh, m.deviceMeshErr = distributed.NewDeviceMesh(slices.Clone(m.sizes), slices.Clone(m.names))
		if m.deviceMeshErr != nil {
			m.deviceMeshErr = errors.WithMessagef(m.deviceMeshErr, "sharding: converting %s to a distributed.DeviceMesh", m)
		}
	})
	return m.deviceMesh, m.deviceMeshErr
}

// CheckDevices returns an error if backend has fewer devices than the mesh needs. It names the
// mesh, the backend and, on XLA CPU, how to get more devices (QUANTA_CPU_DEVICES). A nil mesh
// is an error.
func (m *Mesh) CheckDevices(backend backends.Backend) error {
	if m == nil {
		return errNilMesh("CheckDevices")
	}
	if backend == nil {
		return errors.Errorf("sharding: %s: nil backend", m)
	}
	if need, have := m.NumDevices(), backend.NumDevices(); need > have {
		hint := ""
		if backend.String() == "xla" {
			hint = fmt.Sprintf("; on XLA CPU, start the backend with %d virtual devices (quanta's runtime: QUANTA_CPU_DEVICES=%d)", need, need)
		}
		return errors.Errorf("sharding: %s needs %d devices, backend %q has %d%s", m, need, backend.Name(), have, hint)
	}
	return nil
}

// NumShards returns, for each axis of an array of the given rank, the number of pieces spec cuts it
// into over m: the product of the sizes of the mesh axes that shard it (1: replicated). It checks
// spec against m and the rank as Validate does, without the divisibility check.
func NumShards(m *Mesh, spec PartitionSpec, rank int) ([]int, error) {
	if m == nil {
		return nil, errors.Errorf("sharding: spec %s needs a mesh, got nil", spec)
	}
	if len(spec) > rank {
		return nil, errors.Errorf("sharding: spec %s has %d axes, more than the array's rank %d (mesh %s)", spec, len(spec), rank, m)
	}
	n := make([]int, rank)
	var used []string
	for axis := range rank {
		n[axis] = 1
		if axis >= len(spec) {
			continue
		}
		for _, name := range spec[axis] {
			size, err := m.AxisSize(name)
			if err != nil {
				return nil, errors.Errorf("sharding: spec %s, axis %d: unknown mesh axis %q; mesh %s has axes %q", spec, axis, name, m, m.names)
			}
			if slices.Contains(used, name) {
				return nil, errors.Errorf("sharding: spec %s uses mesh axis %q twice (mesh %s); accepted: each mesh axis shards at most one array axis, once", spec, name, m)
			}
			used = append(used, name)
			n[axis] *= size
		}
	}
	return n, nil
}

// Validate returns an error if spec cannot shard an array of the given shape over m: a spec with
// more axes than the shape, an unknown mesh axis, a mesh axis used twice, or an array axis whose
// size is not divisible by its number of shards (the product of the sizes of its mesh axes).
// The error names the spec, the shape and the mesh.
func Validate(m *Mesh, spec PartitionSpec, shape shapes.Shape) error {
	n, err := NumShards(m, spec, shape.Rank())
	if err != nil {
		return errors.WithMessagef(err, "shape %s", shape)
	}
	for axis, shards := range n {
		if dim := shape.Dimensions[axis]; dim%shards != 0 {
			return errors.Errorf("sharding: spec %s, shape %s, mesh %s: axis %d (size %d) is not divisible by %d, the number of shards of mesh axes %q",
				spec, shape, m, axis, dim, shards, spec[axis])
		}
	}
	return nil
}

// ShardShape returns the shape each device holds of an array of the given (logical) shape sharded
// by spec over m, after Validate.
func ShardShape(m *Mesh, spec PartitionSpec, shape shapes.Shape) (shapes.Shape, error) {
	if err := Validate(m, spec, shape); err != nil {
		return shapes.Shape{}, err
	}
	n, _ := NumShards(m, spec, shape.Rank())
	shard := shape.Clone()
	for axis, shards := range n {
		shard.Dimensions[axis] /= shards
	}
	return shard, nil
}

// ShardingSpec converts spec to the GoMLX distributed.ShardingSpec (over m.DeviceMesh()) of an
// array of the given shape, after Validate. The spec is padded with replicated axes to the shape's
// rank, as graph.Exec needs for sharded parameters.
func ShardingSpec(m *Mesh, spec PartitionSpec, shape shapes.Shape) (*distributed.ShardingSpec, error) {
	if err := Validate(m, spec, shape); err != nil {
		return nil, err
	}
	dm, err := m.DeviceMesh()
	if err != nil {
		return nil, err
	}
	axes := make([]distributed.AxisSpec, shape.Rank())
	for axis := range spec {
		if len(spec[axis]) > 0 {
			axes[axis] = distributed.AxisSpec(slices.Clone(spec[axis]))
		}
	}
	s, err := distributed.NewShardingSpec(dm, axes...)
	if err != nil {
		return nil, errors.WithMessagef(err, "sharding: spec %s, shape %s, mesh %s", spec, shape, m)
	}
	return s, nil
}

// Padded returns a copy of p with replicated axes appended up to rank (p must not be longer).
func (p PartitionSpec) Padded(rank int) PartitionSpec {
	out := make(PartitionSpec, rank)
	for axis := range min(rank, len(p)) {
		out[axis] = slices.Clone(p[axis])
	}
	return out
}
