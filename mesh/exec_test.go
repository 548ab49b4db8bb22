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
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/quanta-ml/quanta/sharding"
)

// numTestDevices is the number of virtual XLA CPU devices the tests ask for.
const numTestDevices = 4

var (
	mesh4   = sharding.MustNewMesh([]string{"model"}, []int{4})
	mesh2x2 = sharding.MustNewMesh([]string{"data", "model"}, []int{2, 2})
)

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

// matrix fills a [rows, cols] float32 matrix with distinct values of moderate size.
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
		m              *sharding.Mesh
		xSpec, wSpec   sharding.PartitionSpec
		xShard, wShard []int
	}{
		{"column parallel", mesh4, nil, sharding.PartitionSpec{nil, {"model"}}, []int{m, k}, []int{k, n / 4}},
		{"row parallel", mesh4, sharding.PartitionSpec{nil, {"model"}}, sharding.PartitionSpec{{"model"}, nil}, []int{m, k / 4}, []int{k / 4, n}},
		{"data x model", mesh2x2, sharding.PartitionSpec{{"data"}}, sharding.PartitionSpec{nil, {"model"}}, []int{m / 2, k}, []int{k, n / 2}},
		{"two mesh axes", mesh2x2, nil, sharding.PartitionSpec{{"data", "model"}}, []int{m, k}, []int{k / 4, n}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := mesh.MustNewExec(backend, tc.m, matmul).WithArgSpecs(tc.xSpec, tc.wSpec)
			defer e.Finalize()
			placed, err := e.Place(x, w)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			checkShardShapes(t, backend, placed, 0, [][]int{tc.xShard, tc.wShard})
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
	big := sharding.MustNewMesh([]string{"model"}, []int{backend.NumDevices() + 1})
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
		WithArgSpecs(sharding.PartitionSpec{{"model"}})
	_, err := e.Call(tensors.FromValue(make([]float32, 6)))
	if err == nil || !strings.Contains(err.Error(), "axis 0 (size 6) is not divisible by 4") {
		t.Fatalf("error %v, want a divisibility error", err)
	}
}

// TestUnshardableArray checks the error for a sharded array type without ComponentSpecs.
func TestUnshardableArray(t *testing.T) {
	backend := multiDevice(t)
	a := &plain{implicitarray.TensorComponent(tensors.FromValue(make([]float32, 8)))}
	e := mesh.MustNewExec(backend, mesh4, func(a implicitarray.Value) *graph.Node { return implicitarray.Materialize(a) }).
		WithArgSpecs(sharding.PartitionSpec{{"model"}})
	_, err := e.Call(a)
	if err == nil || !strings.Contains(err.Error(), "does not implement sharding.ComponentSharder") {
		t.Fatalf("error %v, want one saying the type does not implement sharding.ComponentSharder", err)
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

// TestOneDeviceMesh runs over a mesh of one device, on any backend: every spec then holds the whole
// array on device 0, and the result is the plain single-device one (XLA rejected the one-device
// SPMD program as "not (device) portable").
func TestOneDeviceMesh(t *testing.T) {
	backend := testutil.Backend(t)
	one := sharding.MustNewMesh([]string{"model"}, []int{1})
	e := mesh.MustNewExec(backend, one, func(x *graph.Node) *graph.Node { return graph.AddScalar(x, 1) }).
		WithArgSpecs(sharding.PartitionSpec{{"model"}})
	defer e.Finalize()
	out, err := e.Call(tensors.FromValue([]float32{0, 1, 2, 3}))
	if err != nil {
		t.Fatalf("Call over %s: %+v", one, err)
	}
	if got, want := tensors.MustCopyFlatData[float32](out[0].(*tensors.Tensor)), []float32{1, 2, 3, 4}; !slices.Equal(got, want) {
		t.Errorf("x+1 over %s = %v, want %v", one, got, want)
	}
}

// TestEmptyArgument checks that an empty tensor argument gives an error naming the shape, not a
// panic from inside GoMLX's distributed.ShardTensor.
func TestEmptyArgument(t *testing.T) {
	backend := testutil.Backend(t)
	one := sharding.MustNewMesh([]string{"model"}, []int{1})
	e := mesh.MustNewExec(backend, one, func(x *graph.Node) *graph.Node { return x }).
		WithArgSpecs(sharding.PartitionSpec{{"model"}})
	defer e.Finalize()
	empty := tensors.FromShape(shapes.Make(dtypes.Float32, 0, 4))
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("Place of an empty %s panicked: %v", empty.Shape(), r)
			}
		}()
		_, err = e.Place(empty)
	}()
	if err == nil || !strings.Contains(err.Error(), "is empty") || !strings.Contains(err.Error(), empty.Shape().String()) {
		t.Fatalf("Place of an empty %s: error %v, want one naming the shape and saying it is empty", empty.Shape(), err)
	}
}

// TestEmptyArgumentNamed checks that the error for an empty tensor names the argument it is, not
// only its place among the flattened leaves (an NF4 array before it is two leaves).
func TestEmptyArgumentNamed(t *testing.T) {
	backend := testutil.Backend(t)
	one := sharding.MustNewMesh([]string{"model"}, []int{1})
	e := mesh.MustNewExec(backend, one, func(w implicitarray.Value, x *graph.Node) *graph.Node { return x })
	defer e.Finalize()
	w := nf4.MustQuantize(tensors.FromValue(matrix(4, 64, 1)), 64)
	_, err := e.Place(w, tensors.FromShape(shapes.Make(dtypes.Float32, 0, 4)))
	if err == nil || !strings.Contains(err.Error(), "argument #1") {
		t.Fatalf("Place of an NF4 array and an empty tensor: error %v, want one naming argument #1", err)
	}
}

