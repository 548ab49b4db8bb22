package tpu_tests

import (
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/ggml"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/mesh"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/onebit"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/quanta-ml/quanta/sharding"
)

// AnyBackendEnv, set to 1, runs the suite on any backend, not only on accelerators.
const AnyBackendEnv = "QUANTA_ACCEL_ANY"

// Sizes of the test product x (m, k) @ W (k, n): k a multiple of 4 (2-bit packing), n a multiple
// of 4 shards of the NF4 block size.
const (
	m, k, n   = 8, 256, 512
	blockSize = 64
)

// Tolerances of max|got - want| / max|want| between two products on one device: float32 products
// run in TF32 on GPUs (10-bit mantissa: up to 2.9e-3 from the float64 product at k = 256 on an
// H100); bfloat16 outputs are rounded to 8 bits, and some backends (the pure-Go one) also
// accumulate in bfloat16, which reaches 2-3% at k = 256. Layout or scale bugs give errors of
// order 1.
var productTolerance = map[dtypes.DType]float64{dtypes.Float32: 1e-2, dtypes.BFloat16: 5e-2}

// format quantizes a host tensor in one of quanta's formats.
type format struct {
	name     string
	typ      quanta.Type
	cfg      quanta.Config
	quantize func(t *tensors.Tensor) (implicitarray.Array, error)
}

var formats = []format{
	{"nf4", quanta.NF4, quanta.Config{Type: quanta.NF4, BlockSize: blockSize},
		func(t *tensors.Tensor) (implicitarray.Array, error) { return nf4.Quantize(t, blockSize) }},
	{"int8", quanta.Int8, quanta.Config{Type: quanta.Int8},
		func(t *tensors.Tensor) (implicitarray.Array, error) { return qint8.Quantize(t) }},
	{"ternary", quanta.Ternary, quanta.Config{Type: quanta.Ternary, Scaled: true},
		func(t *tensors.Tensor) (implicitarray.Array, error) {
			return onebit.QuantizeTernary(t, &onebit.Options{Scale: true, ScaleAxes: []int{0}})
		}},
	{"binary", quanta.Binary, quanta.Config{Type: quanta.Binary, Scaled: true},
		func(t *tensors.Tensor) (implicitarray.Array, error) {
			return onebit.QuantizeBinary(t, &onebit.Options{Scale: true, ScaleAxes: []int{0}})
		}},
}

// accelerator returns the process-wide backend, or skips the test with a one-line reason when it
// is not an accelerator (unless QUANTA_ACCEL_ANY=1).
func accelerator(t testing.TB) backends.Backend {
	t.Helper()
	backend, err := runtime.Backend()
	if err != nil {
		t.Fatalf("starting the backend: %+v", err)
	}
	info := runtime.MustReport()
	if !(runtime.IsXLA(backend) && runtime.IsAccelerator(info.PluginName)) && os.Getenv(AnyBackendEnv) != "1" {
		t.Skipf("no accelerator: backend %s is not a TPU or GPU (%s=1 runs the suite anyway)", info.Config, AnyBackendEnv)
	}
	t.Logf("backend %s, %d device(s): %v", info.Config, len(info.Devices), info.Devices)
	for _, mem := range info.Memory {
		t.Logf("memory %s", mem)
	}
	return backend
}

// matrix returns a deterministic (rows, cols) float32 matrix of varied values in about [-1, 1].
func matrix(rows, cols int, seed float64) *tensors.Tensor {
	flat := make([]float32, rows*cols)
	for i := range flat {
		flat[i] = float32(math.Sin(float64(i)*0.7311+seed) * math.Cos(float64(i)*0.0173+2*seed))
	}
	return tensors.FromFlatDataAndDimensions(flat, rows, cols)
}

// toFloat32 reads a tensor of any float dtype as float32 values.
func toFloat32(t *testing.T, backend backends.Backend, x *tensors.Tensor) []float32 {
	t.Helper()
	if x.DType() == dtypes.Float32 {
		return tensors.MustCopyFlatData[float32](x)
	}
	out, err := graph.ExecOnce(backend, func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtypes.Float32) }, x)
	if err != nil {
		t.Fatalf("converting %s to float32: %+v", x.Shape(), err)
	}
	return tensors.MustCopyFlatData[float32](out)
}

