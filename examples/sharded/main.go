// Command sharded runs a matmul x @ W over a mesh of 4 devices with W dense, NF4 (blocks of 64),
// int8 (one scale per output column) and ternary (onebit, unscaled and with a per-column scale),
// sharded column-parallel (output axis) and row-parallel (contracting axis, XLA adding the
// all-reduce). For each it prints the mesh, the shape each device holds of every input (the
// quantized weights as their components: packed bytes, absmax or scale) and the largest
// difference from the same computation on one device.
//
// On XLA CPU it asks for 4 virtual devices (QUANTA_CPU_DEVICES=4) unless QUANTA_CPU_DEVICES is
// set; with fewer devices (e.g. the pure-Go backend) it prints why it cannot run and exits 1.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/mesh"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/onebit"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/quanta-ml/quanta/sharding"
)

const numDevices = 4

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: sharded (no flags; %s sets the XLA CPU devices, %d by default)\n", runtime.CPUDevicesEnv, numDevices)
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if _, found := os.LookupEnv(runtime.CPUDevicesEnv); !found {
		_ = os.Setenv(runtime.CPUDevicesEnv, fmt.Sprint(numDevices))
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "sharded: %v\n", err)
		os.Exit(1)
	}
}

// weight is one format of W: the argument to pass and the names of its flattened inputs.
type weight struct {
	name       string
	w          any // *tensors.Tensor or a quantized array
	components []string
}

func run() error {
	backend, err := runtime.Backend()
	if err != nil {
		return err
	}
	fmt.Printf("backend: %s, %d devices\n", backend.Name(), backend.NumDevices())
	m, err := sharding.NewMesh([]string{"model"}, []int{numDevices})
	if err != nil {
		return err
	}
	if err := m.CheckDevices(backend); err != nil {
		return err
	}
	fmt.Printf("mesh: %s\n", m)

	const rows, k, n = 4, 256, 256
	x, w := tensors.FromValue(matrix(rows, k, 0)), tensors.FromValue(matrix(k, n, 1))
	weights, err := quantize(w)
	if err != nil {
		return err
	}
	matmul := func(x *graph.Node, w implicitarray.Value) *graph.Node {
		return implicitarray.Materialize(implicitarray.MatMul(x, w))
	}
	single, err := implicitarray.NewExec(backend, matmul)
	if err != nil {
		return err
	}
	defer single.Finalize()
	for _, wt := range weights {
		out, err := single.Call(x, wt.w)
		if err != nil {
			return errors.WithMessagef(err, "%s on one device", wt.name)
		}
		want := out[0].(*tensors.Tensor)
		for _, layout := range []struct {
			name         string
			xSpec, wSpec sharding.PartitionSpec
		}{
			{"column parallel", nil, sharding.PartitionSpec{nil, {"model"}}},
			{"row parallel", sharding.PartitionSpec{nil, {"model"}}, sharding.PartitionSpec{{"model"}, nil}},
		} {
			fmt.Printf("\n%s, %s: x %s, W %s\n", wt.name, layout.name, layout.xSpec, layout.wSpec)
			sharded, err := shard(wt.w, m, layout.wSpec)
			if err != nil {
				return errors.WithMessagef(err, "%s, %s", wt.name, layout.name)
			}
			e, err := mesh.NewExec(backend, m, matmul)
			if err != nil {
				return err
			}
			// The dense W takes its spec from WithArgSpecs; a quantized one carries its own sharding.
			diff, err := runLayout(backend, e.WithArgSpecs(layout.xSpec, layout.wSpec), want, append([]string{"x"}, wt.components...), x, sharded)
			e.Finalize()
			if err != nil {
				return errors.WithMessagef(err, "%s, %s", wt.name, layout.name)
			}
			fmt.Printf("  max |sharded - single device| = %.3g\n", diff)
		}
	}
	return nil
}

// quantize returns w dense and in each quantized format.
func quantize(w *tensors.Tensor) ([]weight, error) {
	n4, err := nf4.Quantize(w, 64)
	if err != nil {
		return nil, err
	}
	i8, err := qint8.Quantize(w, 0)
	if err != nil {
		return nil, err
	}
	ternary, err := onebit.QuantizeTernary(w, &onebit.Options{DType: dtypes.Float32})
	if err != nil {
		return nil, err
	}
	scaled, err := onebit.QuantizeTernary(w, &onebit.Options{Scale: true, ScaleAxes: []int{0}})
	if err != nil {
		return nil, err
	}
	return []weight{
		{"dense", w, []string{"W"}},
		{"nf4", n4, []string{"W.packed", "W.absmax"}},
		{"int8", i8, []string{"W.weight", "W.scale"}},
		{"ternary", ternary, []string{"W.packed"}},
		{"ternary scaled", scaled, []string{"W.packed", "W.scale"}},
	}, nil
}

// shard returns w sharded by spec over m: a quantized array through its WithMeshAndAxis (which
// checks the spec against its layout), a dense tensor unchanged (Exec.WithArgSpecs shards it).
func shard(w any, m *sharding.Mesh, spec sharding.PartitionSpec) (any, error) {
	switch w := w.(type) {
	case *nf4.Array:
		return w.WithMeshAndAxis(m, spec)
	case *qint8.Array:
		return w.WithMeshAndAxis(m, spec)
	case *onebit.Array:
		return w.WithMeshAndAxis(m, spec)
	}
	return w, nil
}

// runLayout places args, prints the shape each device holds of every flattened input (named by
// names), runs e and returns the largest difference from want.
func runLayout(backend backends.Backend, e *mesh.Exec, want *tensors.Tensor, names []string, args ...any) (float64, error) {
	placed, err := e.Place(args...)
	if err != nil {
		return 0, err
	}
	for i, leaf := range placed.Leaves {
		shapes, err := placed.ShardShapes(backend, i)
		if err != nil {
			return 0, err
		}
		fmt.Printf("  %s %s, spec %s:", names[i], leaf.Shape(), placed.Specs[i])
		for d, s := range shapes {
			fmt.Printf(" device %d %v", d, s.Dimensions)
		}
		fmt.Println()
	}
	out, err := e.CallPlaced(placed)
	if err != nil {
		return 0, err
	}
	got := tensors.MustCopyFlatData[float32](out[0].(*tensors.Tensor))
	ref := tensors.MustCopyFlatData[float32](want)
	var diff float64
	for i := range got {
		diff = max(diff, math.Abs(float64(got[i]-ref[i])))
	}
	return diff, nil
}

// matrix fills a [rows, cols] float32 matrix with values in [-1, 1].
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
