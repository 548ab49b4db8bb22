package sharding_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/quanta-ml/quanta/sharding"
)

var (
	mesh4   = sharding.MustNewMesh([]string{"model"}, []int{4})
	mesh2x2 = sharding.MustNewMesh([]string{"data", "model"}, []int{2, 2})
)

func f32(dims ...int) shapes.Shape { return shapes.Make(dtypes.Float32, dims...) }

func TestNewMesh(t *testing.T) {
	for _, tc := range []struct {
		name    string
		names   []string
		sizes   []int
		wantErr string
	}{
		{"ok", []string{"data", "model"}, []int{2, 2}, ""},
		{"lengths", []string{"data"}, []int{2, 2}, "1 names and 2 sizes"},
		{"duplicate", []string{"x", "x"}, []int{2, 2}, "unique"},
		{"not an identifier", []string{"tp-1"}, []int{2}, "not an identifier"},
		{"size", []string{"x"}, []int{0}, "positive sizes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := sharding.NewMesh(tc.names, tc.sizes)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				dm, err := m.DeviceMesh()
				if err != nil || !slices.Equal(dm.AxesNames(), tc.names) || !slices.Equal(dm.AxesSizes(), tc.sizes) {
					t.Fatalf("DeviceMesh() = %v, %v; want axes %q sizes %v", dm, err, tc.names, tc.sizes)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("NewMesh(%q, %v) error = %v, want one containing %q", tc.names, tc.sizes, err, tc.wantErr)
			}
		})
	}
}

// TestZeroMeshDeviceMesh checks that a zero Mesh, which has no axes, gets an error naming the
// constructor to use.
func TestZeroMeshDeviceMesh(t *testing.T) {
	var m sharding.Mesh
	if _, err := m.DeviceMesh(); err == nil || !strings.Contains(err.Error(), "sharding.NewMesh") {
		t.Fatalf("zero Mesh DeviceMesh() error = %v, want one naming sharding.NewMesh", err)
	}
}

// TestValidate checks the accepted specs and that each error names the spec, the shape and the sharding.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name      string
		m         *sharding.Mesh
		spec      sharding.PartitionSpec
		shape     shapes.Shape
		wantShard []int
		wantErr   string
	}{
		{"replicated", mesh4, nil, f32(6, 3), []int{6, 3}, ""},
		{"columns", mesh4, sharding.PartitionSpec{nil, {"model"}}, f32(6, 8), []int{6, 2}, ""},
		{"rows", mesh2x2, sharding.PartitionSpec{{"data"}, {"model"}}, f32(6, 8), []int{3, 4}, ""},
		{"two mesh axes", mesh2x2, sharding.PartitionSpec{nil, {"data", "model"}}, f32(6, 8), []int{6, 2}, ""},
		{"unknown axis", mesh4, sharding.PartitionSpec{{"data"}}, f32(8), nil, `unknown mesh axis "data"`},
		{"axis twice", mesh2x2, sharding.PartitionSpec{{"model"}, {"model"}}, f32(8, 8), nil, `uses mesh axis "model" twice`},
		{"axis twice in one", mesh2x2, sharding.PartitionSpec{{"data", "data"}}, f32(8, 8), nil, `uses mesh axis "data" twice`},
		{"not divisible", mesh4, sharding.PartitionSpec{nil, {"model"}}, f32(8, 6), nil, "axis 1 (size 6) is not divisible by 4"},
		{"product not divisible", mesh2x2, sharding.PartitionSpec{{"data", "model"}}, f32(6), nil, "axis 0 (size 6) is not divisible by 4"},
		{"spec too long", mesh4, sharding.PartitionSpec{nil, nil, {"model"}}, f32(8, 8), nil, "more than the array's rank 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shard, err := sharding.ShardShape(tc.m, tc.spec, tc.shape)
			if tc.wantErr == "" {
				if err != nil || !slices.Equal(shard.Dimensions, tc.wantShard) {
					t.Fatalf("ShardShape(%s, %s) = %s, %v; want %v", tc.spec, tc.shape, shard, err, tc.wantShard)
				}
				ss, err := sharding.ShardingSpec(tc.m, tc.spec, tc.shape)
				if err != nil {
					t.Fatal(err)
				}
				if got := ss.ShardShape(tc.shape); !slices.Equal(got.Dimensions, tc.wantShard) {
					t.Errorf("distributed.ShardingSpec %s gives shard shape %s, want %v", ss, got, tc.wantShard)
				}
				return
			}
			if err == nil {
				t.Fatalf("ShardShape(%s, %s) over %s: no error, want %q", tc.spec, tc.shape, tc.m, tc.wantErr)
			}
			for _, want := range []string{tc.wantErr, tc.spec.String(), tc.shape.String(), tc.m.String()} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestPackedRowsSpec(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    sharding.PartitionSpec
		shape   shapes.Shape
		perByte int
		want    sharding.PartitionSpec
		wantErr string
	}{
		{"2-bit rows", sharding.PartitionSpec{{"model"}}, f32(32, 8), 4, sharding.PartitionSpec{{"model"}, nil}, ""},
		{"2-bit columns", sharding.PartitionSpec{nil, {"model"}}, f32(4, 8), 4, sharding.PartitionSpec{nil, {"model"}}, ""},
		{"2-bit packed rows not divisible", sharding.PartitionSpec{{"model"}}, f32(8, 8), 4, nil,
			"the 2 packed rows (first axis 8 / 4) are not divisible by its 4 shards"},
		{"2-bit first axis", nil, f32(6, 8), 4, nil, "first axis divisible by the rows a byte"},
		{"1-bit rows", sharding.PartitionSpec{{"model"}}, f32(32, 8), 8, sharding.PartitionSpec{{"model"}, nil}, ""},
		{"1-bit columns", sharding.PartitionSpec{nil, {"model"}}, f32(8, 8), 8, sharding.PartitionSpec{nil, {"model"}}, ""},
		{"1-bit packed rows not divisible", sharding.PartitionSpec{{"model"}}, f32(16, 8), 8, nil,
			"the 2 packed rows (first axis 16 / 8) are not divisible by its 4 shards"},
		{"1-bit first axis", nil, f32(12, 8), 8, nil, "first axis divisible by the rows a byte"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			packed, err := sharding.PackedRowsSpec(mesh4, tc.spec, tc.shape, tc.perByte)
			checkSpecs(t, err, tc.wantErr, []sharding.PartitionSpec{packed}, []sharding.PartitionSpec{tc.want})
		})
	}
}

