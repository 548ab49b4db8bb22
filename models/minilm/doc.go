// Package minilm is a BERT encoder with mean pooling in GoMLX, for sentence embeddings with
// all-MiniLM-L6-v2 (6 layers, width 384, 12 heads), loaded from a Hugging Face safetensors
// checkpoint (float32; F16, BF16 and F64 weights are converted to float32 as they are read).
//
// # Graph
//
// Model.Hidden is BertModel's encoder: word + position + token-type (all 0) embeddings, LayerNorm,
// then per layer, post-LN, x = LN(x + O(attention(x))) and x = LN(x + down(GELU(up(x)))), with
// exact GELU (erf) and attention masked on the padding keys. Model.Embed adds
// sentence-transformers' head: MaskedMean over the attention mask, then Normalize (L2). Every
// linear layer (query, key, value, attn_output, ffn_up, ffn_down, all with biases) goes through
// Model.Projection (see package models). Embedder wraps tokenization, padding and execution.
//
// # Variables
//
//	/embeddings/word/embeddings                  [VocabSize, Dim]
//	/embeddings/position/embeddings              [MaxPositions, Dim]
//	/embeddings/token_type/embeddings            [TypeVocabSize, Dim]
//	/embeddings/layer_normalization/{gain,offset} [Dim]
//	/layer_<i>/{query,key,value,attn_output}/dense/{weights [Dim, Dim], biases [Dim]}
//	/layer_<i>/ffn_up/dense/{weights [Dim, FFNDim], biases}, /layer_<i>/ffn_down/dense/{weights [FFNDim, Dim], biases}
//	/layer_<i>/{attn_norm,ffn_norm}/layer_normalization/{gain,offset} [Dim]
//
// A kernel kept float by a Quantizer's Skip rule in qlayers.OutIn (the "f32" preset) is
// "weights_t" instead, transposed: [out, in].
//
// # Errors
//
// ConfigFromJSON rejects non-BERT configs, activations other than "gelu" and non-absolute
// positions, and checks the hyper-parameters (Config.Validate): sizes from 1 to 2^31 − 1, the
// hidden size a multiple of the heads, a finite positive layer_norm_eps, each error naming the
// config.json key. LoadSafetensors checks the configuration too, bounds num_hidden_layers by the
// tensors the checkpoint has (16 a layer) before planning anything for them, refuses a
// checkpoint with layers beyond num_hidden_layers (wrapping safetensors.ErrCorrupt), then checks
// every tensor's presence, dtype (F32, F16, BF16 or F64; others wrap safetensors.ErrUnsupported)
// and shape against the configuration before reading any, and stores nothing unless all load.
// Graph methods panic with messages naming the shapes they accept.
package minilm
