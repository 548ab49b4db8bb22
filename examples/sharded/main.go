// Command sharded runs a matmul x @ W over a mesh of 4 devices with W sharded column-parallel
// (output axis) and row-parallel (contracting axis, XLA adding the all-reduce), and prints the
// mesh, the shape each device holds of every input, and the largest difference from the
// single-device result.
//
// On XLA CPU it asks for 4 virtual devices (QUANTA_CPU_DEVICES=4) unless QUANTA_CPU_DEVICES is
// set; with fewer devices (e.g. the pure-Go backend) it prints why it cannot run and exits 1.
package main

import (
	"fmt"
	"math"
	"os"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/mesh"
	"github.com/quanta-ml/quanta/runtime"
)

const numDevices = 4

func main() {
	if _, found := os.LookupEnv(runtime.CPUDevicesEnv); !found {
		_ = os.Setenv(runtime.CPUDevicesEnv, fmt.Sprint(numDevices))
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "sharded: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	backend, err := runtime.Backend()
	if err != nil {
		return err
	}
	fmt.Printf("backend: %s, %d devices\n", backend.Name(), backend.NumDevices())
	m, err := mesh.NewMesh([]string{"model"}, []int{numDevices})
	if err != nil {
		return err
	}
	if err := m.CheckDevices(backend); err != nil {
		return err
	}
	fmt.Printf("mesh: %s\n", m)

	const rows, k, n = 4, 256, 128
	x, w := tensors.FromValue(matrix(rows, k, 0)), tensors.FromValue(matrix(k, n, 1))
	matmul := func(x, w *graph.Node) *graph.Node { return graph.MatMul(x, w) }
	want, err := graph.ExecOnce(backend, matmul, x, w)
	if err != nil {
		return err
	}
	for _, layout := range []struct {
		name         string
		xSpec, wSpec mesh.PartitionSpec
	}{
		{"column parallel", nil, mesh.PartitionSpec{nil, {"model"}}},
		{"row parallel", mesh.PartitionSpec{nil, {"model"}}, mesh.PartitionSpec{{"model"}, nil}},
	} {
		fmt.Printf("\n%s: x %s, W %s\n", layout.name, layout.xSpec, layout.wSpec)
		e, err := mesh.NewExec(backend, m, matmul)
		if err != nil {
			return err
		}
		diff, err := runLayout(backend, e.WithArgSpecs(layout.xSpec, layout.wSpec), want, []string{"x", "W"}, x, w)
		e.Finalize()
		if err != nil {
			return errors.WithMessage(err, layout.name)
		}
		fmt.Printf("  max |sharded - single device| = %.3g\n", diff)
	}
	return nil
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
