package models

import "fmt"

// The scopes and names of a GGUF decoder's variables, which its architectures share (packages
// models/llama and models/gemma3; models/minilm's encoder layers use LayerScope and the names of
// the output, up and down projections and of the norms too): outside the blocks the
// token-embedding table (its variable TableName), the final norm and, when the embeddings are
// not tied, the output kernel; in block i's scope, LayerScope(i), the projections and norms as
// GGUF names them (blk.<i>.<name>.weight), and the fused projections LoadGGUF may store instead
// of q/k/v and gate/up.
const (
	EmbeddingScope = "token_embd"
	OutputNorm     = "output_norm"
	HeadName       = "lm_head"

	AttnQ      = "attn_q"
	AttnK      = "attn_k"
	AttnV      = "attn_v"
	AttnOutput = "attn_output"
	FFNGate    = "ffn_gate"
	FFNUp      = "ffn_up"
	FFNDown    = "ffn_down"
	AttnNorm   = "attn_norm"
	FFNNorm    = "ffn_norm"
	AttnQKV    = "attn_qkv"
	FFNGateUp  = "ffn_gate_up"
)

// LayerScope returns the scope of block i of a decoder (or of layer i of an encoder): "layer_<i>".
func LayerScope(i int) string { return fmt.Sprintf("layer_%d", i) }
