// Package qlayers holds quantized layers for GoMLX context-based models: Dense, a drop-in for
// layers.Dense whose kernel is quantized (nf4, int8, binary or ternary, as quanta.Config says),
// Embedding, a drop-in for layers.Embedding whose table may be quantized (with TiedHead for an
// output head tied to it), and QuantizeContext, which converts the dense kernels (and, with
// Options.Tables, the embedding tables) of a trained float context into stored quantized
// components.
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
//   - "nf4-dq/64" (Config.DoubleQuant): the same packed codes, the absmax double-quantized: uint8
//     codes (inputDim, ceil(outDim/64)), float32 nested absmax (ceil(codes/256)), float32 offset ().
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
// An embedding table is "embeddings" (vocabSize, dim) in the layer's own scope, as
// layers.Embedding keeps it; QuantizeContext with Options.Tables stores it as "embeddings.q0",
// ... and FormatParam in that scope, in NF4 (blocks along each row) or int8 (a scale per row):
// the formats whose rows can be gathered packed (TableFormatError). Embedding (Lookup) then
// gathers the rows' packed bytes and decodes only them; TiedHead computes x·tableᵀ through
// package lowering (the x·Wᵀ layout), never building the dense table. Training reads the float
// table (Embedding has no straight-through path).
//
// # LoRA and QLoRA
//
// LoRADense is Dense with a frozen base and trainable rank-r adapters, y = x·W + (α/r)·(x·A)·B + b
// (LoRA); with the base stored as "nf4-dq/64" it is QLoRA. Extra variables in the "dense" scope:
// "lora_a" (inputDim, r), uniform in ±1/√inputDim, and "lora_b" (r, outDim), zero at first, both
// trainable, and the parameters LoRAScaleParam (α/r) and LoRADropoutParam. While training, a
// LoRA's Dropout (PEFT's lora_dropout) drops elements of the adapters' input x, as torch's
// Dropout before lora_A. The base (stored components, or the float
// kernel for full-precision LoRA) and the bias are non-trainable: an optimizer neither computes
// their gradients nor keeps state for them, while the gradient flows through the base's fused
// product to the layer's input.
//
//   - StoreBase puts a quantized kernel from elsewhere (a bitsandbytes Linear4bit weight from
//     package bnb, torch's (outDim, inputDim) layout, flattened blocks included) in a layer's
//     scope as its base; KernelLayoutParam records the layout ("out_in": y = x·Wᵀ). Base gets it
//     back as a host array. Both share the component tensors with the context's variables (a
//     base is large: no copy is made), so Delete such an array only with the context.
//   - MergeLoRA folds the adapters into the base: densely (the float kernel "weights" holds the
//     merged weight, LoRAMergedParam is set; UnmergeLoRA undoes it) or re-quantized into the
//     base's format, the adapters removed (MergeOptions.Requantize).
//   - SaveAdapters and LoadAdapters write and read the adapters alone as PEFT does
//     (adapter_model.safetensors with base_model.model.<module>.lora_A.weight [r, in] and
//     lora_B.weight [out, r], adapter_config.json with r, lora_alpha and lora_dropout), each file replaced
//     whole; AdapterOptions maps scopes to module names.
//
// # Errors
//
// QuantizeContext, StoreBase, Base, MergeLoRA, UnmergeLoRA, SaveAdapters and LoadAdapters return
// an error for a nil context, and otherwise an error leaving the context unchanged: QuantizeContext for a bad rule (pattern or Config), a
// rule that is the first to match no kernel (a misspelt scope: the message lists the scopes) and for
// a kernel its format cannot hold (e.g. binary with inputDim not a multiple of 4), the others for
// arrays, layouts other than InOut and OutIn, files or adapters that do not fit the layers; the
// message names the variable or scope. An adapter file is checked before its tensors are read: r
// from 1 to 2^31 − 1, a finite positive lora_alpha and a lora_dropout from 0 to 1 (recorded;
// LoRADense drops its input as its LoRA's Dropout says) in adapter_config.json, each lora_A with its
// lora_B and no other tensor (PEFT's modules_to_save copies, embedding adapters, DoRA magnitudes
// and LoRA biases are refused, not skipped), float matrices of rank r (F16, BF16 and F64 are
// converted), and a recorded format's
// block size is checked before anything is sized by it.
// Dense and LoRADense, graph-building functions, panic with a message naming the scope and shapes
// for an invalid Config, LoRA or input (Dense: a binary or ternary Config on an input dimension
// that is not a multiple of 4, unless components are stored), stored components that do not fit
// the recorded format, an unreadable FormatParam, adapters of another rank or recorded scale, and
// (Dense) training on a context whose float kernel was deleted.
package qlayers
