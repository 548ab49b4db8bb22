package sharding_test

import (
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/sharding"
)

func TestPlacement(t *testing.T) {
	m := sharding.MustNewMesh([]string{"data", "model"}, []int{2, 2})
	var p sharding.Placement
	if p.IsSharded() || p.String() != "unsharded" {
		t.Fatalf("zero Placement: sharded=%v %q", p.IsSharded(), p.String())
	}
	spec := sharding.PartitionSpec{{"data"}, nil, {"model"}}
	p = p.With(sharding.Sharding{Mesh: m, Spec: spec})
	spec[0][0] = "changed" // With keeps its own copy
	s, ok := p.Sharding()
	if !ok || s.Mesh != m || !s.Spec.Equal(sharding.PartitionSpec{{"data"}, nil, {"model"}}) {
		t.Fatalf("Sharding() = %v, %v", s, ok)
	}
	if got := p.Transposed([]int{2, 0, 1}); !mustSpec(t, got).Equal(sharding.PartitionSpec{{"model"}, {"data"}, nil}) {
		t.Errorf("Transposed: %v", got)
	}
	if got := p.Broadcasted([]int{1, 2, 3}, 4); !mustSpec(t, got).Equal(sharding.PartitionSpec{nil, {"data"}, nil, {"model"}}) {
		t.Errorf("Broadcasted: %v", got)
	}
	if !strings.Contains(p.String(), "'model'") {
		t.Errorf("String() = %q", p.String())
	}
	if p.With(sharding.Sharding{}).IsSharded() {
		t.Error("the zero Sharding did not clear the placement")
	}
}

func mustSpec(t *testing.T, p sharding.Placement) sharding.PartitionSpec {
	t.Helper()
	s, ok := p.Sharding()
	if !ok {
		t.Fatal("placement lost its sharding")
	}
	return s.Spec
}

func TestShardingFor(t *testing.T) {
	m := sharding.MustNewMesh([]string{"model"}, []int{2})
	ok := func(*sharding.Mesh, sharding.PartitionSpec) ([]sharding.PartitionSpec, error) { return nil, nil }
	if _, err := sharding.ShardingFor(nil, "model", ok); err == nil {
		t.Error("nil mesh accepted")
	}
	s, err := sharding.ShardingFor(m, nil, ok)
	if err != nil || s.Mesh != m || len(s.Spec) != 0 {
		t.Errorf("replicated: %v %v", s, err)
	}
	s, err = sharding.ShardingFor(m, []any{nil, "model"}, ok)
	if err != nil || !s.Spec.Equal(sharding.PartitionSpec{nil, {"model"}}) {
		t.Errorf("tuple form: %v %v", s, err)
	}
}

