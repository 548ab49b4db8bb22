// Package models holds what the real-model packages (models/llama, models/minilm) share: the
// Projection hook that every linear layer of their graphs goes through, the Variable list
// their loaders build before storing anything in a context, the Quantizer that stores and runs
// those layers in quanta's formats as Qwix-style rules say, and the evaluation helpers
// (StridedWindows, Perplexity, Cosine).
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
//
// # Quantized models
//
// A Quantizer holds an ordered list of Rules, each a regular expression fully matched against a
// projection's scope ("/layer_3/ffn_down", "/layer_0/query"), a quanta.Config and a KernelLayout;
// the first match wins, Skip keeps a projection float, and no match means float (Qwix's rules, as
// qlayers.QuantizeContext reads them):
//
//	q := models.MustNewQuantizer([]models.Rule{
//		{Scope: "/lm_head", Skip: true},
//		{Scope: ".*", Config: quanta.Config{Type: quanta.NF4}, Layout: models.OutIn},
//	})
//	model, err := llama.LoadGGUF(ctx, f, llama.LoadOptions{Kernel: q.Kernel})
//	model.Projection = q.Projection
//
// q.Kernel quantizes each kernel as the loader decodes it, so a quantized model never holds the
// float model whole; the float embeddings and norms are loaded as they are. The layout decides
// the axis of the format's blocks and scales: InOut stores (inDim, outDim) and computes x·W,
// as qlayers.Dense; OutIn stores Wᵀ (outDim, inDim) and computes x·Wᵀ, PyTorch's and
// bitsandbytes' layout, which puts NF4 blocks along in (bitsandbytes' quantize_4bit of a Linear
// weight) and gives int8 one scale per output channel. The components are stored under
// qlayers' names ("weights.q0", ...) and each product goes through implicitarray.DotGeneral, so
// package lowering picks the formulation. Preset returns the named rule sets of the examples and
// the evaluation table (f32, nf4, nf4-out, int8, int8-in, ternary[-scaled], binary[-scaled]).
//
// # Evaluation
//
// StridedWindows gives Hugging Face's strided perplexity windows (the reference harness's rule:
// 1024 tokens, windows of 513 every 512), Perplexity the exponential of the mean NLL, Cosine the
// cosine similarity of two embeddings; models/llama's Evaluator computes the NLLs.
//
// # Errors
//
// NewQuantizer returns an error for a bad pattern, Config or layout, Kernel for a kernel the
// format cannot hold (naming the scope), Store for a variable that exists or repeats. The graph
// functions (Projection, Quantizer.Projection) panic with messages naming the scope and shapes.
package models
