package sharding

import (
	"slices"

	"github.com/pkg/errors"
)

// Placement is the optional Sharding an implicit array keeps as static metadata; its zero value
// is unsharded. It is immutable: With and the methods that follow an op return new values.
type Placement struct{ sharding *Sharding }

// IsSharded reports whether a sharding is set.
func (p Placement) IsSharded() bool { return p.sharding != nil }

// Sharding returns the sharding and true, or false when none is set.
func (p Placement) Sharding() (Sharding, bool) {
	if p.sharding == nil {
		return Sharding{}, false
	}
	return Sharding{Mesh: p.sharding.Mesh, Spec: cloneSpec(p.sharding.Spec)}, true
}

// With returns a Placement holding a copy of s; the zero Sharding{} clears it.
func (p Placement) With(s Sharding) Placement {
	if s.Mesh == nil && s.Spec == nil {
		return Placement{}
	}
	return Placement{&Sharding{Mesh: s.Mesh, Spec: cloneSpec(s.Spec)}}
}

// Transposed returns the placement of the array transposed by perm (output axis i is input axis
// perm[i]): the spec's entries move with their axes.
func (p Placement) Transposed(perm []int) Placement {
	if p.sharding == nil {
		return p
	}
	spec := make(PartitionSpec, len(perm))
	for i, a := range perm {
		if a < len(p.sharding.Spec) {
			spec[i] = slices.Clone(p.sharding.Spec[a])
		}
	}
	return Placement{&Sharding{Mesh: p.sharding.Mesh, Spec: spec}}
}

// Broadcasted returns the placement of the array broadcast to rank axes with input axis i
// becoming output axis broadcastAxes[i] (XLA's broadcast_in_dim): the entries move with their
// axes, new axes are replicated.
func (p Placement) Broadcasted(broadcastAxes []int, rank int) Placement {
	if p.sharding == nil {
		return p
	}
	spec := make(PartitionSpec, rank)
	for i, a := range broadcastAxes {
		if i < len(p.sharding.Spec) {
			spec[a] = slices.Clone(p.sharding.Spec[i])
		}
	}
	return Placement{&Sharding{Mesh: p.sharding.Mesh, Spec: spec}}
}

// Reshaped returns the placement of the array reshaped from dims to newDims: the entries stay on
// the leading axes whose dimensions, and those of every axis before them, are unchanged, and on
// the trailing axes whose dimensions, and those of every axis after them, are unchanged (a
// reshape of (4, 8, 128) P(None, None, 'model') to (32, 128) keeps P(None, 'model')); the other
// axes are replicated, since a reshape moves data across them in a way no per-axis spec follows.
func (p Placement) Reshaped(dims, newDims []int) Placement {
	if p.sharding == nil {
		return p
	}
	entry := func(i int) AxisSpec {
		if i < len(p.sharding.Spec) {
			return slices.Clone(p.sharding.Spec[i])
		}
		return nil
	}
	spec := make(PartitionSpec, len(newDims))
	lead := 0
	for ; lead < len(dims) && lead < len(newDims) && dims[lead] == newDims[lead]; lead++ {
		spec[lead] = entry(lead)
	}
	// The trailing axes kept, after the leading ones in both shapes.
	for t := 1; t <= min(len(dims), len(newDims))-lead && dims[len(dims)-t] == newDims[len(newDims)-t]; t++ {
		spec[len(newDims)-t] = entry(len(dims) - t)
	}
	return Placement{&Sharding{Mesh: p.sharding.Mesh, Spec: spec}}
}

// Concatenated returns the placement of the array concatenated with others (the placements of the
// other operands) along axis, the same for any order of the operands. Operands without a sharding
// take no part: if none has one, neither has the result. The concatenation axis is replicated (its
// new length need not divide by the shards); another axis keeps the entry the sharded operands
// agree on and is replicated where they differ. The mesh is theirs (a spec alone, with a nil
// mesh, agrees with any); operands sharded over different meshes give no sharding.
func (p Placement) Concatenated(axis int, others ...Placement) Placement {
	var mesh *Mesh
	var specs []PartitionSpec
	for _, q := range append([]Placement{p}, others...) {
		if q.sharding == nil {
			continue
		}
		if m := q.sharding.Mesh; m != nil {
			if mesh != nil && !mesh.Equal(m) {
				return Placement{}
			}
			mesh = m
		}
		specs = append(specs, q.sharding.Spec)
	}
	if len(specs) == 0 {
		return Placement{}
	}
	rank := 0
	for _, s := range specs {
		rank = max(rank, len(s))
	}
	entry := func(s PartitionSpec, i int) AxisSpec {
		if i < len(s) {
			return s[i]
		}
		return nil
	}
	spec := make(PartitionSpec, rank)
	for i := range rank {
		if i == axis {
			continue
		}
		spec[i] = slices.Clone(entry(specs[0], i))
		for _, s := range specs[1:] {
			if !slices.Equal(entry(s, i), spec[i]) {
				spec[i] = nil
				break
			}
		}
	}
	return Placement{&Sharding{Mesh: mesh, Spec: spec}}
}

// String describes the placement for an array's Metadata: "unsharded" or the sharding.
func (p Placement) String() string {
	if p.sharding == nil {
		return "unsharded"
	}
	return p.sharding.String()
}

// ShardingFor builds the Sharding an array's WithMeshAndAxis(m, axis) carries: the spec from
// SpecFrom(axis) over m, checked right away by the array's component rule (componentSpecs, e.g. an
// array's ComponentSpecs method), so that an invalid spec fails here and not when the graph runs.
func ShardingFor(m *Mesh, axis any, componentSpecs func(*Mesh, PartitionSpec) ([]PartitionSpec, error)) (Sharding, error) {
	if m == nil {
		return Sharding{}, errors.New("nil mesh; accepted: a *Mesh (use WithSharding for a spec alone)")
	}
	spec, err := SpecFrom(axis)
	if err != nil {
		return Sharding{}, err
	}
	if _, err := componentSpecs(m, spec); err != nil {
		return Sharding{}, err
	}
	if spec == nil {
		spec = PartitionSpec{}
	}
	return Sharding{Mesh: m, Spec: spec}, nil
}

func cloneSpec(spec PartitionSpec) PartitionSpec {
	if spec == nil {
		return nil
	}
	out := make(PartitionSpec, len(spec))
	for i, a := range spec {
		out[i] = slices.Clone(a)
	}
	return out
}
