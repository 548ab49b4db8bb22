package mesh_test

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/mesh"
	"github.com/quanta-ml/quanta/runtime"
)

// numTestDevices is the number of virtual XLA CPU devices the tests ask for.
const numTestDevices = 4

// TestMain gives XLA CPU 4 virtual devices (unless QUANTA_CPU_DEVICES is already set) before any
// test starts the process-wide backend.
func TestMain(m *testing.M) {
	if _, found := os.LookupEnv(runtime.CPUDevicesEnv); !found {
		_ = os.Setenv(runtime.CPUDevicesEnv, fmt.Sprint(numTestDevices))
	}
	os.Exit(m.Run())
}

// multiDevice returns the backend, skipping the test when it has fewer than numTestDevices devices.
func multiDevice(t *testing.T) backends.Backend {
	t.Helper()
	backend := testutil.Backend(t)
	if n := backend.NumDevices(); n < numTestDevices {
		t.Skipf("sharding tests need %d devices; backend %q has %d (the pure-Go backend has one; XLA CPU gets %d with %s=%d)",
			numTestDevices, backend.Name(), n, numTestDevices, runtime.CPUDevicesEnv, numTestDevices)
	}
	return backend
}

// iota fills a [rows, cols] float32 matrix with distinct values of moderate size.
func matrix(rows, cols int, seed float64) [][]float32 {
	out := make([][]float32, rows)
	for i := range out {
		out[i] = make([]float32, cols)
		for j := range out[i] {
			out[i][j] = float32(math.Sin(seed + float64(i*cols+j)))
		}
	}
	return out
}

func maxDiff(t *testing.T, got, want *tensors.Tensor) float64 {
	t.Helper()
	if !got.Shape().Equal(want.Shape()) {
		t.Fatalf("shape %s, want %s", got.Shape(), want.Shape())
	}
	g, w := tensors.MustCopyFlatData[float32](got), tensors.MustCopyFlatData[float32](want)
	var d float64
	for i := range g {
		d = max(d, math.Abs(float64(g[i]-w[i])))
	}
	return d
}

// TestDenseMatmul runs x @ W over 4 devices with W column-parallel, row-parallel and on a 2x2 mesh,
// compares with the single-device result, and reads each device's input buffer shapes.
func TestDenseMatmul(t *testing.T) {
	backend := multiDevice(t)
	const m, k, n = 4, 16, 8
	x, w := tensors.FromValue(matrix(m, k, 0)), tensors.FromValue(matrix(k, n, 1))
	matmul := func(x, w *graph.Node) *graph.Node { return graph.MatMul(x, w) }
	want, err := graph.ExecOnce(backend, matmul, x, w)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name           string
		m              *mesh.Mesh
		xSpec, wSpec   mesh.PartitionSpec
		xShard, wShard []int
	}{
		{"column parallel", mesh4, nil, mesh.PartitionSpec{nil, {"model"}}, []int{m, k}, []int{k, n / 4}},
		{"row parallel", mesh4, mesh.PartitionSpec{nil, {"model"}}, mesh.PartitionSpec{{"model"}, nil}, []int{m, k / 4}, []int{k / 4, n}},
		{"data x model", mesh2x2, mesh.PartitionSpec{{"data"}}, mesh.PartitionSpec{nil, {"model"}}, []int{m / 2, k}, []int{k, n / 2}},
		{"two mesh axes", mesh2x2, nil, mesh.PartitionSpec{{"data", "model"}}, []int{m, k}, []int{k / 4, n}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := mesh.MustNewExec(backend, tc.m, matmul).WithArgSpecs(tc.xSpec, tc.wSpec)
			defer e.Finalize()
			placed, err := e.Place(x, w)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			for leaf, wantShard := range [][]int{tc.xShard, tc.wShard} {
				shards, err := placed.ShardShapes(backend, leaf)
				if err != nil {
					t.Fatal(err)
				}
				for d, s := range shards {
					if !slices.Equal(s.Dimensions, wantShard) {
						t.Errorf("input #%d on device %d has shape %s, want %v", leaf, d, s, wantShard)
					}
				}
			}
			out, err := e.CallPlaced(placed)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			if d := maxDiff(t, out[0].(*tensors.Tensor), want); d > 1e-5 {
				t.Errorf("max |sharded - single device| = %g", d)
			}
		})
	}
}

// TestTooFewDevices checks that a mesh larger than the backend gives an error, on any backend.
func TestTooFewDevices(t *testing.T) {
	backend := testutil.Backend(t)
	big := mesh.MustNewMesh([]string{"model"}, []int{backend.NumDevices() + 1})
	_, err := mesh.NewExec(backend, big, func(x *graph.Node) *graph.Node { return x })
	want := fmt.Sprintf("needs %d devices, backend %q has %d", backend.NumDevices()+1, backend.Name(), backend.NumDevices())
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), big.String()) {
		t.Fatalf("NewExec over %s: error %v, want one containing %q", big, err, want)
	}
}

