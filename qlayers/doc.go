// Package qlayers holds quantized layers for GoMLX context-based models: Dense, a drop-in for
// layers.Dense whose kernel is quantized (nf4, int8, binary or ternary, as quanta.Config says),
// and QuantizeContext, which converts the dense kernels of a trained float context into stored
// quantized components.
//
// # Workflow
//
//  1. Train (or load) a model built with layers.Dense or Dense. With Dense in a training graph,
//     the forward pass sees the quantized kernel and the gradient reaches the float master
//     weights through the straight-through estimator (quantization-aware training, QAT).
//  2. QuantizeContext(ctx, rules, opts): for each dense kernel, the first Rule whose scope
//     pattern matches decides its format (as Qwix's rules); the components are stored as
//     non-trainable variables beside the kernel, the format in a context parameter, and the float
//     kernel is deleted unless Options.KeepFloat. The Report gives the bytes before and after.
//  3. Run the same model in inference: Dense rebuilds the implicit array from the stored
//     components and multiplies by it with the format's fused product; no dense float kernel is
//     stored or built. The inference graph reads variables that exist, so build it on
//     ctx.Reuse() (as GoMLX's inference does): a checked context panics on variables that exist.
//     GoMLX checkpoints save and load the components and the format.
//
// # Variables
//
// In scope ctx.In("dense"), as layers.Dense: "weights" (inputDim, outDim) and "biases" (outDim) in
// the input's dtype. QuantizeContext adds "weights.q0", "weights.q1", ... — the components of the
// format's implicit array, in its Components() order — and the parameter FormatParam:
//
//   - "nf4/64": packed uint8 (inputDim, ceil(outDim/64), 32), absmax (inputDim, ceil(outDim/64))
//     in the kernel's dtype: blocks along the output axis (nf4.Quantize).
//   - "int8": int8 (inputDim, outDim), scale (inputDim, 1) in the kernel's dtype: per input row, the
//     int8 package's default axis (int8.Quantize).
//   - "binary", "ternary" (no scale), "binary/scaled", "ternary/scaled" (with
//     Config.Scaled), "ternary/bitnet" (Config.BitNet): 2-bit codes, 4 rows a byte, uint8
//     (inputDim/4, outDim), plus for the scaled ones a float32 scale (1, outDim) = mean|w| per
//     output column. Without a scale a layer of ±1 weights loses its magnitude, so Scaled is
//     recommended for layers. inputDim must be a multiple of 4.
//
// Kernels materialize, in training and in the fake-quantized inference, as
// quanta.StraightThrough gives them, in the kernel's dtype.
//
// # Errors
//
// QuantizeContext returns an error, leaving the context unchanged, for a bad rule (pattern or
// Config) and for a kernel its format cannot hold (e.g. binary with inputDim not a multiple of 4);
// the message names the variable. Dense, a graph-building function, panics with a message naming
// the scope and shapes for an invalid Config or input, stored components that do not fit the
// recorded format, an unreadable FormatParam, and training on a context whose float kernel was
// deleted.
package qlayers