// relDiff returns max|got - want| / max|want|.
func relDiff(t *testing.T, got, want []float32) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("comparing %d values with %d", len(got), len(want))
	}
	var maxDiff, maxWant float64
	for i := range got {
		maxDiff = max(maxDiff, math.Abs(float64(got[i])-float64(want[i])))
		maxWant = max(maxWant, math.Abs(float64(want[i])))
	}
	if maxWant == 0 {
		return maxDiff
	}
	return maxDiff / maxWant
}

// matmulHost is x (m, k) @ w (k, n), accumulated in float64.
func matmulHost(x, w []float32) []float32 {
	out := make([]float32, m*n)
	for i := range m {
		for j := range n {
			var sum float64
			for l := range k {
				sum += float64(x[i*k+l]) * float64(w[l*n+j])
			}
			out[i*n+j] = float32(sum)
		}
	}
	return out
}

// callExec runs fn (implicitarray.NewExec) on the backend and returns its first result.
func callExec(t *testing.T, backend backends.Backend, fn any, args ...any) *tensors.Tensor {
	t.Helper()
	e, err := implicitarray.NewExec(backend, fn)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	defer e.Finalize()
	out, err := e.Call(args...)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	return out[0].(*tensors.Tensor)
}

// referenceBackend starts GoMLX's pure-Go backend, the reference the device's results are compared
// with; it is finalized when the test ends.
func referenceBackend(t *testing.T) backends.Backend {
	t.Helper()
	reference, err := simplego.New("")
	if err != nil {
		t.Fatalf("starting the pure-Go reference backend: %+v", err)
	}
	t.Cleanup(reference.Finalize)
	return reference
}

func materialize(w implicitarray.Value) *graph.Node {
	return graph.ConvertDType(implicitarray.Materialize(w), dtypes.Float32)
}

