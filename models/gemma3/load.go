package gemma3

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/modelbase"
	"github.com/quanta-ml/quanta/models"
)

// LoadGGUF reads the hyper-parameters and weights of a "gemma3" GGUF file into ctx and returns
// the model. Tensors are read one at a time: those opts.Keep keeps (a quantized block type, e.g.
// Q4_K, the Q8_0 embedding table) as their blocks are stored, never decoded; the others decoded
// (F32, F16, BF16 and every block type of package gguf): the embedding table and norms straight
// into their tensors, each projection kernel through one reused buffer into its (inDim, outDim)
// tensor, transposed from GGUF's [out][in] rows. The norm scales are used as stored (llama.cpp's
// converter stores Gemma's 1 + weight); q/k rows are in Hugging Face's order (Gemma rotates
// halves), so nothing is permuted.
//
// Every tensor's presence, type and shape is checked before anything is read, and nothing is
// stored in ctx until all are converted: on error ctx is unchanged. ctx must not already hold the
// model's variables.
func LoadGGUF(ctx *context.Context, f *gguf.File, opts models.LoadOptions) (*Model, error) {
	if ctx == nil || f == nil {
		return nil, errors.New("gemma3.LoadGGUF: nil context or file; accepted: a context and an opened file")
	}
	cfg, err := ConfigFromGGUF(f)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg}
	plan := planTensors(cfg)
	if err := modelbase.Check(f, plan, "gemma3.LoadGGUF"); err != nil {
		return nil, err
	}
	embScope := ctx.In(EmbeddingScope).Scope()
	if ctx.InspectVariable(embScope, EmbeddingName) != nil {
		return nil, errors.Errorf("gemma3.LoadGGUF: the context already holds %s/%s; load into a fresh context", embScope, EmbeddingName)
	}
	vars := modelbase.NewVars(opts)
	m.FusedQKV, m.FusedGateUp = vars.FuseQKVGateUp(ctx, f, cfg.Layers, LayerScope, cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim,
		cfg.FFNDim, opts.Fuse)
	if err := vars.Load(f, plan); err != nil {
		vars.Release()
		return nil, errors.WithMessage(err, "gemma3.LoadGGUF")
	}
	if err := vars.Store(ctx); err != nil {
		vars.Release()
		return nil, errors.WithMessage(err, "gemma3.LoadGGUF")
	}
	return m, nil
}

// MustLoadGGUF is LoadGGUF that panics on error.
func MustLoadGGUF(ctx *context.Context, f *gguf.File, opts models.LoadOptions) *Model {
	m, err := LoadGGUF(ctx, f, opts)
	if err != nil {
		panic(err)
	}
	return m
}

// planTensors lists the tensors the model needs.
func planTensors(cfg Config) []modelbase.Tensor {
	q, kv := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	const (
		vocab  = "vocabulary size"
		width  = keyDim
		ffn    = "gemma3.feed_forward_length"
		head   = "the head width (" + keyKeyLen + ")"
		qWidth = keyHeads + " × head width"
		kWidth = keyKVHeads + " × head width"
	)
	plan := []modelbase.Tensor{
		{Name: "token_embd.weight", Kind: modelbase.Table, Scope: "/" + EmbeddingScope, Shape: []int{cfg.VocabSize, cfg.Dim},
			From: vocab + ", " + width},
		{Name: "output_norm.weight", Scope: "/" + OutputNorm + "/rms_norm", VarName: "scale", Shape: []int{cfg.Dim}, From: width},
	}
	if !cfg.TiedEmbeddings {
		plan = append(plan, modelbase.Tensor{Name: "output.weight", Kind: modelbase.Kernel, Scope: "/" + HeadName, In: cfg.Dim,
			Out: cfg.VocabSize, From: vocab + ", " + width})
	}
	for i := 0; i < cfg.Layers; i++ {
		layer := "/" + LayerScope(i)
		blk := fmt.Sprintf("blk.%d.", i)
		norm := func(name string, dim int, from string) modelbase.Tensor {
			return modelbase.Tensor{Name: blk + name + ".weight", Scope: layer + "/" + name + "/rms_norm", VarName: "scale",
				Shape: []int{dim}, From: from}
		}
		kernel := func(name string, in, out int, from string) modelbase.Tensor {
			return modelbase.Tensor{Name: blk + name + ".weight", Kind: modelbase.Kernel, Scope: layer + "/" + name, In: in, Out: out, From: from}
		}
		plan = append(plan, norm(AttnNorm, cfg.Dim, width),
			kernel(AttnQ, cfg.Dim, q, qWidth+", "+width), kernel(AttnK, cfg.Dim, kv, kWidth+", "+width),
			kernel(AttnV, cfg.Dim, kv, kWidth+", "+width), norm(AttnQNorm, cfg.HeadDim, head), norm(AttnKNorm, cfg.HeadDim, head),
			kernel(AttnOutput, q, cfg.Dim, width+", "+qWidth), norm(PostAttnNorm, cfg.Dim, width), norm(FFNNorm, cfg.Dim, width),
			kernel(FFNGate, cfg.Dim, cfg.FFNDim, ffn+", "+width), kernel(FFNUp, cfg.Dim, cfg.FFNDim, ffn+", "+width),
			kernel(FFNDown, cfg.FFNDim, cfg.Dim, width+", "+ffn), norm(PostFFNNorm, cfg.Dim, width))
	}
	return plan
}