// TestArgumentCount: specs past the last argument are an error counting both, not silently
// dropped; a call without the function's argument reports the missing argument, not the spec
// given for it as a spec too many.
func TestArgumentCount(t *testing.T) {
	backend := testutil.Backend(t)
	one := sharding.MustNewMesh([]string{"model"}, []int{1})
	for _, tc := range []struct {
		name  string
		specs []sharding.PartitionSpec
		args  []any
		want  []string // what the error must contain
	}{
		{"too many specs", []sharding.PartitionSpec{nil, {{"model"}}}, []any{tensors.FromValue([]float32{1, 2})},
			[]string{"2 specs", "1 arguments"}},
		{"missing argument", []sharding.PartitionSpec{{{"model"}}}, nil, []string{"got 0 arguments, the function takes 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := mesh.MustNewExec(backend, one, func(x *graph.Node) *graph.Node { return x }).WithArgSpecs(tc.specs...)
			defer e.Finalize()
			_, err := e.Call(tc.args...)
			for _, want := range tc.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("%d specs, %d arguments: error %v, want one containing %q", len(tc.specs), len(tc.args), err, want)
				}
			}
		})
	}
}

// TestPlacedHeld: what Place returns has a name, so that placed weights can be kept in a struct
// field and called on many times.
func TestPlacedHeld(t *testing.T) {
	backend := testutil.Backend(t)
	one := sharding.MustNewMesh([]string{"model"}, []int{1})
	e := mesh.MustNewExec(backend, one, func(x *graph.Node) *graph.Node { return graph.AddScalar(x, 1) })
	defer e.Finalize()
	var held struct{ weights *mesh.Placed }
	var err error
	if held.weights, err = e.Place(tensors.FromValue([]float32{1, 2})); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		out, err := e.CallPlaced(held.weights)
		if err != nil {
			t.Fatal(err)
		}
		if got := tensors.MustCopyFlatData[float32](out[0].(*tensors.Tensor)); !slices.Equal(got, []float32{2, 3}) {
			t.Errorf("x + 1 = %v, want [2 3]", got)
		}
	}
}

// TestCallPlacedMismatch: placed arguments that do not fit the Exec they are given to (nil, placed
// for a function of another type, or over another mesh) and a leaf index out of range are errors
// naming what was expected; they panicked (nil pointer, "reflect: Call with too few input
// arguments", index out of range) or failed inside GoMLX.
func TestCallPlacedMismatch(t *testing.T) {
	backend := multiDevice(t)
	inc := func(x *graph.Node) *graph.Node { return graph.AddScalar(x, 1) }
	e := mesh.MustNewExec(backend, mesh4, inc).WithArgSpecs(sharding.PartitionSpec{{"model"}})
	defer e.Finalize()
	p, err := e.Place(tensors.FromValue([]float32{1, 2, 3, 4, 5, 6, 7, 8}))
	if err != nil {
		t.Fatal(err)
	}
	add := mesh.MustNewExec(backend, mesh4, func(x, y *graph.Node) *graph.Node { return graph.Add(x, y) })
	defer add.Finalize()
	other := mesh.MustNewExec(backend, sharding.MustNewMesh([]string{"model"}, []int{2}), inc)
	defer other.Finalize()
	for _, tc := range []struct {
		name    string
		call    func() ([]any, error)
		wantErr string
	}{
		{"nil", func() ([]any, error) { return e.CallPlaced(nil) }, "nil placed arguments"},
		{"other function type", func() ([]any, error) { return add.CallPlaced(p) }, "arguments placed for a function func(*graph.Node) *graph.Node over Mesh{model:4}"},
		{"other mesh", func() ([]any, error) { return other.CallPlaced(p) }, "over Mesh{model:4}; accepted"},
		{"leaf out of range", func() ([]any, error) { _, err := p.ShardShapes(backend, 1); return nil, err }, "leaf #1; accepted: 0 to 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.call()
			testutil.WantError(t, err, tc.wantErr)
		})
	}
	// The same function type over the same mesh takes them.
	same := mesh.MustNewExec(backend, mesh4, inc)
	defer same.Finalize()
	out, err := same.CallPlaced(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := tensors.MustCopyFlatData[float32](out[0].(*tensors.Tensor)); !slices.Equal(got, []float32{2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Errorf("x + 1 = %v, want [2 ... 9]", got)
	}
}

// checkShardShapes checks that each device holds leaf first+i of placed (what Exec.Place returns)
// in the shape want[i].
func checkShardShapes(t *testing.T, backend backends.Backend, placed *mesh.Placed, first int, want [][]int) {
	t.Helper()
	for i, wantShape := range want {
		shards, err := placed.ShardShapes(backend, first+i)
		if err != nil {
			t.Fatal(err)
		}
		for d, s := range shards {
			if !slices.Equal(s.Dimensions, wantShape) {
				t.Errorf("leaf #%d on device %d has shape %s, want %v", first+i, d, s, wantShape)
			}
		}
	}
}