func TestAccelerator(t *testing.T) {
	backend := accelerator(t)
	reference := referenceBackend(t)
	x := matrix(m, k, 1)
	weight := matrix(k, n, 2)

	for _, f := range formats {
		w, err := f.quantize(weight)
		if err != nil {
			t.Fatalf("%s: quantizing %s: %+v", f.name, weight.Shape(), err)
		}
		// A tensor placed on one backend cannot go to another: the reference gets its own copy.
		wRef, err := f.quantize(matrix(k, n, 2))
		if err != nil {
			t.Fatalf("%s: quantizing %s: %+v", f.name, weight.Shape(), err)
		}
		t.Run(f.name+"/materialize", func(t *testing.T) {
			got := tensors.MustCopyFlatData[float32](callExec(t, backend, materialize, w))
			want := tensors.MustCopyFlatData[float32](callExec(t, reference, materialize, wRef))
			if d := relDiff(t, got, want); d > 1e-6 {
				t.Errorf("materialized on %s vs the pure-Go backend: relative difference %g", backend.Name(), d)
			}
		})
		for _, dtype := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
			t.Run(fmt.Sprintf("%s/matmul/%s", f.name, dtype), func(t *testing.T) {
				implicitarray.ResetStats()
				fused := callExec(t, backend, func(x *graph.Node, w implicitarray.Value) *graph.Node {
					return implicitarray.Materialize(implicitarray.MatMul(graph.ConvertDType(x, dtype), w))
				}, x, w)
				stats := implicitarray.CurrentStats()
				if len(stats.Fallbacks) > 0 {
					t.Errorf("fused product fell back to materializing: %v", stats.Fallbacks)
				}
				t.Logf("handled %v, materializations %v", stats.Handled, stats.Materializations)
				dense := callExec(t, backend, func(x *graph.Node, w implicitarray.Value) *graph.Node {
					return graph.MatMul(graph.ConvertDType(x, dtype), graph.ConvertDType(implicitarray.Materialize(w), dtype))
				}, x, w)
				if got, want := fused.DType(), dtype; got != want {
					t.Errorf("fused product has dtype %s, want %s", got, want)
				}
				if d := relDiff(t, toFloat32(t, backend, fused), toFloat32(t, backend, dense)); d > productTolerance[dtype] {
					t.Errorf("fused vs dense product on %s: relative difference %g > %g", backend.Name(), d, productTolerance[dtype])
				}
				if dtype == dtypes.Float32 {
					wd := tensors.MustCopyFlatData[float32](callExec(t, reference, materialize, wRef))
					host := matmulHost(tensors.MustCopyFlatData[float32](x), wd)
					if d := relDiff(t, toFloat32(t, backend, dense), host); d > productTolerance[dtype] {
						t.Errorf("dense product on %s vs float64 on the host: relative difference %g", backend.Name(), d)
					}
				}
			})
		}
		t.Run(f.name+"/strategies", func(t *testing.T) {
			strategies := []lowering.Strategy{lowering.Auto, lowering.PrologueDot, lowering.MulReduce}
			if f.typ == quanta.Ternary || f.typ == quanta.Binary {
				strategies = append(strategies, lowering.SlicedSum, lowering.CodesDot)
			}
			for _, rows := range []int{1, 32} {
				xr := graph.MustExecOnce(backend, func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtypes.BFloat16) },
					matrix(rows, k, 3))
				dense := callExec(t, backend, func(x *graph.Node, w implicitarray.Value) *graph.Node {
					return graph.MatMul(x, graph.ConvertDType(implicitarray.Materialize(w), dtypes.BFloat16))
				}, xr, w)
				for _, s := range strategies {
					cfg := f.cfg
					cfg.Strategy = s
					ws, err := quanta.Quantize(weight, cfg)
					if err != nil {
						t.Fatalf("%+v", err)
					}
					lowering.ResetBuilt()
					fused := callExec(t, backend, func(x *graph.Node, w implicitarray.Value) *graph.Node {
						return implicitarray.Materialize(implicitarray.MatMul(x, w))
					}, xr, ws)
					d := relDiff(t, toFloat32(t, backend, fused), toFloat32(t, backend, dense))
					t.Logf("m=%d %s: built %v, relative difference to the dense bfloat16 product %.3g", rows, s, lowering.Built(), d)
					if d > productTolerance[dtypes.BFloat16] {
						t.Errorf("m=%d %s: fused vs dense bfloat16 product on %s: relative difference %g > %g", rows, s,
							backend.Name(), d, productTolerance[dtypes.BFloat16])
					}
				}
			}
		})
		t.Run(f.name+"/quanta.Quantize", func(t *testing.T) {
			v, err := quanta.Quantize(weight, f.cfg)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			got := tensors.MustCopyFlatData[float32](callExec(t, backend, materialize, v))
			want := tensors.MustCopyFlatData[float32](callExec(t, backend, materialize, w))
			if d := relDiff(t, got, want); d != 0 {
				t.Errorf("quanta.Quantize(%s) differs from the format package's: relative difference %g", f.typ, d)
			}
		})
		t.Run(f.name+"/straight-through", func(t *testing.T) {
			c := matrix(k, n, 3)
			out, err := graph.ExecOnce(backend, func(w, c *graph.Node) *graph.Node {
				loss := graph.ReduceAllSum(graph.Mul(quanta.StraightThrough(w, f.cfg), c))
				return graph.Gradient(loss, w)[0]
			}, weight, c)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			if d := relDiff(t, tensors.MustCopyFlatData[float32](out), tensors.MustCopyFlatData[float32](c)); d != 0 {
				t.Errorf("gradient of sum(StraightThrough(w)·c) differs from c: relative difference %g", d)
			}
		})
		t.Run(f.name+"/sharded", func(t *testing.T) {
			devices := backend.NumDevices()
			if devices < 2 {
				t.Skipf("one device: no sharded product")
			}
			shards := min(4, devices&^1)
			if shards == 3 {
				shards = 2
			}
			meshN := sharding.MustNewMesh([]string{"model"}, []int{shards})
			sharded, err := withSharding(w, sharding.Sharding{Mesh: meshN, Spec: sharding.PartitionSpec{nil, {"model"}}})
			if err != nil {
				t.Fatalf("%+v", err)
			}
			matmul := func(x *graph.Node, w implicitarray.Value) *graph.Node {
				return implicitarray.Materialize(implicitarray.MatMul(x, w))
			}
			want := callExec(t, backend, matmul, x, w)
			e, err := mesh.NewExec(backend, meshN, matmul)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			defer e.Finalize()
			outs, err := e.Call(x, sharded)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			if d := relDiff(t, tensors.MustCopyFlatData[float32](outs[0].(*tensors.Tensor)), tensors.MustCopyFlatData[float32](want)); d > productTolerance[dtypes.Float32] {
				t.Errorf("column-parallel product over %d devices vs one device: relative difference %g", shards, d)
			}
		})
	}
}

