package qwen2

import (
	"path"

	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/modelbase"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/llama"
)

// LoadGGUF reads the hyper-parameters and weights of a "qwen2" GGUF file into ctx and returns the
// model: a llama.Model with QKVBias, its q/k rows as the file stores them (Hugging Face's order:
// Qwen2 rotates halves, llama.cpp's NEOX RoPE), so RotateAdjacent is false and nothing is
// permuted. Tensors are read one at a time: those opts.Keep keeps (a quantized block type, e.g.
// Q4_K) as their blocks are stored, never decoded; the others decoded (F32, F16, BF16 and every
// block type of package gguf) — the embedding table, norms and the q/k/v biases
// (blk.N.attn_q.bias, attn_k.bias, attn_v.bias, each required) straight into their tensors, each
// projection kernel through one reused buffer into its (inDim, outDim) tensor, transposed from
// GGUF's [out][in] rows. opts.Fuse may fuse gate/up; q/k/v, which add biases, are never fused.
//
// Every tensor's presence, type and shape is checked before anything is read, and nothing is
// stored in ctx until all are converted: on error ctx is unchanged. ctx must not already hold the
// model's variables.
func LoadGGUF(ctx *context.Context, f *gguf.File, opts models.LoadOptions) (*llama.Model, error) {
	if ctx == nil || f == nil {
		return nil, errors.New("qwen2.LoadGGUF: nil context or file; accepted: a context and an opened file")
	}
	cfg, err := ConfigFromGGUF(f)
	if err != nil {
		return nil, err
	}
	if fuse := opts.Fuse; fuse != nil {
		// A fused attn_qkv would need the parts' biases concatenated as its own.
		opts.Fuse = func(fused string, parts []string, outDims []int) bool {
			return path.Base(fused) != models.AttnQKV && fuse(fused, parts, outDims)
		}
	}
	m := &llama.Model{Config: cfg, QKVBias: true}
	m.FusedQKV, m.FusedGateUp, err = modelbase.LoadDecoder(ctx, f, "qwen2.LoadGGUF", opts, models.DecoderConfig(cfg), planTensors(cfg),
		models.LayerScope, nil)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// MustLoadGGUF is LoadGGUF that panics on error.
func MustLoadGGUF(ctx *context.Context, f *gguf.File, opts models.LoadOptions) *llama.Model {
	m, err := LoadGGUF(ctx, f, opts)
	if err != nil {
		panic(err)
	}
	return m
}

// planTensors lists the tensors the model needs.
func planTensors(cfg llama.Config) []modelbase.Tensor {
	d := models.DecoderConfig(cfg)
	plan := modelbase.OuterTensors(Architecture, d)
	for i := range cfg.Layers {
		b := modelbase.BlockTensors{Arch: Architecture, D: d, I: i, Scope: "/" + models.LayerScope(i)}
		plan = append(plan, b.WidthNorm(models.AttnNorm))
		for _, p := range biased {
			plan = append(plan, b.Projection(p), b.Bias(p))
		}
		plan = append(plan, b.Projection(models.AttnOutput), b.WidthNorm(models.FFNNorm),
			b.Projection(models.FFNGate), b.Projection(models.FFNUp), b.Projection(models.FFNDown))
	}
	return plan
}
