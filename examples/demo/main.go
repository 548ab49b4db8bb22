// Command demo runs quanta end to end on the backend that package runtime picks.
//
// For now it runs a dense matmul graph and compares it with the same product computed in
// Go; it grows with the format packages into: quantize a weight, run the quantized matmul,
// print its error against the dense one.
package main

import (
	"fmt"
	"math"
	"os"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/runtime"
)

func main() {
	if err := demo(); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %+v\n", err)
		os.Exit(1)
	}
}

func demo() error {
	backend, err := runtime.Backend()
	if err != nil {
		return err
	}
	info, err := runtime.Report()
	if err != nil {
		return err
	}
	fmt.Print(info)

	// y = x · w, with x [m, k] and w [k, n].
	const m, k, n = 4, 64, 8
	x, w := make([][]float32, m), make([][]float32, k)
	for i := range x {
		x[i] = make([]float32, k)
		for j := range x[i] {
			x[i][j] = float32(math.Sin(float64(i*k + j)))
		}
	}
	for i := range w {
		w[i] = make([]float32, n)
		for j := range w[i] {
			w[i][j] = float32(math.Cos(float64(i*n+j))) / 8
		}
	}
	y, err := graph.ExecOnce(backend, func(x, w *graph.Node) *graph.Node { return graph.MatMul(x, w) }, x, w)
	if err != nil {
		return err
	}
	got := y.Value().([][]float32)
	var maxErr float64
	for i := range m {
		for j := range n {
			var want float64
			for l := range k {
				want += float64(x[i][l]) * float64(w[l][j])
			}
			maxErr = max(maxErr, math.Abs(float64(got[i][j])-want))
		}
	}
	fmt.Printf("\ndense matmul [%d,%d]x[%d,%d] on %s: max |error| vs float64 reference = %.2g\n", m, k, k, n, info.Config, maxErr)
	fmt.Println("quantized formats (nf4, int8, binary/ternary): in progress; this demo will quantize w and compare.")
	if maxErr > 1e-4 {
		return errors.Errorf("dense matmul error %.2g is larger than 1e-4", maxErr)
	}
	return nil
}
