package sharding

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/pkg/errors"
)

// Mesh is a logical grid of devices with named axes, e.g. {"data": 2, "model": 2}. Devices are
// numbered row-major over the axes (the last axis varies fastest), as in GoMLX's DeviceMesh.
// A Mesh is immutable.
type Mesh struct {
	names []string
	sizes []int

	deviceMeshOnce sync.Once
	deviceMesh     *distributed.DeviceMesh
	deviceMeshErr  error
}

// MaxDevices bounds the number of devices of a Mesh (the product of its axis sizes).
const MaxDevices = 1 << 16

// NewMesh returns a mesh with the given axis names and sizes (same length, unique names that are
// identifiers — a letter, then letters, digits or '_' — and positive sizes whose product is at
// most MaxDevices).
func NewMesh(names []string, sizes []int) (*Mesh, error) {
	if len(names) != len(sizes) || len(names) == 0 {
		return nil, errors.Errorf("sharding.NewMesh: %d names and %d sizes; accepted: one size per name, at least one axis", len(names), len(sizes))
	}
	for i, n := range names {
		if n == "" || slices.Contains(names[:i], n) {
			return nil, errors.Errorf("sharding.NewMesh: axis names %q must be non-empty and unique", names)
		}
		if !distributed.IsNameValid(n) {
			return nil, errors.Errorf("sharding.NewMesh: axis name %q is not an identifier; accepted: a letter, then letters, digits or '_'", n)
		}
		if sizes[i] <= 0 {
			return nil, errors.Errorf("sharding.NewMesh: axis %q has size %d; accepted: positive sizes", n, sizes[i])
		}
	}
	devices := 1
	for _, size := range sizes {
		if size > MaxDevices/devices {
			return nil, errors.Errorf("sharding.NewMesh: axis sizes %v need more than %d devices; accepted: a product of at most %d",
				sizes, MaxDevices, MaxDevices)
		}
		devices *= size
	}
	return &Mesh{names: slices.Clone(names), sizes: slices.Clone(sizes)}, nil
}

// MustNewMesh is NewMesh that panics on error.
func MustNewMesh(names []string, sizes []int) *Mesh {
	m, err := NewMesh(names, sizes)
	if err != nil {
		panic(err)
	}
	return m
}

// errNilMesh is the error of a Mesh method called on a nil mesh.
func errNilMesh(method string) error {
	return errors.Errorf("sharding.Mesh.%s: nil mesh; accepted: a mesh from sharding.NewMesh", method)
}

// checkNotNil panics, naming method, when m is nil: the methods that return no error.
func (m *Mesh) checkNotNil(method string) {
	if m == nil {
		panic(errNilMesh(method))
	}
}

// Rank is the number of mesh axes. It panics on a nil mesh.
func (m *Mesh) Rank() int {
	m.checkNotNil("Rank")
	return len(m.names)
}

// Names of the mesh axes. It panics on a nil mesh.
func (m *Mesh) Names() []string {
	m.checkNotNil("Names")
	return slices.Clone(m.names)
}

// Sizes of the mesh axes. It panics on a nil mesh.
func (m *Mesh) Sizes() []int {
	m.checkNotNil("Sizes")
	return slices.Clone(m.sizes)
}

// AxisSize returns the size of the named axis, or an error if the mesh has no such axis or is nil.
func (m *Mesh) AxisSize(name string) (int, error) {
	if m == nil {
		return 0, errNilMesh("AxisSize")
	}
	i := slices.Index(m.names, name)
	if i < 0 {
		return 0, errors.Errorf("mesh %s has no axis %q", m, name)
	}
	return m.sizes[i], nil
}

// NumDevices is the product of the axis sizes. It panics on a nil mesh.
func (m *Mesh) NumDevices() int {
	m.checkNotNil("NumDevices")
	n := 1
	for _, s := range m.sizes {
		n *= s
	}
	return n
}

// String returns e.g. "Mesh{data:2, model:2}", and "<nil>" for a nil mesh, as fmt prints it.
func (m *Mesh) String() string {
	if m == nil {
		return "<nil>"
	}
	parts := make([]string, len(m.names))
	for i, n := range m.names {
		parts[i] = fmt.Sprintf("%s:%d", n, m.sizes[i])
	}
	return "Mesh{" + strings.Join(parts, ", ") + "}"
}

// AxisSpec lists the mesh axes that shard one array axis; empty means replicated.
type AxisSpec []string

// PartitionSpec has one AxisSpec per array axis; missing trailing axes are replicated.
type PartitionSpec []AxisSpec

// Replicated is the spec of an array copied whole to every device.
var Replicated = PartitionSpec(nil)

// String returns e.g. "P(None, 'model')" in JAX's notation.
func (p PartitionSpec) String() string {
	parts := make([]string, len(p))
	for i, a := range p {
		switch len(a) {
		case 0:
			parts[i] = "None"
		case 1:
			parts[i] = fmt.Sprintf("'%s'", a[0])
		default:
			q := make([]string, len(a))
			for j, n := range a {
				q[j] = fmt.Sprintf("'%s'", n)
			}
			parts[i] = "(" + strings.Join(q, ", ") + ")"
		}
	}
	return "P(" + strings.Join(parts, ", ") + ")"
}

// Equal reports whether two specs shard the same way (trailing replicated axes ignored).
func (p PartitionSpec) Equal(q PartitionSpec) bool {
	trim := func(s PartitionSpec) PartitionSpec {
		for len(s) > 0 && len(s[len(s)-1]) == 0 {
			s = s[:len(s)-1]
		}
		return s
	}
	return slices.EqualFunc(trim(p), trim(q), func(a, b AxisSpec) bool { return slices.Equal(a, b) })
}

// Sharding is a PartitionSpec over a Mesh (the Mesh may be nil when only the spec is known).
type Sharding struct {
	Mesh *Mesh
	Spec PartitionSpec
}

// String returns e.g. "Mesh{model:4} P(None, 'model')".
func (s Sharding) String() string {
	if s.Mesh == nil {
		return s.Spec.String()
	}
	return s.Mesh.String() + " " + s.Spec.String()
}

// SpecFrom builds a PartitionSpec from the forms WithMeshAndAxis accepts: nil
// (replicated), a PartitionSpec, a single axis name ("": the first axis replicated, as in a
// slice), or a slice whose elements are nil/"" (that axis replicated), a name, or a []string of
// names.
func SpecFrom(axis any) (PartitionSpec, error) {
	switch a := axis.(type) {
	case nil:
		return Replicated, nil
	case PartitionSpec:
		return a, nil
	case string:
		if a == "" {
			return PartitionSpec{nil}, nil
		}
		return PartitionSpec{{a}}, nil
	case []string:
		p := make(PartitionSpec, len(a))
		for i, n := range a {
			if n != "" {
				p[i] = AxisSpec{n}
			}
		}
		return p, nil
	case []any:
		p := make(PartitionSpec, len(a))
		for i, e := range a {
			switch x := e.(type) {
			case nil:
			case string:
				if x != "" {
					p[i] = AxisSpec{x}
				}
			case []string:
				p[i] = AxisSpec(slices.Clone(x))
			case AxisSpec:
				p[i] = slices.Clone(x)
			default:
				return nil, errors.Errorf("sharding.SpecFrom: element #%d is a %T; accepted: nil, a name, or []string", i, e)
			}
		}
		return p, nil
	}
	return nil, errors.Errorf("sharding.SpecFrom: %T; accepted: nil, PartitionSpec, a name, []string or []any", axis)
}
