// Package gemma3 is a Gemma-3 decoder in GoMLX (Gemma-3 270M, 1B, ... in GGUF, architecture
// "gemma3"), read as llama.cpp reads it: the same hyper-parameters, norms, attention and head. It
// is a models.LanguageModel: models.Generator generates with it, models.Evaluator scores it.
//
// # Graph
//
// Model.Forward runs a whole sequence, Model.Step a chunk against a models.KVCache. Per block
// (Hugging Face's Gemma3DecoderLayer, llama.cpp's gemma3 graph):
//
//	h = RMSNorm(x);  x += PostAttnNorm(o(attention(h)))
//	h = RMSNorm(x);  x += PostFFNNorm(down(gelu_tanh(gate(h)) · up(h)))
//
// with, in the attention, an RMSNorm of each query and key head (attn_q_norm, attn_k_norm, over
// the head width), rotary embeddings rotating halves (NEOX order: GGUF keeps Hugging Face's q/k
// rows for Gemma) at the layer's base, and queries scaled by Config.QueryScale before the scores.
// Sliding-window layers (Config.Sliding: five of every six by default) let a query see itself
// and the SlidingWindow−1 positions before it, with RoPEBaseLocal; the others are global, with
// RoPEBase (and RoPEScale, a linear scaling of their positions). The embeddings are scaled by
// √Dim; the output head is the embedding table when tied (Gemma's are), a product with the
// table's last axis; FinalSoftcap caps the logits when the file sets it. Every RMSNorm
// multiplies by its scale as stored: llama.cpp's converter stores Gemma's 1 + weight.
//
// GELU is the tanh approximation in float32 (Hugging Face's gelu_pytorch_tanh); llama.cpp
// evaluates the same function through a table of half-precision inputs, a difference far below
// the other roundings of a quantized product.
//
// Every linear layer goes through Model.Projection and the embedding table through Model.Table
// (see package models), so a models.Quantizer runs the model quantized, or as its file stores
// it (LoadGGUF with models.LoadOptions.Keep).
//
// # Variables
//
// In the context, float32 unless kept as stored (LoadGGUF's layout):
//
//	/token_embd/embeddings                        [VocabSize, Dim]
//	/layer_<i>/attn_norm/rms_norm/scale           [Dim]           (also post_attention_norm, ffn_norm, post_ffw_norm)
//	/layer_<i>/attn_q_norm/rms_norm/scale         [HeadDim]       (also attn_k_norm)
//	/layer_<i>/attn_q/dense/weights               [Dim, Heads·HeadDim]
//	/layer_<i>/attn_k/dense/weights               [Dim, KVHeads·HeadDim]   (also attn_v)
//	/layer_<i>/attn_output/dense/weights          [Heads·HeadDim, Dim]
//	/layer_<i>/ffn_gate/dense/weights             [Dim, FFNDim]            (also ffn_up)
//	/layer_<i>/ffn_down/dense/weights             [FFNDim, Dim]
//	/output_norm/rms_norm/scale                   [Dim]
//	/lm_head/dense/weights                        [Dim, VocabSize]         (untied models only)
//
// Through a models.Quantizer the kernels and the table are stored as its components
// ("weights.q0", "embeddings.q0", ...): quantized, or the file's blocks as they are (Keep rules);
// a float kernel under a Keep rule or a Skip rule in qlayers.OutIn (the "f32" preset, the
// presets' head) is "weights_t", transposed: [out, in]; with LoadOptions.Fuse, attn_qkv and
// ffn_gate_up replace the parts where the fusion is exact.
//
// # Errors
//
// LoadGGUF returns errors (wrapping gguf's ErrNotFound/ErrCorrupt/ErrUnsupported where they
// apply) for a file of another architecture (naming what is accepted), unsupported
// hyper-parameters (RoPE scaling other than linear, value or rotary widths other than the head
// width), missing tensors, tensors it would not read (a block count below the file's blocks, a
// feature it does not implement), shapes that disagree with the metadata, and undecodable types; all
// are checked before any tensor is read, and nothing is stored unless everything loads. Each
// hyper-parameter is checked before it is used, the error naming its GGUF key, its value and
// what is accepted (ConfigFromGGUF); Config.Validate checks a Config built in code the same way.
// Graph methods panic with messages naming the shapes they accept.
package gemma3
