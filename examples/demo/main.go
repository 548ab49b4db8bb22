// Command demo runs quanta end to end on the backend that package runtime picks: it quantizes a
// weight in every format, multiplies activations by it with the fused quantized matmul (the
// weight is never materialized as a dense array), and prints the error against the dense product
// and the bytes saved. `make demo` runs it, then a short quantization-aware training run.
package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/runtime"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: demo (no flags; GOMLX_BACKEND chooses the backend)")
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := demo(); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

// gaussian returns a rows×cols float32 tensor of N(0, std²) values.
func gaussian(r *rand.Rand, rows, cols int, std float64) *tensors.Tensor {
	data := make([]float32, rows*cols)
	for i := range data {
		data[i] = float32(r.NormFloat64() * std)
	}
	return tensors.FromFlatDataAndDimensions(data, rows, cols)
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

	const m, k, n = 4, 512, 256
	r := rand.New(rand.NewPCG(1, 2))
	x, w := gaussian(r, m, k, 1), gaussian(r, k, n, 1/math.Sqrt(k))

	// The dense reference, and the same product with each quantized weight: one Exec serves every
	// format (the graph is compiled once per format and shape).
	dense := graph.MustNewExec(backend, graph.MatMul).MustExec1(x, w)
	e := implicitarray.MustNewExec(backend, func(x *graph.Node, w implicitarray.Array) *graph.Node {
		return implicitarray.Materialize(implicitarray.MatMul(x, w))
	})
	fmt.Printf("\ny = x·W with x [%d,%d] and W [%d,%d] float32 (%d bytes)\n", m, k, k, n, w.Shape().Memory())
	fmt.Printf("%-16s %12s %10s %22s %16s\n", "format", "weight bytes", "ratio", "rel. error vs dense", "materialized W?")
	for _, cfg := range []quanta.Config{
		{Type: quanta.NF4},
		{Type: quanta.Int8},
		{Type: quanta.Ternary, Scaled: true},
		{Type: quanta.Binary, Scaled: true},
	} {
		q, err := quanta.Quantize(w, cfg)
		if err != nil {
			return err
		}
		a := q.(implicitarray.Array)
		implicitarray.ResetStats()
		y, err := e.Call1(x, a)
		if err != nil {
			return err
		}
		relErr := relativeError(y.(*tensors.Tensor), dense)
		materialized := implicitarray.CurrentStats().Materializations[implicitarray.TypeName(a)] > 0
		name := cfg.Type.String()
		if cfg.Scaled {
			name += " (scaled)"
		}
		bytes := componentBytes(a)
		fmt.Printf("%-16s %12d %9.1fx %22.4f %16v\n", name, bytes, float64(w.Shape().Memory())/float64(bytes), relErr, materialized)
		if materialized {
			return errors.Errorf("%s: the fused product materialized the weight", name)
		}
	}
	return nil
}

// relativeError is ||got - want|| / ||want|| (Frobenius).
func relativeError(got, want *tensors.Tensor) float64 {
	g, w := got.Value().([][]float32), want.Value().([][]float32)
	var num, den float64
	for i := range w {
		for j := range w[i] {
			d := float64(g[i][j]) - float64(w[i][j])
			num += d * d
			den += float64(w[i][j]) * float64(w[i][j])
		}
	}
	return math.Sqrt(num / den)
}

// componentBytes is the memory of an implicit array's stored components.
func componentBytes(a implicitarray.Array) int {
	var total int
	for _, c := range a.Components() {
		total += int(c.Shape().Memory())
	}
	return total
}
