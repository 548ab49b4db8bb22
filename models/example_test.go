package models_test

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/qlayers"
	"github.com/quanta-ml/quanta/runtime"
)

// Rules choose each projection's format as a loader hands over its kernels: here the output head
// stays float and every other projection is NF4 with blocks along in (bitsandbytes' layout). A
// real model is loaded with llama.LoadOptions{LoadOptions: models.LoadOptions{Kernel: q.Kernel}}
// and run with model.Projection = q.Projection; this example plays the loader for one kernel.
func ExampleQuantizer() {
	q := models.MustNewQuantizer([]models.Rule{
		{Scope: "/lm_head", Skip: true},
		{Scope: ".*", Config: quanta.Config{Type: quanta.NF4}, Layout: qlayers.OutIn},
	})
	kernel := make([][]float32, 128) // (inDim, outDim)
	for i := range kernel {
		kernel[i] = make([]float32, 8)
		for j := range kernel[i] {
			kernel[i][j] = float32((i*7+j*3)%11-5) / 10
		}
	}
	vars, err := q.Kernel("/layer_0/attn_q", tensors.FromValue(kernel))
	if err != nil {
		panic(err)
	}
	ctx := context.New()
	if err := models.Store(ctx, vars); err != nil {
		panic(err)
	}
	x := [][]float32{make([]float32, 128)}
	x[0][0] = 1 // picks the first row of the kernel
	y := context.MustExecOnce(runtime.MustBackend(), ctx.Reuse(), func(ctx *context.Context, x *graph.Node) *graph.Node {
		return q.Projection(ctx.In("layer_0"), "attn_q", x, 8, false)
	}, x)
	// The first row, [-0.5 -0.2 0.1 0.4 -0.4 -0.1 0.2 0.5], in blocks of absmax 0.5: each value/0.5
	// rounds to the nearest NF4 value (-0.4 → -0.3949, 0.2 → 0.1609, 0.8 → 0.7230, ...).
	fmt.Printf("%.2f\n", y.Value())
	fmt.Print(q.Report())
	// Output:
	// [[-0.50 -0.20 0.08 0.36 -0.35 -0.09 0.22 0.50]]
	// scope                            shape          format     bytes before  bytes after
	// /layer_0/attn_q/dense            [128 8]        nf4/64             4096          576
	// total                                                              4096          576  (7.1x smaller)
}
