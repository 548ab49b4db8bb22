package llama

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/ggml"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/hostdata"
	"github.com/quanta-ml/quanta/internal/modelbase"
	"github.com/quanta-ml/quanta/models"
)

// LoadOptions are the options of LoadGGUF: those of every architecture's loader
// (models.LoadOptions: the Kernel, Table, Keep and Fuse hooks, the Backend) and Llama's own. The
// zero value loads the float model as the GGUF stores it, q/k rows un-permuted to Hugging Face's
// order.
type LoadOptions struct {
	models.LoadOptions
	// UntieHead stores, for a model with tied embeddings, a separate "lm_head" kernel (the
	// embedding table: transposed and passed through Kernel like the others, or a copy of the
	// table kept as stored where the Keeper keeps the "lm_head" scope, whatever it does with the
	// table) and sets TiedEmbeddings false, so that the output head goes through the Projection.
	UntieHead bool
	// RotateAdjacent keeps attn_q/attn_k rows in GGUF's order and sets Model.RotateAdjacent, so
	// that the rotary embedding rotates adjacent pairs as llama.cpp does.
	RotateAdjacent bool
}

// LoadGGUF reads the hyper-parameters and weights of a "llama" GGUF file into ctx and returns the
// model. Tensors are read one at a time: those the Keep hook keeps (a quantized block type, e.g.
// Q4_K) as their blocks are stored, never decoded; the others decoded (F32, F16, BF16 and every
// block type of package gguf) — the embedding table and norms straight into their tensors, each
// projection kernel through one reused buffer into its (inDim, outDim) tensor, transposed from
// GGUF's [out][in] rows. For attn_q and attn_k, the rows of each head are taken back from
// llama.cpp's converter order (pairs interleaved for adjacent-pair RoPE) to Hugging Face's
// (halves), kept kernels too (whole rows of blocks move), unless RotateAdjacent. A file of Llama
// 3.1 or later also has rope_freqs.weight, the factors that divide the rotary frequencies in
// every layer (one per pair: F32, HeadDim/2 of them, each finite and positive, as llama.cpp
// accepts them, and at least models.MinRoPEFactor): they become Model.RoPEFreqFactors, not a variable.
//
// Every tensor's presence, type and shape is checked before anything is read, and nothing is
// stored in ctx until all are converted: on error ctx is unchanged. ctx must not already hold the
// model's variables.
func LoadGGUF(ctx *context.Context, f *gguf.File, opts LoadOptions) (*Model, error) {
	if ctx == nil || f == nil {
		return nil, errors.New("llama.LoadGGUF: nil context or file; accepted: a context and an opened file")
	}
	cfg, err := ConfigFromGGUF(f)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, RotateAdjacent: opts.RotateAdjacent}
	_, hasFactors := f.Tensor(ropeFreqs)
	plan := planTensors(cfg, opts.RotateAdjacent, hasFactors)
	load := func(vars *modelbase.Vars) error { return vars.Load(f, plan) }
	if opts.UntieHead && cfg.TiedEmbeddings {
		load = func(vars *modelbase.Vars) error {
			if err := vars.Load(f, plan[1:]); err != nil { // the table is read for the head too
				return err
			}
			return untieHead(f, vars, ctx.In(models.EmbeddingScope).Scope(), ctx.In(models.HeadName).Scope(), cfg)
		}
		m.TiedEmbeddings = false
	}
	var factors []float32
	read := func(vars *modelbase.Vars) error {
		if hasFactors {
			var err error
			if factors, err = readRoPEFreqs(f, cfg.HeadDim); err != nil {
				return err
			}
		}
		return load(vars)
	}
	m.FusedQKV, m.FusedGateUp, err = modelbase.LoadDecoder(ctx, f, "llama.LoadGGUF", opts.LoadOptions, cfg.decoder(), plan, models.LayerScope, read)
	if err != nil {
		return nil, err
	}
	m.RoPEFreqFactors = factors
	return m, nil
}

// ropeFreqs is llama.cpp's LLM_TENSOR_ROPE_FREQS, one tensor shared by every layer.
const ropeFreqs = "rope_freqs.weight"