// TestSpecErrors checks that Exec reports a bad spec before running anything.
func TestSpecErrors(t *testing.T) {
	backend := multiDevice(t)
	e := mesh.MustNewExec(backend, mesh4, func(x *graph.Node) *graph.Node { return x }).
		WithArgSpecs(mesh.PartitionSpec{{"model"}})
	_, err := e.Call(tensors.FromValue(make([]float32, 6)))
	if err == nil || !strings.Contains(err.Error(), "axis 0 (size 6) is not divisible by 4") {
		t.Fatalf("error %v, want a divisibility error", err)
	}
}

// scaled is a test implicit array laid out as int8 is: an int8 weight of the logical shape and a
// scale with size 1 on the quantized axis; it is sharded by the mesh.Int8Specs rule.
type scaled struct {
	weight, scale implicitarray.Component
	sharding      mesh.Sharding
	sharded       bool
}

func (a *scaled) Shape() shapes.Shape {
	return shapes.Make(a.scale.Shape().DType, a.weight.Shape().Dimensions...)
}
func (a *scaled) Components() []implicitarray.Component {
	return []implicitarray.Component{a.weight, a.scale}
}
func (a *scaled) Metadata() string { return fmt.Sprintf("sharding=%v/%s", a.sharded, a.sharding) }
func (a *scaled) WithComponents(c []implicitarray.Component) implicitarray.Array {
	return &scaled{weight: c[0], scale: c[1], sharding: a.sharding, sharded: a.sharded}
}
func (a *scaled) Materialize() implicitarray.Value {
	s := a.scale.Node()
	return graph.Mul(graph.ConvertDType(a.weight.Node(), s.DType()), s)
}
func (a *scaled) Sharding() (mesh.Sharding, bool) { return a.sharding, a.sharded }
func (a *scaled) ComponentSpecs(m *mesh.Mesh, logical mesh.PartitionSpec) ([]mesh.PartitionSpec, error) {
	weight, scale, err := mesh.Int8Specs(m, logical, a.Shape(), a.scale.Shape())
	return []mesh.PartitionSpec{weight, scale}, err
}

// ternary is a test implicit array laid out as onebit is: 2-bit codes (value+1) packed four rows
// per byte along the first axis, quarter-strided (EFORMER_SPEC §3.1); sharded by mesh.OnebitSpecs.
type ternary struct {
	packed   implicitarray.Component
	rows     int
	sharding mesh.Sharding
}

func (a *ternary) Shape() shapes.Shape {
	return shapes.Make(dtypes.Float32, append([]int{a.rows}, a.packed.Shape().Dimensions[1:]...)...)
}
func (a *ternary) Components() []implicitarray.Component { return []implicitarray.Component{a.packed} }
func (a *ternary) Metadata() string                      { return fmt.Sprintf("rows=%d sharding=%s", a.rows, a.sharding) }
func (a *ternary) WithComponents(c []implicitarray.Component) implicitarray.Array {
	return &ternary{packed: c[0], rows: a.rows, sharding: a.sharding}
}
func (a *ternary) Materialize() implicitarray.Value {
	p := graph.ConvertDType(a.packed.Node(), dtypes.Int32)
	quarters := make([]*graph.Node, 4)
	for g := range quarters {
		code := graph.BitwiseAnd(graph.Div(p, graph.Scalar(p.Graph(), dtypes.Int32, 1<<(2*g))), graph.Scalar(p.Graph(), dtypes.Int32, 3))
		quarters[g] = graph.ConvertDType(code, dtypes.Float32)
	}
	return graph.AddScalar(graph.Concatenate(quarters, 0), -1)
}
func (a *ternary) Sharding() (mesh.Sharding, bool) { return a.sharding, a.sharding.Mesh != nil }
func (a *ternary) ComponentSpecs(m *mesh.Mesh, logical mesh.PartitionSpec) ([]mesh.PartitionSpec, error) {
	packed, err := mesh.OnebitSpecs(m, logical, a.Shape())
	return []mesh.PartitionSpec{packed}, err
}

// packTernary packs a [rows, cols] matrix of -1/0/+1 as EFORMER_SPEC §3.1 says.
func packTernary(w [][]float32) *tensors.Tensor {
	q := len(w) / 4
	packed := make([][]uint8, q)
	for p := range packed {
		packed[p] = make([]uint8, len(w[0]))
		for j := range packed[p] {
			for g := range 4 {
				packed[p][j] |= uint8(w[g*q+p][j]+1) << (2 * g)
			}
		}
	}
	return tensors.FromValue(packed)
}

// hostMatMul is the reference product, computed in Go.
func hostMatMul(x, w [][]float32) *tensors.Tensor {
	out := make([][]float32, len(x))
	for i := range x {
		out[i] = make([]float32, len(w[0]))
		for j := range out[i] {
			var s float64
			for k := range w {
				s += float64(x[i][k]) * float64(w[k][j])
			}
			out[i][j] = float32(s)
		}
	}
	return tensors.FromValue(out)
}

