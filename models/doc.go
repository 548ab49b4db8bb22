// Package models holds what the real-model packages (models/llama, models/minilm) share: the
// Projection hook that every linear layer of their graphs goes through, and the Variable list
// their loaders build before storing anything in a context.
//
// # Projections
//
// A model built by these packages never multiplies by a weight matrix itself: each linear layer
// calls the model's Projection with its scope and name. The default, Dense, is GoMLX's
// layers.Dense: float kernel "weights" (inDim, outDim) and "biases" (outDim) in scope
// ctx.In(name).In("dense"). quanta's qlayers.Dense uses the same scope and names, so a context
// loaded here can be converted by qlayers.QuantizeContext and run by a Projection that calls
// qlayers.Dense, with no change to the model code:
//
//	model.Projection = func(ctx *context.Context, name string, x *graph.Node, outDim int, useBias bool) *graph.Node {
//		return qlayers.Dense(ctx.In(name), x, useBias, outDim, quanta.Config{Type: quanta.NF4})
//	}
//
// # Loading
//
// Loaders decode one tensor at a time and pass every linear kernel, already in (inDim, outDim)
// layout, to a KernelFunc that returns the variables to store for it (DenseKernel stores it as
// the float "weights"). A KernelFunc that quantizes returns the quantized components instead and
// lets the float kernel go, so that a quantized model is loaded without the whole float model
// ever being in memory. Loaders store nothing until every tensor has been read and converted
// (Store checks that no variable exists first), so a failed load leaves the context unchanged.
package models
