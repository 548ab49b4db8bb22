// Package models holds what the real-model packages (models/llama, models/gemma3, models/qwen2,
// models/minilm) share: the Projection hook that every linear layer of their graphs goes through and the Table
// hook of their embedding tables, the Variable list their loaders build before storing anything
// in a context and the LoadOptions of the GGUF loaders, the Quantizer that stores and runs those
// layers and tables in quanta's formats or as their file stores them (Qwix-style rules), the
// decoding blocks of a decoder architecture (a key/value cache whose attention follows the filled
// positions, grouped-query attention, causal and sliding-window masks, RoPE, a Generator with
// sampling and streaming), and the evaluation helpers (Evaluator and NLL for any
// LanguageModel, StridedWindows, Perplexity, Cosine). models/arch picks a GGUF file's
// architecture.
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
// Loaders read one tensor at a time (LoadOptions). A tensor the file stores in a quantized block
// type (GGML's Q4_0 ... Q8_0, the K-quants, IQ4_NL) that the Keeper keeps is read as it is stored,
// a ggml.Array [outDim, inDim] never decoded, and handed to Keeper.KeepKernel or KeepTable. Every
// other linear kernel is decoded, put in (inDim, outDim) layout and passed to a KernelFunc that
// returns the variables to store for it (DenseKernel stores it as the float "weights"; a
// Quantizer's Skip rule in qlayers.OutIn, and its Keep rule, as "weights_t" (outDim, inDim), which
// Dense multiplies as x·Wᵀ: the faster float product at one row). A KernelFunc that quantizes
// returns the quantized components instead and lets the float kernel go, so that a quantized model
// is loaded without the whole float model ever being in memory. Loaders store nothing until every
// tensor has been read and converted (Store checks that no variable exists first), so a failed load
// leaves the context unchanged.
//
// # The file's own formats
//
// A Keep rule stores the tensors it matches as their file stores them; Preset(FilePreset) is one
// Keep rule for every scope, embedding table and head included:
//
//	rules, _ := models.Preset(models.FilePreset)
//	q := models.MustNewQuantizer(rules)
//	model, err := gemma3.LoadGGUF(ctx, f, models.LoadOptions{Kernel: q.Kernel, Table: q.QuantizeTable, Keep: q, Fuse: q.Fuse})
//	model.Projection, model.Table = q.Projection, q.Table
//
// A kept kernel's products are x·Wᵀ through package lowering (the GGML layout, with ggml's values
// bit for bit); a kept table gathers rows of blocks (only the looked-up rows are decoded) and is
// the tied head's x·tableᵀ. Float tensors of the file (F32, F16, BF16) stay float32 under a Keep
// rule. Converting instead (Preset("nf4"), "int8", ...) decodes each tensor and quantizes it.
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
//		{Scope: ".*", Config: quanta.Config{Type: quanta.NF4}, Layout: qlayers.OutIn},
//	})
//	model, err := llama.LoadGGUF(ctx, f, llama.LoadOptions{LoadOptions: models.LoadOptions{Kernel: q.Kernel}})
//	err = q.CheckMatched() // a rule that converted nothing (a misspelt scope) is an error
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
// # Embedding tables and tied heads
//
// A model reads its token-embedding table through a Table hook (DenseTable by default: the
// float variable TableName, "embeddings"), looks rows up with qlayers.Lookup and, when the output
// head is tied to the table, computes the logits with qlayers.TiedHead (x·tableᵀ, the table never
// transposed).
// Quantizer.QuantizeTable (a loader's TableFunc) stores a table in NF4 (blocks along the row) or
// int8 (a scale per row) when a rule matches its scope, and Quantizer.KeepTable keeps a table as
// its file stores it; Quantizer.Table rebuilds the quantized array, whose row gather keeps it
// packed (only the looked-up rows are decoded) and whose head product goes through package
// lowering, i.e. quanta's kernels, in the x·Wᵀ layout a table [vocab, dim] already has. TableRule
// gives the rule of a table format ("file", "f32", "int8", "nf4"); the converting presets keep the
// table float (a Skip rule for "/token_embd"), so a quantized head is a choice.
//
// # Fused projections
//
// A loader may store several projections that read the same input (a block's q, k and v; gate
// and up) as one kernel concatenated along the output axis, so that one product reads all of
// them; the model slices the output. It asks its FuseFunc first: Quantizer.Fuse accepts a group
// only when one rule covers all of it and the format quantizes each output channel on its own
// (float, NF4 without double quantization in the OutIn layout or with whole blocks per part,
// int8 in OutIn, binary in InOut, or kept as stored), so that the fused products are the separate
// ones bit for bit (a float product of another width may round differently in XLA). Parts kept as
// stored fuse only when the file stores them all in one block type: their rows of blocks are read
// one after the other into the fused array.
//
// # Decoding
//
// A decoder architecture implements Decoder: its DecodeSpec and a Step graph over a KVCache. A
// GGUF decoder's hyper-parameters start with a DecoderConfig, which gives the DecodeSpec.
// The cache view writes each step's keys and values at their positions (KVCache.Update,
// in place where the backend has DynamicUpdateSlice) and gives the attention the cache's first
// Window positions only, with the causal Mask over them; GroupedAttention, RoPETables (with
// frequency factors, RoPETablesWithFactors) and ApplyRoPE are the attention's parts. A Generator
// drives Step: the prompt in one step (padded to a power of two from 16), then one step per
// token, with one compiled graph per attention
// window. The windows double from GeneratorOptions.MinWindow (64) to MaxLen, so a step's cost
// follows the filled positions; the cache tensors either grow with the window (GrowCache, the
// default: memory follows the filled positions too) or hold MaxLen positions from the start
// (FullCache); they hold float32, or float16 (GeneratorOptions.CacheDType, llama.cpp's default
// cache type), which halves the bytes each step's attention reads and rounds each key and value
// to the nearest half. Generate returns the tokens, Stream yields them as they are chosen; Sampling
// picks them (greedy by default; temperature, top-k, top-p, repetition penalty and a seed, the
// same seed giving the same tokens) and GenerateOptions stop at a token (EOS) or a count. Stats
// gives the prompt and decoding rates with the compilations timed apart.
//
// # Evaluation
//
// A LanguageModel is a Decoder that also runs a whole sequence (Forward). NLL gives each token's
// negative log-likelihood from one Forward pass, with the softmax in float64 over the float32
// logits (the reference harness's definition); an Evaluator runs it over windows of a token
// sequence. StridedWindows gives Hugging Face's strided perplexity windows (the reference
// harness's rule: 1024 tokens, windows of 513 every 512), Perplexity the exponential of the mean
// NLL, Cosine the cosine similarity of two embeddings.
//
// # Errors
//
// NewQuantizer returns an error for a bad pattern, Config or layout (or a rule both Skip and
// Keep), CheckMatched (after a load) for a rule other than Skip that was the first to match no
// scope, listing the scopes stored (a Quantizer learns the model's scopes only as a loader asks
// of them, so it cannot tell earlier), Kernel for a kernel the format cannot hold (naming the scope), QuantizeTable for a table
// rule that cannot serve a lookup, KeepKernel and KeepTable for a scope no Keep rule matches or an
// array that is not rank 2, Store for a variable that exists or repeats; NewGenerator, Generate and Stream for
// options out of range and prompts that do not fit (naming the field) and for NaN logits, Evaluator.NLL
// for ids outside the vocabulary, windows that do not fit the ids or the context length and a NaN
// NLL (logits not finite, naming the id),
// Sampling.Validate for a setting that is not finite or out of range. The graph functions (Projection,
// Quantizer.Projection, Quantizer.Table, NewKVCache, GroupedAttention, ...) panic with messages
// naming the scope and shapes.
package models
