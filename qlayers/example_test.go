package qlayers_test

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
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

// QLoRA in miniature: a float layer is quantized to NF4 with double-quantized absmax, then
// LoRADense trains rank-2 adapters on the frozen base with Adam; only the adapters are trainable.
func ExampleLoRADense() {
	backend := runtime.MustBackend()
	nf4dq := quanta.Config{DoubleQuant: true}
	lora := qlayers.LoRA{Rank: 2, Alpha: 4}
	model := func(ctx *context.Context, x *graph.Node) *graph.Node {
		return qlayers.LoRADense(ctx.In("proj"), x, false, 64, nf4dq, lora)
	}
	ctx := context.New()
	ctx.SetParam(context.ParamInitialSeed, int64(1))
	x := make([][]float32, 8)
	for i := range x {
		x[i] = make([]float32, 64)
		x[i][i] = 1
	}
	context.MustExecOnce(backend, ctx, model, x) // creates the base kernel and the adapters
	report, err := qlayers.QuantizeContext(ctx, []qlayers.Rule{{Scope: ".*", Config: nf4dq}}, qlayers.Options{})
	if err != nil {
		panic(err)
	}
	fmt.Print(report)

	opt := optimizers.Adam().LearningRate(0.05).Done()
	step := context.MustNewExec(backend, ctx.Reuse(), func(ctx *context.Context, x *graph.Node) *graph.Node {
		ctx.SetTraining(x.Graph(), true)
		y := model(ctx, x)
		loss := graph.ReduceAllMean(graph.Square(graph.Sub(y, graph.OnesLike(y)))) // learn to output ones
		opt.UpdateGraph(ctx, x.Graph(), loss)
		return loss
	})
	first := step.MustExec(x)[0].Value().(float32)
	var last float32
	for range 50 {
		last = step.MustExec(x)[0].Value().(float32)
	}
	fmt.Println("loss decreased:", last < first/2)
	for v := range ctx.IterVariables() {
		if v.Trainable {
			fmt.Println("trainable:", v.ScopeAndName(), v.Shape())
		}
	}
	// Output:
	// scope                            shape          format     bytes before  bytes after
	// /proj/dense                      [64 64]        nf4-dq/64         16384         2120
	// total                                                             16384         2120  (7.7x smaller)
	// loss decreased: true
	// trainable: /proj/dense/lora_a (Float32)[64 2]
	// trainable: /proj/dense/lora_b (Float32)[2 64]
}
