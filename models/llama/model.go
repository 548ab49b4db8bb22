package llama

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX's house style for graph code
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/quanta-ml/quanta/internal/modelbase"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/qlayers"
)

// Model is a Llama-architecture decoder: the configuration and the hooks its linear layers and
// its embedding table go through. Its graph methods read the parameters from the given context
// (use ctx.Reuse() for a loaded model, so that a missing variable is an error rather than a fresh
// random one).
type Model struct {
	Config
	models.DecoderHooks
	// RotateAdjacent applies the rotary embedding to adjacent pairs (x[2i], x[2i+1]), llama.cpp's
	// "normal" RoPE, for q/k kernels kept in GGUF's row order; false (the default, what LoadGGUF
	// loads) rotates the two halves (x[i], x[i+HeadDim/2]) as Hugging Face's Llama does.
	RotateAdjacent bool
	// RoPEFreqFactors divide the rotary frequencies, one per pair (HeadDim/2, each finite and
	// positive; nil: none): θ_i = RoPEBase^(-2i/HeadDim) / RoPEFreqFactors[i], in every layer, as
	// llama.cpp applies the rope_freqs tensor of Llama 3.1 and later files, which LoadGGUF reads.
	RoPEFreqFactors []float32
	// QKVBias: the q, k and v projections add a bias (their Projection's useBias), as Qwen2's
	// (models/qwen2 loads such a model); false for Llama, whose projections have none.
	QKVBias bool
}

// New returns a model of the given configuration with the default projection.
func New(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Model{Config: cfg}, nil
}

var _ models.LanguageModel = (*Model)(nil)

// DecodeSpec describes the model to a models.Generator.
func (m *Model) DecodeSpec() models.DecodeSpec { return m.decoder().DecodeSpec() }

func (m *Model) project(ctx *context.Context, name string, x *Node, outDim int) *Node {
	return modelbase.Project(m.Projection, ctx, name, x, outDim, false)
}

// Embed returns the embeddings [batch, seq, Dim] of integer token ids [batch, seq].
func (m *Model) Embed(ctx *context.Context, tokens *Node) *Node {
	modelbase.CheckTokens("llama.Embed", tokens)
	return qlayers.Lookup(modelbase.EmbeddingTable(m.Table, ctx, tokens.Graph(), m.VocabSize, m.Dim), tokens)
}

// Logits applies the final RMSNorm and the output head to hidden states [..., Dim], giving
// [..., VocabSize]: with tied embeddings, the product with the embedding table (never
// transposed in memory); otherwise the "lm_head" projection.
func (m *Model) Logits(ctx *context.Context, hidden *Node) *Node {
	h := m.rmsNorm(ctx.In(models.OutputNorm), hidden)
	return modelbase.Head(m.Projection, m.Table, ctx, h, m.TiedEmbeddings, m.VocabSize, m.Dim)
}

func (m *Model) rmsNorm(ctx *context.Context, x *Node) *Node {
	return layers.RMSNorm(ctx, x).WithEpsilon(m.RMSNormEps).Done()
}

// Forward returns the logits [batch, seq, VocabSize] of token ids [batch, seq] at positions
// 0..seq-1, each position attending to itself and the positions before it (no cache).
func (m *Model) Forward(ctx *context.Context, tokens *Node) *Node {
	modelbase.CheckTokens("llama.Forward", tokens)
	x := m.Embed(ctx, tokens)
	g := tokens.Graph()
	seq := tokens.Shape().Dim(1)
	positions := Iota(g, shapes.Make(dtypes.Int32, seq), 0)
	mask := models.CausalMask(positions, seq)
	for i := 0; i < m.Layers; i++ {
		x = m.Block(ctx.In(models.LayerScope(i)), x, positions, mask, nil, i)
	}
	return m.Logits(ctx, x)
}

// Step runs tokens [batch, seq] at positions cache.Start().. against a key/value cache (see
// models.KVCache: per layer keys then values [batch, KVHeads, length, HeadDim]) and returns the
// logits [batch, VocabSize] of the token at index last (a scalar integer node, in 0..seq-1: a
// last outside gives NaN logits, a constant one panics); the chunk's keys and values are written
// through cache. cache.Start()+seq must not exceed the cache's length (the write would be
// clamped).
func (m *Model) Step(ctx *context.Context, tokens, last *Node, cache *models.KVCache) *Node {
	modelbase.CheckTokens("llama.Step", tokens)
	modelbase.CheckCache("llama.Step", cache, m.Layers)
	seq := tokens.Shape().Dim(1)
	positions := cache.Positions(seq)
	mask := cache.Mask(seq)
	x := m.Embed(ctx, tokens)
	for i := 0; i < m.Layers; i++ {
		x = m.Block(ctx.In(models.LayerScope(i)), x, positions, mask, cache, i)
	}
	return m.Logits(ctx, modelbase.PickRow("llama.Step", x, last))
}

// Block is decoder block layer (ctx is its scope): x + attention(RMSNorm(x)), then
// + SwiGLU(RMSNorm(·)). positions [seq] are the tokens' positions, mask [seq, keys] says which
// keys each query sees. Without a cache (nil) the keys are this block's own; with one, this
// step's keys and values are written into the layer's cache and the attention runs over the
// cache's window.
func (m *Model) Block(ctx *context.Context, x, positions, mask *Node, cache *models.KVCache, layer int) *Node {
	h := m.rmsNorm(ctx.In(models.AttnNorm), x)
	x = Add(x, m.Attention(ctx, h, positions, mask, cache, layer))
	h = m.rmsNorm(ctx.In(models.FFNNorm), x)
	gateUp := modelbase.ProjectSplit(m.Projection, ctx, m.FusedGateUp, models.FFNGateUp, []string{models.FFNGate, models.FFNUp}, h, false, m.FFNDim, m.FFNDim)
	gate, up := gateUp[0], gateUp[1]
	return Add(x, m.project(ctx, models.FFNDown, Mul(Mul(gate, Sigmoid(gate)), up), m.Dim))
}

// Attention is grouped-query self-attention with rotary position embeddings over x
// [batch, seq, Dim], the q, k and v projections adding their biases when QKVBias; see Block for
// the other arguments.
func (m *Model) Attention(ctx *context.Context, x, positions, mask *Node, cache *models.KVCache, layer int) *Node {
	hd := m.HeadDim
	qkv := modelbase.ProjectSplit(m.Projection, ctx, m.FusedQKV, models.AttnQKV, []string{models.AttnQ, models.AttnK, models.AttnV}, x, m.QKVBias, m.Heads*hd, m.KVHeads*hd, m.KVHeads*hd)
	q, k, v := modelbase.SplitHeads(qkv[0], m.Heads, hd), modelbase.SplitHeads(qkv[1], m.KVHeads, hd), modelbase.SplitHeads(qkv[2], m.KVHeads, hd)
	cos, sin := models.RoPETablesWithFactors(positions, hd, m.RoPEBase, m.RoPEFreqFactors)
	q = models.ApplyRoPE(q, cos, sin, m.RotateAdjacent)
	k = models.ApplyRoPE(k, cos, sin, m.RotateAdjacent)
	if cache != nil {
		k, v = cache.Update(layer, k, v)
	}
	ctxv := models.GroupedAttention(q, k, v, mask, 1/math.Sqrt(float64(hd)))
	return m.project(ctx, models.AttnOutput, modelbase.MergeHeads(ctxv), m.Dim)
}
