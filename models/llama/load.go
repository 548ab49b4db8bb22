package llama

import (
	"fmt"

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
	// table kept as stored) and sets TiedEmbeddings false, so that the output head goes through
	// the Projection.
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
// (halves), kept kernels too (whole rows of blocks move), unless RotateAdjacent.
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
	plan := planTensors(cfg, opts.RotateAdjacent)
	if err := modelbase.Check(f, plan, "llama.LoadGGUF"); err != nil {
		return nil, err
	}
	embScope := ctx.In(EmbeddingScope).Scope()
	if ctx.InspectVariable(embScope, EmbeddingName) != nil {
		return nil, errors.Errorf("llama.LoadGGUF: the context already holds %s/%s; load into a fresh context", embScope, EmbeddingName)
	}
	vars := modelbase.NewVars(opts.LoadOptions)
	fail := func(err error) (*Model, error) {
		vars.Release()
		return nil, errors.WithMessage(err, "llama.LoadGGUF")
	}
	m.FusedQKV, m.FusedGateUp = vars.FuseQKVGateUp(ctx, f, cfg.Layers, LayerScope, cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim,
		cfg.FFNDim, opts.Fuse)
	untie := opts.UntieHead && cfg.TiedEmbeddings
	if untie {
		plan = plan[1:] // the table is read below, for the head too
	}
	if err := vars.Load(f, plan); err != nil {
		return fail(err)
	}
	if untie {
		if err := untieHead(f, vars, embScope, ctx.In(HeadName).Scope(), cfg); err != nil {
			return fail(err)
		}
		m.TiedEmbeddings = false
	}
	if err := vars.Store(ctx); err != nil {
		return fail(err)
	}
	return m, nil
}

// untieHead reads the embedding table for both the table and a separate head kernel: kept as
// stored (the head a copy of the blocks) or decoded (the head its transpose).
func untieHead(f *gguf.File, vars *modelbase.Vars, embScope, headScope string, cfg Config) error {
	const name = "token_embd.weight"
	if vars.Kept(f, modelbase.Tensor{Name: name, Kind: modelbase.Table, Scope: embScope}) {
		table, err := ggml.Read(f, name)
		if err != nil {
			return err
		}
		head, err := ggml.Read(f, name)
		if err != nil {
			table.Delete()
			return err
		}
		if err := vars.KeepKernel(headScope, head, "the untied head"); err != nil {
			table.Delete()
			return err
		}
		return vars.KeepTable(embScope, table, name)
	}
	table, err := modelbase.DecodeTensor(f, name, []int{cfg.VocabSize, cfg.Dim})
	if err != nil {
		return err
	}
	if err := vars.AddKernel(headScope, hostdata.Transposed(table), "the untied head"); err != nil {
		_ = table.FinalizeAll()
		return err
	}
	return vars.AddTable(embScope, table, name)
}

// MustLoadGGUF is LoadGGUF that panics on error.
func MustLoadGGUF(ctx *context.Context, f *gguf.File, opts LoadOptions) *Model {
	m, err := LoadGGUF(ctx, f, opts)
	if err != nil {
		panic(err)
	}
	return m
}

// planTensors lists the tensors the model needs, the embedding table first.
func planTensors(cfg Config, rotateAdjacent bool) []modelbase.Tensor {
	q, kv := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	const (
		vocab  = "vocabulary size"
		width  = "llama.embedding_length"
		ffn    = "llama.feed_forward_length"
		qWidth = "llama.attention.head_count × head width"
		kWidth = "llama.attention.head_count_kv × head width"
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
	qHeads, kHeads := cfg.Heads, cfg.KVHeads
	if rotateAdjacent {
		qHeads, kHeads = 0, 0
	}
	for i := 0; i < cfg.Layers; i++ {
		layer := "/" + LayerScope(i)
		blk := fmt.Sprintf("blk.%d.", i)
		norm := func(name string) modelbase.Tensor {
			return modelbase.Tensor{Name: blk + name + ".weight", Scope: layer + "/" + name + "/rms_norm", VarName: "scale",
				Shape: []int{cfg.Dim}, From: width}
		}
		kernel := func(name string, in, out, heads int, from string) modelbase.Tensor {
			return modelbase.Tensor{Name: blk + name + ".weight", Kind: modelbase.Kernel, Scope: layer + "/" + name, In: in, Out: out,
				UnpermuteHeads: heads, From: from}
		}
		plan = append(plan, norm(AttnNorm),
			kernel(AttnQ, cfg.Dim, q, qHeads, qWidth+", "+width), kernel(AttnK, cfg.Dim, kv, kHeads, kWidth+", "+width),
			kernel(AttnV, cfg.Dim, kv, 0, kWidth+", "+width), kernel(AttnOutput, q, cfg.Dim, 0, width+", "+qWidth), norm(FFNNorm),
			kernel(FFNGate, cfg.Dim, cfg.FFNDim, 0, ffn+", "+width), kernel(FFNUp, cfg.Dim, cfg.FFNDim, 0, ffn+", "+width),
			kernel(FFNDown, cfg.FFNDim, cfg.Dim, 0, width+", "+ffn))
	}
	return plan
}
