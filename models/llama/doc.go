// Package llama is a Llama-architecture decoder in GoMLX (SmolLM2 and the other "llama" GGUF
// models): RMSNorm, rotary position embeddings, grouped-query attention with a key/value cache,
// SwiGLU, tied or separate output head; a GGUF loader that keeps the file's block types as they
// are or converts them. It is a models.LanguageModel: models.Generator generates with it
// (sampling, streaming), models.Evaluator scores it.
//
// # Graph
//
// Model.Forward runs a whole sequence (causal attention, no cache), Model.Step runs a chunk of
// tokens against a models.KVCache (prefill and decoding). The block is Hugging Face's
// LlamaDecoderLayer: x += o(attn(RMSNorm(x))), x += down(silu(gate(h)) · up(h)) with
// h = RMSNorm(x); attention scores are scaled by 1/sqrt(HeadDim), query head h reads key/value
// head h/(Heads/KVHeads) (repeat_kv's order). Every linear layer goes through Model.Projection and
// the embedding table through Model.Table (see package models): replacing them substitutes
// quantized products and lookups without touching the model code. The output head is the
// embedding table when the embeddings are tied (SmolLM2), a product with the table's last axis
// that never transposes it in memory. With FusedQKV (FusedGateUp) the block computes q, k and v
// (gate and up) with one projection, attn_qkv (ffn_gate_up), and slices its output. With QKVBias
// the q, k and v projections add a bias (/layer_<i>/attn_q/dense/biases [Heads·HeadDim], ...):
// Qwen2's block, which models/qwen2 loads into this Model.
//
// # Variables
//
// In the context, float32 unless kept as stored (LoadGGUF's layout; the graph creates them with
// the context's initializers if absent, which tests use):
//
//	/token_embd/embeddings                  [VocabSize, Dim]
//	/layer_<i>/attn_norm/rms_norm/scale     [Dim]
//	/layer_<i>/attn_q/dense/weights         [Dim, Heads·HeadDim]
//	/layer_<i>/attn_k/dense/weights         [Dim, KVHeads·HeadDim]   (also attn_v)
//	/layer_<i>/attn_output/dense/weights    [Heads·HeadDim, Dim]
//	/layer_<i>/ffn_norm/rms_norm/scale      [Dim]
//	/layer_<i>/ffn_gate/dense/weights       [Dim, FFNDim]            (also ffn_up)
//	/layer_<i>/ffn_down/dense/weights       [FFNDim, Dim]
//	/output_norm/rms_norm/scale             [Dim]
//	/lm_head/dense/weights                  [Dim, VocabSize]         (untied models only)
//
// Loaded with LoadOptions.Fuse, /layer_<i>/attn_qkv/dense/weights [Dim, (Heads+2·KVHeads)·HeadDim]
// (q, k, v side by side) and /layer_<i>/ffn_gate_up/dense/weights [Dim, 2·FFNDim] replace the
// parts; through a models.Quantizer the kernels and the table are stored as its components
// ("weights.q0", ..., "embeddings.q0", ...), quantized or, under a Keep rule, the file's blocks
// (a kernel [out, in] in GGUF's row order, q and k rows put back in Hugging Face's order). A float
// kernel under a Keep rule or a Skip rule in qlayers.OutIn (the "f32" preset, the presets' head)
// is "weights_t", transposed: [out, in].
//
// # RoPE and the q/k row order
//
// GGUF kernels are stored [out][in] (GGML dims [in, out]). llama.cpp's converter permutes the
// rows of attn_q and attn_k within each head so that its "normal" RoPE can rotate adjacent pairs
// (x[2i], x[2i+1]); Hugging Face's Llama rotates the halves (x[i], x[i+HeadDim/2]). LoadGGUF puts
// the rows back in Hugging Face's order and the model rotates halves (so the context matches a
// transformers checkpoint, and per-layer comparisons with it hold); LoadOptions.RotateAdjacent
// keeps GGUF's order and rotates adjacent pairs instead. Both give the same attention (tested).
// Angles are position · base^(-2i/HeadDim), with base and the RMSNorm epsilon from the metadata,
// divided by pair i's frequency factor where the file has Llama 3.1's rope_freqs tensor (Llama
// 3.1 and later: 3.2, 3.3; llama.cpp's converter computes the factors from the checkpoint's
// "llama3" rope scaling): one F32 factor per pair, shared by every layer, which LoadGGUF reads
// into Model.RoPEFreqFactors and the model applies as llama.cpp does (TestLlamaCppRoPEFreqs
// compares the logits with llama.cpp's).
//
// # Cache
//
// Step writes its chunk's keys and values through the models.KVCache it is given (per layer,
// keys then values [batch, KVHeads, length, HeadDim]) and attends over the cache's window with
// its causal mask, so that one compiled graph per window serves every decoding step and the
// cost follows the filled positions (see models.Generator).
//
// # Evaluation
//
// A Model is a models.LanguageModel: models.Evaluator scores it (models.NLL over windows of a
// token sequence, models.StridedWindows) for perplexity. Through a models.Quantizer q, a model
// loads with LoadOptions' Kernel = q.Kernel (Table = q.QuantizeTable for a quantized table and
// head, Keep = q to keep the tensors the file stores in block types as they are, Fuse = q.Fuse
// for fused products) and runs with Projection = q.Projection (Table = q.Table); models/arch does
// the wiring for any architecture.
//
// # Errors
//
// LoadGGUF returns errors (wrapping gguf's ErrNotFound/ErrCorrupt/ErrUnsupported where they
// apply) for a non-llama file, unsupported hyper-parameters (RoPE scaling in the metadata: a
// scaling type other than "none", or without one a factor other than 0 or 1; partial rotary),
// missing tensors, tensors it would not read (a block count below the file's blocks, a feature it
// does not implement, such as LongRoPE's rope_factors_long/short), shapes that disagree with the
// metadata, undecodable types, and a rope_freqs tensor llama.cpp would not run (not F32, not
// HeadDim/2 factors, a factor not finite and positive) or that would give NaN logits (a factor
// below models.MinRoPEFactor, whose angles overflow float32); all are checked before any tensor is
// decoded (rope_freqs' factors before the others), and nothing is stored unless everything loads.
// Graph methods panic with messages naming the shapes they accept.
//
// Hyper-parameters are checked before they are used, each error naming the GGUF key, its value
// and what is accepted (ConfigFromGGUF): counts and widths from 1 to 2^31 − 1; no more blocks than
// the file has tensors for, so that nothing is planned or allocated for layers a small file only
// declares; head_count_kv dividing head_count; a head width (key_length, or embedding_length /
// head_count, then a multiple) that is even and equal to value_length and rope.dimension_count; a
// finite positive RMSNorm epsilon, a finite RoPE base above 1. Config.Validate checks a Config
// built in code the same way.
package llama
