package mesh_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/mesh"
)

var (
	mesh4   = mesh.MustNewMesh([]string{"model"}, []int{4})
	mesh2x2 = mesh.MustNewMesh([]string{"data", "model"}, []int{2, 2})
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
			m, err := mesh.NewMesh(tc.names, tc.sizes)
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

// TestValidate checks the accepted specs and that each error names the spec, the shape and the mesh.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name      string
		m         *mesh.Mesh
		spec      mesh.PartitionSpec
		shape     shapes.Shape
		wantShard []int
		wantErr   string
	}{
		{"replicated", mesh4, nil, f32(6, 3), []int{6, 3}, ""},
		{"columns", mesh4, mesh.PartitionSpec{nil, {"model"}}, f32(6, 8), []int{6, 2}, ""},
		{"rows", mesh2x2, mesh.PartitionSpec{{"data"}, {"model"}}, f32(6, 8), []int{3, 4}, ""},
		{"two mesh axes", mesh2x2, mesh.PartitionSpec{nil, {"data", "model"}}, f32(6, 8), []int{6, 2}, ""},
		{"unknown axis", mesh4, mesh.PartitionSpec{{"data"}}, f32(8), nil, `unknown mesh axis "data"`},
		{"axis twice", mesh2x2, mesh.PartitionSpec{{"model"}, {"model"}}, f32(8, 8), nil, `uses mesh axis "model" twice`},
		{"axis twice in one", mesh2x2, mesh.PartitionSpec{{"data", "data"}}, f32(8, 8), nil, `uses mesh axis "data" twice`},
		{"not divisible", mesh4, mesh.PartitionSpec{nil, {"model"}}, f32(8, 6), nil, "axis 1 (size 6) is not divisible by 4"},
		{"product not divisible", mesh2x2, mesh.PartitionSpec{{"data", "model"}}, f32(6), nil, "axis 0 (size 6) is not divisible by 4"},
		{"spec too long", mesh4, mesh.PartitionSpec{nil, nil, {"model"}}, f32(8, 8), nil, "more than the array's rank 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shard, err := mesh.ShardShape(tc.m, tc.spec, tc.shape)
			if tc.wantErr == "" {
				if err != nil || !slices.Equal(shard.Dimensions, tc.wantShard) {
					t.Fatalf("ShardShape(%s, %s) = %s, %v; want %v", tc.spec, tc.shape, shard, err, tc.wantShard)
				}
				ss, err := mesh.ShardingSpec(tc.m, tc.spec, tc.shape)
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

func TestNF4Specs(t *testing.T) {
	for _, tc := range []struct {
		name               string
		m                  *mesh.Mesh
		spec               mesh.PartitionSpec
		shape              shapes.Shape
		blockSize          int
		wantPacked, wantAm mesh.PartitionSpec
		wantErr            string
	}{
		{"last axis", mesh4, mesh.PartitionSpec{nil, {"model"}}, f32(8, 256), 64,
			mesh.PartitionSpec{nil, {"model"}, nil}, mesh.PartitionSpec{nil, {"model"}}, ""},
		{"first axis", mesh4, mesh.PartitionSpec{{"model"}}, f32(8, 100), 64,
			mesh.PartitionSpec{{"model"}, nil, nil}, mesh.PartitionSpec{{"model"}, nil}, ""},
		{"both, rank 3", mesh2x2, mesh.PartitionSpec{nil, {"data"}, {"model"}}, f32(3, 4, 128), 64,
			mesh.PartitionSpec{nil, {"data"}, {"model"}, nil}, mesh.PartitionSpec{nil, {"data"}, {"model"}}, ""},
		{"replicated", mesh4, nil, f32(8, 100), 64, mesh.PartitionSpec{nil, nil, nil}, mesh.PartitionSpec{nil, nil}, ""},
		{"straddling blocks", mesh4, mesh.PartitionSpec{nil, {"model"}}, f32(8, 128), 64, nil, nil,
			"gives 32 elements per shard, not a multiple of the block size 64"},
		{"padded last block", mesh4, mesh.PartitionSpec{nil, {"model"}}, f32(8, 200), 64, nil, nil,
			"gives 50 elements per shard"},
		{"not divisible", mesh4, mesh.PartitionSpec{{"model"}}, f32(6, 64), 64, nil, nil, "axis 0 (size 6) is not divisible by 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			packed, absmax, err := mesh.NF4Specs(tc.m, tc.spec, tc.shape, tc.blockSize)
			checkSpecs(t, err, tc.wantErr, []mesh.PartitionSpec{packed, absmax}, []mesh.PartitionSpec{tc.wantPacked, tc.wantAm})
		})
	}
}

func TestInt8Specs(t *testing.T) {
	for _, tc := range []struct {
		name                string
		spec                mesh.PartitionSpec
		shape, scale        shapes.Shape
		wantWeight, wantSca mesh.PartitionSpec
		wantErr             string
	}{
		{"columns, per-row scale", mesh.PartitionSpec{nil, {"model"}}, f32(8, 16), f32(8, 1),
			mesh.PartitionSpec{nil, {"model"}}, mesh.PartitionSpec{nil, nil}, ""},
		{"rows, per-row scale", mesh.PartitionSpec{{"model"}}, f32(8, 16), f32(8, 1),
			mesh.PartitionSpec{{"model"}, nil}, mesh.PartitionSpec{{"model"}, nil}, ""},
		{"columns, per-column scale", mesh.PartitionSpec{nil, {"model"}}, f32(8, 16), f32(1, 16),
			mesh.PartitionSpec{nil, {"model"}}, mesh.PartitionSpec{nil, {"model"}}, ""},
		{"bad scale", mesh.PartitionSpec{nil, {"model"}}, f32(8, 16), f32(8, 2), nil, nil, "does not fit shape"},
		{"scale rank", nil, f32(8, 16), f32(8), nil, nil, "different ranks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			weight, scale, err := mesh.Int8Specs(mesh4, tc.spec, tc.shape, tc.scale)
			checkSpecs(t, err, tc.wantErr, []mesh.PartitionSpec{weight, scale}, []mesh.PartitionSpec{tc.wantWeight, tc.wantSca})
		})
	}
}

func TestOnebitSpecs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    mesh.PartitionSpec
		shape   shapes.Shape
		want    mesh.PartitionSpec
		wantErr string
	}{
		{"rows", mesh.PartitionSpec{{"model"}}, f32(32, 8), mesh.PartitionSpec{{"model"}, nil}, ""},
		{"columns", mesh.PartitionSpec{nil, {"model"}}, f32(4, 8), mesh.PartitionSpec{nil, {"model"}}, ""},
		{"packed rows not divisible", mesh.PartitionSpec{{"model"}}, f32(8, 8), nil, "the 2 packed rows (first axis 8 / 4) are not divisible by its 4 shards"},
		{"first axis not multiple of 4", nil, f32(6, 8), nil, "first axis divisible by 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			packed, err := mesh.OnebitSpecs(mesh4, tc.spec, tc.shape)
			checkSpecs(t, err, tc.wantErr, []mesh.PartitionSpec{packed}, []mesh.PartitionSpec{tc.want})
		})
	}
}

