package qlayers

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta"
)

// LoRAProjection returns a projection hook of the real-model loaders' shape (models.Projection:
// the linear layer called name, y = x·W (+ b) over the last axis of x) that runs LoRADense in
// ctx.In(name) with cfg and lora: every projection of a model built with it gets adapters on its
// frozen (quantized) kernel.
func LoRAProjection(cfg quanta.Config, lora LoRA) func(ctx *context.Context, name string, x *graph.Node, outDim int, useBias bool) *graph.Node {
	return func(ctx *context.Context, name string, x *graph.Node, outDim int, useBias bool) *graph.Node {
		return LoRADense(ctx.In(name), x, useBias, outDim, cfg, lora)
	}
}