func TestScaleSpec(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    sharding.PartitionSpec
		scale   shapes.Shape
		want    sharding.PartitionSpec
		wantErr string
	}{
		{"per column, columns", sharding.PartitionSpec{nil, {"model"}}, f32(1, 16), sharding.PartitionSpec{nil, {"model"}}, ""},
		{"per column, rows", sharding.PartitionSpec{{"model"}}, f32(1, 16), sharding.PartitionSpec{nil, nil}, ""},
		{"per tensor", sharding.PartitionSpec{{"model"}}, f32(1, 1), sharding.PartitionSpec{nil, nil}, ""},
		{"unknown axis", sharding.PartitionSpec{{"data"}}, f32(1, 16), nil, "unknown mesh axis"},
		{"bad scale", nil, f32(2, 16), nil, "does not fit shape"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scale, err := sharding.ScaleSpec(mesh4, tc.spec, f32(8, 16), tc.scale)
			checkSpecs(t, err, tc.wantErr, []sharding.PartitionSpec{scale}, []sharding.PartitionSpec{tc.want})
		})
	}
}

func checkSpecs(t *testing.T, err error, wantErr string, got, want []sharding.PartitionSpec) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("error = %v, want one containing %q", err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if !got[i].Equal(want[i]) || len(got[i]) != len(want[i]) {
			t.Errorf("spec #%d = %s (%d axes), want %s (%d axes)", i, got[i], len(got[i]), want[i], len(want[i]))
		}
	}
}

// TestSpecFromEmptyName: "" means a replicated axis wherever it is given, alone as in a slice
// (alone, it was taken for a mesh axis named "", unknown to every mesh).
func TestSpecFromEmptyName(t *testing.T) {
	m := sharding.MustNewMesh([]string{"model"}, []int{2})
	for _, axis := range []any{"", []string{""}, []any{""}, []any{nil}} {
		spec, err := sharding.SpecFrom(axis)
		if err != nil || !spec.Equal(sharding.Replicated) {
			t.Errorf("SpecFrom(%#v) = %v, %v; want a replicated spec", axis, spec, err)
			continue
		}
		if err := sharding.Validate(m, spec, f32(3, 5)); err != nil {
			t.Errorf("SpecFrom(%#v) = %v: %v", axis, spec, err)
		}
	}
}

// TestNilMesh: a Mesh method called on a nil mesh names the method and the constructor, as an
// error where the method returns one and as a panic otherwise (it was a nil pointer dereference);
// String gives "<nil>", as fmt prints a nil pointer.
func TestNilMesh(t *testing.T) {
	var m *sharding.Mesh
	check := func(method string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "sharding.Mesh."+method+": nil mesh") || !strings.Contains(err.Error(), "sharding.NewMesh") {
			t.Errorf("%s of a nil mesh: %v; want an error naming the method and sharding.NewMesh", method, err)
		}
	}
	panics := func(method string, f func()) {
		t.Helper()
		defer func() {
			err, _ := recover().(error)
			check(method, err)
		}()
		f()
	}
	panics("Rank", func() { m.Rank() })
	panics("Names", func() { m.Names() })
	panics("Sizes", func() { m.Sizes() })
	panics("NumDevices", func() { m.NumDevices() })
	_, err := m.AxisSize("model")
	check("AxisSize", err)
	_, err = m.DeviceMesh()
	check("DeviceMesh", err)
	check("CheckDevices", m.CheckDevices(nil))
	if got := m.String(); got != "<nil>" {
		t.Errorf("String of a nil mesh = %q, want \"<nil>\"", got)
	}
}
