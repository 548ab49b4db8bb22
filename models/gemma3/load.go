package gemma3

import (
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
	m.FusedQKV, m.FusedGateUp, err = modelbase.LoadDecoder(ctx, f, "gemma3.LoadGGUF", opts, cfg.DecoderConfig, planTensors(cfg),
		models.LayerScope, nil)
	if err != nil {
		return nil, err
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
	d := cfg.DecoderConfig
	plan := modelbase.OuterTensors(Architecture, d)
	const head = "the head width (" + keyKeyLen + ")"
	for i := range cfg.Layers {
		b := modelbase.BlockTensors{Arch: Architecture, D: d, I: i, Scope: "/" + models.LayerScope(i)}
		plan = append(plan, b.WidthNorm(models.AttnNorm), b.Projection(models.AttnQ), b.Projection(models.AttnK),
			b.Projection(models.AttnV), b.Norm(AttnQNorm, cfg.HeadDim, head), b.Norm(AttnKNorm, cfg.HeadDim, head),
			b.Projection(models.AttnOutput), b.WidthNorm(PostAttnNorm), b.WidthNorm(models.FFNNorm),
			b.Projection(models.FFNGate), b.Projection(models.FFNUp), b.Projection(models.FFNDown), b.WidthNorm(PostFFNNorm))
	}
	return plan
}
