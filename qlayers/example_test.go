package qlayers_test

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/qlayers"
	"github.com/quanta-ml/quanta/runtime"
)

// A two-layer model: QuantizeContext stores its hidden kernel as NF4 (the output layer matches a
// Skip rule first and stays float), then the same model function runs on the quantized kernel.
func Example() {
	backend := runtime.MustBackend()
	cfg := quanta.Config{Type: quanta.NF4}
	model := func(ctx *context.Context, x *graph.Node) *graph.Node {
		h := graph.Tanh(qlayers.Dense(ctx.In("hidden"), x, true, 128, cfg))
		return qlayers.Dense(ctx.In("output"), h, true, 4, cfg)
	}
	ctx := context.New()
	ctx.SetParam(context.ParamInitialSeed, int64(1))
	x := [][]float32{{0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8}}

	// Inference on the float context creates (and initializes) the variables; it uses the
	// fake-quantized kernels, the values training with Dense sees.
	before := context.MustExecOnce(backend, ctx, model, x)

	report, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{
		{Scope: "/output/.*", Skip: true},
		{Scope: ".*", Config: cfg},
	}, qlayers.Options{})
	if err != nil {
		panic(err)
	}
	fmt.Print(report)

	after := context.MustExecOnce(backend, ctx.Reuse(), model, x)
	fmt.Println("same logits after the conversion:", fmt.Sprintf("%.4f", before.Value()) == fmt.Sprintf("%.4f", after.Value()))
	// Output:
	// scope                            shape          format     bytes before  bytes after
	// /hidden/dense                    [8 128]        nf4/64             4096          576
	// /output/dense                    [128 4]        float              2048         2048
	// total                                                              6144         2624  (2.3x smaller)
	// same logits after the conversion: true
}