func TestOnebitBitSpecs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    mesh.PartitionSpec
		shape   shapes.Shape
		want    mesh.PartitionSpec
		wantErr string
	}{
		{"rows", mesh.PartitionSpec{{"model"}}, f32(32, 8), mesh.PartitionSpec{{"model"}, nil}, ""},
		{"columns", mesh.PartitionSpec{nil, {"model"}}, f32(8, 8), mesh.PartitionSpec{nil, {"model"}}, ""},
		{"packed rows not divisible", mesh.PartitionSpec{{"model"}}, f32(16, 8), nil, "the 2 packed rows (first axis 16 / 8) are not divisible by its 4 shards"},
		{"first axis not multiple of 8", nil, f32(12, 8), nil, "first axis divisible by 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			packed, err := mesh.OnebitBitSpecs(mesh4, tc.spec, tc.shape)
			checkSpecs(t, err, tc.wantErr, []mesh.PartitionSpec{packed}, []mesh.PartitionSpec{tc.want})
		})
	}
}

func TestScaleSpec(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    mesh.PartitionSpec
		scale   shapes.Shape
		want    mesh.PartitionSpec
		wantErr string
	}{
		{"per column, columns", mesh.PartitionSpec{nil, {"model"}}, f32(1, 16), mesh.PartitionSpec{nil, {"model"}}, ""},
		{"per column, rows", mesh.PartitionSpec{{"model"}}, f32(1, 16), mesh.PartitionSpec{nil, nil}, ""},
		{"per tensor", mesh.PartitionSpec{{"model"}}, f32(1, 1), mesh.PartitionSpec{nil, nil}, ""},
		{"unknown axis", mesh.PartitionSpec{{"data"}}, f32(1, 16), nil, "unknown mesh axis"},
		{"bad scale", nil, f32(2, 16), nil, "does not fit shape"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scale, err := mesh.ScaleSpec(mesh4, tc.spec, f32(8, 16), tc.scale)
			checkSpecs(t, err, tc.wantErr, []mesh.PartitionSpec{scale}, []mesh.PartitionSpec{tc.want})
		})
	}
}

func checkSpecs(t *testing.T, err error, wantErr string, got, want []mesh.PartitionSpec) {
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

// TestOnebitShardRows packs rows with eformer's quarter-strided layout (EFORMER_SPEC §3.1:
// packed[p] = c[p] | c[Q+p]<<2 | c[2Q+p]<<4 | c[3Q+p]<<6), shards the packed rows as OnebitSpecs
// says, and checks which logical rows each shard decodes to.
func TestOnebitShardRows(t *testing.T) {
	const d0, n = 16, 2
	if got, want := mesh.OnebitShardRows(d0, n, 1), []int{2, 3, 6, 7, 10, 11, 14, 15}; !slices.Equal(got, want) {
		t.Fatalf("OnebitShardRows(16, 2, 1) = %v, want %v", got, want)
	}
	m := mesh.MustNewMesh([]string{"x"}, []int{n})
	// Row r holds code r%3 (a ternary value), tagged by nothing else: decode per row index instead.
	code := func(r int) uint8 { return uint8(r % 3) }
	q := d0 / 4
	packed := make([]uint8, q)
	for p := range q {
		packed[p] = code(p) | code(q+p)<<2 | code(2*q+p)<<4 | code(3*q+p)<<6
	}
	spec, err := mesh.OnebitSpecs(m, mesh.PartitionSpec{{"x"}}, f32(d0))
	if err != nil {
		t.Fatal(err)
	}
	ss, err := mesh.ShardingSpec(m, spec, shapes.Make(dtypes.Uint8, q))
	if err != nil {
		t.Fatal(err)
	}
	dt, err := distributed.ShardTensor(ss, tensors.FromValue(packed))
	if err != nil {
		t.Fatal(err)
	}
	for s, shard := range dt.Shards() {
		bytes := shard.Value().([]uint8)
		rows := mesh.OnebitShardRows(d0, n, s)
		per := q / n
		for g := range 4 {
			for j, b := range bytes {
				if got, want := (b>>(2*g))&3, code(rows[g*per+j]); got != want {
					t.Errorf("shard %d, byte %d, quarter %d: code %d, want row %d's code %d", s, j, g, got, rows[g*per+j], want)
				}
			}
		}
	}
}