func TestPlacementReshapedAndConcatenated(t *testing.T) {
	m := sharding.MustNewMesh([]string{"data", "model"}, []int{2, 2})
	p := sharding.Placement{}.With(sharding.Sharding{Mesh: m, Spec: sharding.PartitionSpec{{"data"}, {"model"}, nil}})
	for _, tc := range []struct {
		name       string
		dims, into []int
		want       sharding.PartitionSpec
	}{
		{"leading axes kept", []int{4, 6, 8}, []int{4, 6, 2, 4}, sharding.PartitionSpec{{"data"}, {"model"}}},
		{"second axis merged", []int{4, 6, 8}, []int{4, 48}, sharding.PartitionSpec{{"data"}}},
		{"first axis changed", []int{4, 6, 8}, []int{2, 2, 48}, nil},
		{"leading axes merged, last kept", []int{4, 6, 8}, []int{24, 8}, nil},
		{"first two axes regrouped", []int{4, 6, 8}, []int{2, 12, 8}, nil},
		{"size-1 axis inserted", []int{4, 6, 8}, []int{4, 1, 6, 8}, sharding.PartitionSpec{{"data"}, nil, {"model"}}},
		{"size-1 axis dropped", []int{4, 1, 6, 8}, []int{4, 6, 8}, sharding.PartitionSpec{{"data"}}},
	} {
		if got := mustSpec(t, p.Reshaped(tc.dims, tc.into)); !got.Equal(tc.want) {
			t.Errorf("%s: Reshaped = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Trailing axes whose dimensions (and those after them) are unchanged keep their entries.
	last := sharding.Placement{}.With(sharding.Sharding{Mesh: m, Spec: sharding.PartitionSpec{nil, {"data"}, {"model"}}})
	for _, tc := range []struct {
		name       string
		dims, into []int
		want       sharding.PartitionSpec
	}{
		{"leading axes merged", []int{4, 8, 128}, []int{32, 128}, sharding.PartitionSpec{nil, {"model"}}},
		{"leading axis split", []int{4, 8, 128}, []int{2, 2, 8, 128}, sharding.PartitionSpec{nil, nil, {"data"}, {"model"}}},
		{"last axis changed", []int{4, 8, 128}, []int{4, 8, 2, 64}, sharding.PartitionSpec{nil, {"data"}}},
		{"everything changed", []int{4, 8, 128}, []int{4096}, nil},
	} {
		if got := mustSpec(t, last.Reshaped(tc.dims, tc.into)); !got.Equal(tc.want) {
			t.Errorf("%s: Reshaped = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := mustSpec(t, p.Concatenated(1)); !got.Equal(sharding.PartitionSpec{{"data"}}) {
		t.Errorf("Concatenated(1) = %v, want P('data')", got)
	}
}

// TestConcatenatedOperandOrder: the placement of a concatenation does not depend on the order of
// its operands. Operands without a sharding take no part; the concatenation axis is replicated;
// another axis keeps the entry the sharded operands agree on and is replicated where they differ;
// operands over different meshes give no sharding.
func TestConcatenatedOperandOrder(t *testing.T) {
	m := sharding.MustNewMesh([]string{"data", "model"}, []int{2, 2})
	other := sharding.MustNewMesh([]string{"data", "model"}, []int{1, 4})
	on := func(m *sharding.Mesh, spec sharding.PartitionSpec) sharding.Placement {
		return sharding.Placement{}.With(sharding.Sharding{Mesh: m, Spec: spec})
	}
	rows := on(m, sharding.PartitionSpec{{"data"}, {"model"}})
	for _, tc := range []struct {
		name     string
		operands []sharding.Placement
		want     sharding.PartitionSpec // nil: no sharding
		wantMesh *sharding.Mesh
	}{
		{"none sharded", []sharding.Placement{{}, {}}, nil, nil},
		{"unsharded, sharded", []sharding.Placement{{}, rows}, sharding.PartitionSpec{nil, {"model"}}, m},
		{"sharded, unsharded", []sharding.Placement{rows, {}}, sharding.PartitionSpec{nil, {"model"}}, m},
		{"same spec", []sharding.Placement{rows, rows, rows}, sharding.PartitionSpec{nil, {"model"}}, m},
		{"replicated, sharded", []sharding.Placement{on(m, sharding.PartitionSpec{}), rows}, sharding.PartitionSpec{}, m},
		{"sharded, replicated", []sharding.Placement{rows, on(m, sharding.PartitionSpec{})}, sharding.PartitionSpec{}, m},
		{"spec alone, sharded", []sharding.Placement{on(nil, sharding.PartitionSpec{nil, {"model"}}), rows}, sharding.PartitionSpec{nil, {"model"}}, m},
		{"different meshes", []sharding.Placement{rows, on(other, sharding.PartitionSpec{nil, {"model"}})}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.operands[0].Concatenated(0, tc.operands[1:]...)
			s, ok := got.Sharding()
			if ok != (tc.want != nil) || ok && (!s.Spec.Equal(tc.want) || s.Mesh != tc.wantMesh) {
				t.Errorf("Concatenated(0) = %v, want %v over %v", got, tc.want, tc.wantMesh)
			}
		})
	}
}
