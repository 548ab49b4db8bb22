// Package minilm is a BERT encoder with mean pooling in GoMLX, for sentence embeddings with
// all-MiniLM-L6-v2 (6 layers, width 384, 12 heads), loaded from a Hugging Face fp32
// safetensors checkpoint.
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
// # Errors
//
// ConfigFromJSON rejects non-BERT configs, activations other than "gelu" and non-absolute
// positions. LoadSafetensors checks every tensor's presence, dtype (F32) and shape against the
// configuration before reading any, and stores nothing unless all load. Graph methods panic with
// messages naming the shapes they accept.
package minilm