// readRoPEFreqs reads the rotary frequency factors of f (the tensor is planned: present, with
// headDim/2 elements), as llama.cpp accepts them: F32, each finite and positive; and each at
// least models.MinRoPEFactor, below which the angles overflow float32 (NaN logits).
func readRoPEFreqs(f *gguf.File, headDim int) ([]float32, error) {
	t, _ := f.Tensor(ropeFreqs)
	if t.Type != gguf.TypeF32 {
		return nil, errors.Wrapf(gguf.ErrUnsupported, "tensor %s (RoPE frequency factors); accepted: F32 [%d]", t, headDim/2)
	}
	factors := make([]float32, headDim/2)
	if err := f.DecodeInto(ropeFreqs, factors); err != nil {
		return nil, err
	}
	for i, v := range factors {
		if !(v > 0) || math.IsInf(float64(v), 1) {
			return nil, errors.Wrapf(gguf.ErrCorrupt, "tensor %s (RoPE frequency factors): factor %d = %g; accepted: finite and positive", t, i, v)
		}
		if float64(v) < models.MinRoPEFactor {
			return nil, errors.Wrapf(gguf.ErrCorrupt, "tensor %s (RoPE frequency factors): factor %d = %g; accepted: at least %.4g "+
				"(models.MinRoPEFactor: the rotary angles are +Inf in float32 below it, the logits NaN)", t, i, v, models.MinRoPEFactor)
		}
	}
	return factors, nil
}

// untieHead reads the embedding table for both the table and a separate head kernel, each kept
// as stored or decoded as the Keeper says for its own scope (a decoded head is the table's
// transpose, a kept one a copy of the blocks).
func untieHead(f *gguf.File, vars *modelbase.Vars, embScope, headScope string, cfg Config) error {
	const name = "token_embd.weight"
	keepTable := vars.Kept(f, modelbase.Tensor{Name: name, Kind: modelbase.Table, Scope: embScope})
	keepHead := vars.Kept(f, modelbase.Tensor{Name: name, Kind: modelbase.Kernel, Scope: headScope})
	var decoded *tensors.Tensor // the float table, for the head or the table not kept
	if !keepTable || !keepHead {
		var err error
		if decoded, err = modelbase.DecodeTensor(f, name, []int{cfg.VocabSize, cfg.Dim}); err != nil {
			return err
		}
	}
	release := func() {
		if decoded != nil {
			_ = decoded.FinalizeAll()
		}
	}
	if keepHead {
		head, err := ggml.Read(f, name)
		if err == nil {
			err = vars.KeepKernel(headScope, head, "the untied head")
		}
		if err != nil {
			release()
			return err
		}
	} else if err := vars.AddKernel(headScope, hostdata.Transposed(decoded), "the untied head"); err != nil {
		release()
		return err
	}
	if !keepTable {
		return vars.AddTable(embScope, decoded, name)
	}
	release()
	table, err := ggml.Read(f, name)
	if err != nil {
		return err
	}
	return vars.KeepTable(embScope, table, name)
}

// MustLoadGGUF is LoadGGUF that panics on error.
func MustLoadGGUF(ctx *context.Context, f *gguf.File, opts LoadOptions) *Model {
	m, err := LoadGGUF(ctx, f, opts)
	if err != nil {
		panic(err)
	}
	return m
}

// planTensors lists the tensors the model needs, the embedding table first, and with factors
// rope_freqs (read by LoadGGUF itself).
func planTensors(cfg Config, rotateAdjacent, factors bool) []modelbase.Tensor {
	d := cfg.decoder()
	plan := modelbase.OuterTensors(architecture, d)
	for i := range cfg.Layers {
		b := modelbase.BlockTensors{Arch: architecture, D: d, I: i, Scope: "/" + models.LayerScope(i)}
		q, k := b.Projection(models.AttnQ), b.Projection(models.AttnK)
		if !rotateAdjacent {
			q.UnpermuteHeads, k.UnpermuteHeads = cfg.Heads, cfg.KVHeads
		}
		plan = append(plan, b.WidthNorm(models.AttnNorm), q, k, b.Projection(models.AttnV), b.Projection(models.AttnOutput), b.WidthNorm(models.FFNNorm),
			b.Projection(models.FFNGate), b.Projection(models.FFNUp), b.Projection(models.FFNDown))
	}
	if factors {
		plan = append(plan, modelbase.Tensor{Name: ropeFreqs, Kind: modelbase.Aux, Shape: []int{cfg.HeadDim / 2},
			From: "head width / 2, one factor per rotary pair"})
	}
	return plan
}
