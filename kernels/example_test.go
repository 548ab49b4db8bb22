package kernels_test

import (
	"fmt"
	"log"

	"github.com/gomlx/gomlx/backends"
	_ "github.com/gomlx/gomlx/backends/default"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/kernels"
	"github.com/quanta-ml/quanta/nf4"
)

// A GoMLX program that creates its backend with backends.New gets the kernels by importing this
// package: the first quantized product built on the backend attaches them. Attach, called
// directly, says whether they serve the backend.
func Example() {
	backend := backends.MustNew()
	if _, err := kernels.Attach(backend); err != nil {
		log.Printf("quantized products run without quanta's kernels: %v", err)
	}
	weight := tensors.FromFlatDataAndDimensions(make([]float32, 4096*4096), 4096, 4096)
	w := nf4.MustQuantize(weight, 64)
	exec := implicitarray.MustNewExec(backend, func(x *graph.Node, w *nf4.Array) *graph.Node {
		return implicitarray.Materialize(implicitarray.MatMul(x, w)) // a kernel call on XLA CPU
	})
	y := exec.MustCall1(tensors.FromFlatDataAndDimensions(make([]float32, 4096), 1, 4096), w)
	fmt.Println(y.(*tensors.Tensor).Shape())
}