// withSharding returns the array with the sharding, for each format's array type.
func withSharding(a implicitarray.Array, s sharding.Sharding) (implicitarray.Array, error) {
	switch a := a.(type) {
	case *nf4.Array:
		return a.WithSharding(s), nil
	case *qint8.Array:
		return a.WithSharding(s), nil
	case *onebit.Array:
		return a.WithSharding(s), nil
	}
	return nil, fmt.Errorf("no sharding for %T", a)
}

// ggmlTypes are the GGML block types a GGUF file stores linear weights in.
var ggmlTypes = []gguf.Type{gguf.TypeQ4_0, gguf.TypeQ4_1, gguf.TypeQ5_0, gguf.TypeQ5_1, gguf.TypeQ8_0,
	gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K}

// TestAcceleratorGGML checks the GGML block formats as a GGUF file holds a linear weight, (n, k)
// with the blocks along k, in the product x·Wᵀ: the materialization on the device equals the
// pure-Go backend's, and the fused product matches the dense one on the device at 1 and 32 rows
// of float32 and bfloat16 activations, without the materialize fallback.
func TestAcceleratorGGML(t *testing.T) {
	backend := accelerator(t)
	reference := referenceBackend(t)
	const eq = "mk,nk->mn"
	for _, typ := range ggmlTypes {
		w, err := ggml.Quantize(matrix(n, k, 2), typ)
		if err != nil {
			t.Fatalf("%s: %+v", typ, err)
		}
		wRef, err := ggml.Quantize(matrix(n, k, 2), typ)
		if err != nil {
			t.Fatalf("%s: %+v", typ, err)
		}
		t.Run(typ.String()+"/materialize", func(t *testing.T) {
			got := tensors.MustCopyFlatData[float32](callExec(t, backend, materialize, w))
			want := tensors.MustCopyFlatData[float32](callExec(t, reference, materialize, wRef))
			if d := relDiff(t, got, want); d != 0 {
				t.Errorf("materialized on %s vs the pure-Go backend: relative difference %g", backend.Name(), d)
			}
		})
		for _, dtype := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
			for _, rows := range []int{1, 32} {
				t.Run(fmt.Sprintf("%s/product/%s/m=%d", typ, dtype, rows), func(t *testing.T) {
					x := matrix(rows, k, 3)
					implicitarray.ResetStats()
					lowering.ResetBuilt()
					fused := callExec(t, backend, func(x *graph.Node, w implicitarray.Value) *graph.Node {
						return implicitarray.Materialize(implicitarray.Einsum(eq, graph.ConvertDType(x, dtype), w))
					}, x, w)
					if stats := implicitarray.CurrentStats(); len(stats.Fallbacks) > 0 {
						t.Errorf("fused product fell back to materializing: %v", stats.Fallbacks)
					}
					dense := callExec(t, backend, func(x *graph.Node, w implicitarray.Value) *graph.Node {
						return graph.Einsum(eq, graph.ConvertDType(x, dtype), graph.ConvertDType(implicitarray.Materialize(w), dtype))
					}, x, w)
					d := relDiff(t, toFloat32(t, backend, fused), toFloat32(t, backend, dense))
					t.Logf("built %v, relative difference to the dense product %.3g", lowering.Built(), d)
					if d > productTolerance[dtype] {
						t.Errorf("fused vs dense product on %s: relative difference %g > %g", backend.Name(), d, productTolerance[dtype])
					}
				})
			}
		}
	}
}
