// Package qwen2 loads GGUF files of general.architecture "qwen2" (Qwen2, Qwen2.5: e.g.
// Qwen2.5-0.5B-Instruct). Qwen2's block is Llama's (RMSNorm, grouped-query attention with rotary
// embeddings, SwiGLU feed-forward) with a bias on the q, k and v projections, its rotary embedding
// rotating the two halves of each head (llama.cpp's NEOX RoPE; the converter stores the q/k rows
// in Hugging Face's order): the model is a llama.Model with QKVBias, so that the graph has one
// home, and this package is Qwen2's file: its keys (ConfigFromGGUF) and tensors (LoadGGUF).
//
//	f, _ := gguf.Open("qwen2.5-0.5b-instruct-q4_k_m.gguf")
//	rules, _ := models.Preset(models.FilePreset) // every tensor in the file's own format
//	q := models.MustNewQuantizer(rules)
//	m, err := qwen2.LoadGGUF(ctx, f, models.LoadOptions{Kernel: q.Kernel, Table: q.QuantizeTable, Keep: q, Fuse: q.Fuse})
//	m.Projection, m.Table = q.Projection, q.Table
//
// models/arch picks this loader for a "qwen2" file (quanta run).
//
// The biases are float32 variables "biases" in each projection's "dense" scope (models.DenseBiases,
// as layers.Dense's), added by the Projection (useBias); q/k/v are therefore never fused (gate/up
// may be). TestLlamaCppQwen2 matches llama.cpp's float32 logits of a tiny random Qwen2 model
// (reference/gen_qwen2.py).
//
// Not supported, each refused naming the key or tensor: RoPE scaling (the YaRN of the
// long-context files), a fused attn_qkv tensor, an output bias (output.bias), a file without the
// q/k/v biases (llama.cpp reads them as optional), and the other Qwen architectures ("qwen2moe",
// "qwen2vl", "qwen3", ...), which models/arch refuses by name.
package qwen2