// TestQuantizedLayouts runs x @ W with W an int8-like and a ternary-like implicit array sharded
// column- and row-parallel, comparing with the product of the dense weights they encode, and checks
// that each device holds only its shard of every component.
func TestQuantizedLayouts(t *testing.T) {
	backend := multiDevice(t)
	const m, k, n = 3, 32, 8
	xs := matrix(m, k, 2)
	x := tensors.FromValue(xs)
	codes, ternaryW := make([][]int8, k), make([][]float32, k)
	scale := make([]float32, n)
	for j := range scale {
		scale[j] = 0.01 * float32(j+1)
	}
	intW := make([][]float32, k)
	for i := range codes {
		codes[i], ternaryW[i], intW[i] = make([]int8, n), make([]float32, n), make([]float32, n)
		for j := range codes[i] {
			codes[i][j] = int8((i*7+j*13)%255 - 127)
			intW[i][j] = float32(codes[i][j]) * scale[j]
			ternaryW[i][j] = float32((i+2*j)%3 - 1)
		}
	}
	columns, rows := mesh.PartitionSpec{nil, {"model"}}, mesh.PartitionSpec{{"model"}}
	newScaled := func(spec mesh.PartitionSpec) *scaled {
		return &scaled{weight: implicitarray.TensorComponent(tensors.FromAnyValue(codes)),
			scale:    implicitarray.TensorComponent(tensors.FromValue([][]float32{scale})),
			sharding: mesh.Sharding{Mesh: mesh4, Spec: spec}, sharded: true}
	}
	newTernary := func(spec mesh.PartitionSpec) *ternary {
		return &ternary{packed: implicitarray.TensorComponent(packTernary(ternaryW)), rows: k,
			sharding: mesh.Sharding{Mesh: mesh4, Spec: spec}}
	}
	for _, tc := range []struct {
		name        string
		w           implicitarray.Array
		xSpec       mesh.PartitionSpec
		want        *tensors.Tensor
		shardShapes [][]int // per component of w
	}{
		{"int8 column parallel", newScaled(columns), nil, hostMatMul(xs, intW), [][]int{{k, n / 4}, {1, n / 4}}},
		{"int8 row parallel", newScaled(rows), columns, hostMatMul(xs, intW), [][]int{{k / 4, n}, {1, n}}},
		{"ternary column parallel", newTernary(columns), nil, hostMatMul(xs, ternaryW), [][]int{{k / 4, n / 4}}},
		{"ternary row parallel", newTernary(rows), columns, hostMatMul(xs, ternaryW), [][]int{{k / 16, n}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := mesh.MustNewExec(backend, mesh4, func(x *graph.Node, w implicitarray.Value) *graph.Node {
				return implicitarray.Materialize(implicitarray.MatMul(x, w))
			}).WithArgSpecs(tc.xSpec)
			defer e.Finalize()
			placed, err := e.Place(x, tc.w)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			for c, want := range tc.shardShapes {
				shards, err := placed.ShardShapes(backend, 1+c)
				if err != nil {
					t.Fatal(err)
				}
				for d, s := range shards {
					if !slices.Equal(s.Dimensions, want) {
						t.Errorf("component #%d on device %d has shape %s, want %v", c, d, s, want)
					}
				}
			}
			out, err := e.CallPlaced(placed)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			if d := maxDiff(t, out[0].(*tensors.Tensor), tc.want); d > 1e-4 {
				t.Errorf("max |sharded - dense reference| = %g", d)
			}
		})
	}
}

// TestUnshardableArray checks the error for a sharded array type without ComponentSpecs.
func TestUnshardableArray(t *testing.T) {
	backend := multiDevice(t)
	a := &plain{implicitarray.TensorComponent(tensors.FromValue(make([]float32, 8)))}
	e := mesh.MustNewExec(backend, mesh4, func(a implicitarray.Value) *graph.Node { return implicitarray.Materialize(a) }).
		WithArgSpecs(mesh.PartitionSpec{{"model"}})
	_, err := e.Call(a)
	if err == nil || !strings.Contains(err.Error(), "does not implement mesh.ComponentSharder") {
		t.Fatalf("error %v, want one saying the type does not implement mesh.ComponentSharder", err)
	}
}

// plain is an implicit array with one dense component and no sharding rule.
type plain struct{ c implicitarray.Component }

func (a *plain) Shape() shapes.Shape                   { return a.c.Shape() }
func (a *plain) Components() []implicitarray.Component { return []implicitarray.Component{a.c} }
func (a *plain) Metadata() string                      { return "" }
func (a *plain) WithComponents(c []implicitarray.Component) implicitarray.Array {
	return &plain{c[0]}
}
func (a *plain) Materialize() implicitarray.Value { return a.c.Node() }
