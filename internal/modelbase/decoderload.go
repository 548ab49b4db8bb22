package modelbase

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/qlayers"
)

// EmbeddingTable returns a decoder's token-embedding table [vocab, dim] at "token_embd" through
// t (nil: models.DenseTable), for the lookup and the tied head.
func EmbeddingTable(t models.Table, ctx *context.Context, g *graph.Graph, vocab, dim int) implicitarray.Value {
	if t == nil {
		t = models.DenseTable
	}
	return t(ctx, "token_embd", g, vocab, dim)
}

// Head returns the logits [..., vocab] of normalized hidden states h [..., dim]: with tied
// embeddings, the product with the embedding table of t (never transposed in memory); otherwise
// the "lm_head" projection through p.
func Head(p models.Projection, t models.Table, ctx *context.Context, h *graph.Node, tied bool, vocab, dim int) *graph.Node {
	if !tied {
		return Project(p, ctx, "lm_head", h, vocab, false)
	}
	return qlayers.TiedHead(h, EmbeddingTable(t, ctx, h.Graph(), vocab, dim))
}

// CheckCache panics, naming the op (e.g. "llama.Step"), unless cache holds the keys and values
// of layers layers.
func CheckCache(op string, cache *models.KVCache, layers int) {
	if cache.Layers() != layers {
		panic(errors.Errorf("%s: a cache of %d layers; accepted: %d (the model's)", op, cache.Layers(), layers))
	}
}

// OuterTensors plans the tensors of decoder d outside its blocks: the embedding table
// (models.EmbeddingScope), the final norm (models.OutputNorm) and, unless the embeddings are
// tied, the output kernel (models.HeadName).
// arch prefixes the keys that the shapes derive from, for errors.
func OuterTensors(arch string, d models.DecoderConfig) []Tensor {
	vocab, width := "vocabulary size", arch+".embedding_length"
	plan := []Tensor{
		{Name: "token_embd.weight", Kind: Table, Scope: "/" + models.EmbeddingScope, Shape: []int{d.VocabSize, d.Dim}, From: vocab + ", " + width},
		{Name: "output_norm.weight", Scope: "/" + models.OutputNorm + "/rms_norm", VarName: "scale", Shape: []int{d.Dim}, From: width},
	}
	if !d.TiedEmbeddings {
		plan = append(plan, Tensor{Name: "output.weight", Kind: Kernel, Scope: "/" + models.HeadName, In: d.Dim, Out: d.VocabSize,
			From: vocab + ", " + width})
	}
	return plan
}

// BlockTensors plans the tensors of one block of decoder D: GGUF "blk.<I>.<name>.weight" into
// the scope Scope + "/" + name (Scope absolute, e.g. "/layer_0"). Arch prefixes the keys that
// the shapes derive from, for errors.
type BlockTensors struct {
	Arch  string
	D     models.DecoderConfig
	I     int
	Scope string
}

// Norm plans the scale of the RMSNorm name, dim wide; from names what dim derives from.
func (b BlockTensors) Norm(name string, dim int, from string) Tensor {
	return Tensor{Name: fmt.Sprintf("blk.%d.%s.weight", b.I, name), Scope: b.Scope + "/" + name + "/rms_norm", VarName: "scale",
		Shape: []int{dim}, From: from}
}

// WidthNorm plans the scale of the RMSNorm name over the residual stream (Dim wide).
func (b BlockTensors) WidthNorm(name string) Tensor {
	return b.Norm(name, b.D.Dim, b.Arch+".embedding_length")
}

// Bias plans the bias of the projection name (see Projection), GGUF "blk.<I>.<name>.bias" of
// the projection's output width, into the variable the projection adds (useBias):
// models.DenseBiases in the projection's models.DenseScope.
func (b BlockTensors) Bias(name string) Tensor {
	p := b.Projection(name)
	return Tensor{Name: fmt.Sprintf("blk.%d.%s.bias", b.I, name), Scope: p.Scope + "/" + models.DenseScope, VarName: models.DenseBiases,
		Shape: []int{p.Out}, From: strings.SplitN(p.From, ", ", 2)[0]}
}

// Projection plans the kernel of the projection name, one of attn_q, attn_k, attn_v,
// attn_output, ffn_gate, ffn_up and ffn_down, its widths those of grouped-query attention and of
// a gated feed-forward block of D.
func (b BlockTensors) Projection(name string) Tensor {
	d := b.D
	q, kv := d.Heads*d.HeadDim, d.KVHeads*d.HeadDim
	var (
		width  = b.Arch + ".embedding_length"
		ffn    = b.Arch + ".feed_forward_length"
		qWidth = b.Arch + ".attention.head_count × head width"
		kWidth = b.Arch + ".attention.head_count_kv × head width"
	)
	p := Tensor{Name: fmt.Sprintf("blk.%d.%s.weight", b.I, name), Kind: Kernel, Scope: b.Scope + "/" + name}
	switch name {
	case "attn_q":
		p.In, p.Out, p.From = d.Dim, q, qWidth+", "+width
	case "attn_k", "attn_v":
		p.In, p.Out, p.From = d.Dim, kv, kWidth+", "+width
	case "attn_output":
		p.In, p.Out, p.From = q, d.Dim, width+", "+qWidth
	case "ffn_gate", "ffn_up":
		p.In, p.Out, p.From = d.Dim, d.FFNDim, ffn+", "+width
	case "ffn_down":
		p.In, p.Out, p.From = d.FFNDim, d.Dim, width+", "+ffn
	default:
		panic(errors.Errorf("modelbase.BlockTensors.Projection(%q); accepted: a projection of a decoder block", name))
	}
	return p
}

// LoadDecoder is a GGUF decoder's load once its configuration d is read and its tensors planned:
// it checks plan against f (op names the loader in errors), refuses a context that already holds
// the embedding table, fuses q/k/v and gate/up where opts.Fuse says so (FuseQKVGateUp; block
// i's scope is ctx.In(layerScope(i))), reads the tensors (through read when not nil, else
// Vars.Load of the plan) and stores the variables in ctx. On error nothing is stored in ctx and
// every value read is released.
func LoadDecoder(ctx *context.Context, f *gguf.File, op string, opts models.LoadOptions, d models.DecoderConfig, plan []Tensor,
	layerScope func(int) string, read func(vars *Vars) error) (fusedQKV, fusedGateUp bool, err error) {
	if err := Check(f, plan, op); err != nil {
		return false, false, err
	}
	embScope := ctx.In("token_embd").Scope()
	if ctx.InspectVariable(embScope, models.TableName) != nil {
		return false, false, errors.Errorf("%s: the context already holds %s/%s; load into a fresh context", op, embScope, models.TableName)
	}
	vars := NewVars(opts)
	fusedQKV, fusedGateUp = vars.FuseQKVGateUp(ctx, f, d.Layers, layerScope, d.Heads*d.HeadDim, d.KVHeads*d.HeadDim, d.FFNDim, opts.Fuse)
	if read == nil {
		read = func(vars *Vars) error { return vars.Load(f, plan) }
	}
	err = read(vars)
	if err == nil {
		err = vars.Store(ctx)
	}
	if err != nil {
		vars.Release()
		return false, false, errors.WithMessage(err, op)
	}
	return fusedQKV, fusedGateUp, nil
}
