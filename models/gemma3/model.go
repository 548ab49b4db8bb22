package gemma3

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX's house style for graph code
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/layers/activations"
	"github.com/quanta-ml/quanta/internal/modelbase"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/qlayers"
)

// Architecture is the "general.architecture" of the GGUF files this package loads.
const Architecture = "gemma3"

// The names of the norms of a Gemma-3 block beyond those every decoder has (models.AttnNorm,
// models.FFNNorm), as named in its scope and in GGUF's blk.N.<name>.weight.
const (
	AttnQNorm    = "attn_q_norm"
	AttnKNorm    = "attn_k_norm"
	PostAttnNorm = "post_attention_norm"
	PostFFNNorm  = "post_ffw_norm"
)

// Model is a Gemma-3 decoder: the configuration and the hooks its linear layers and its
// embedding table go through. Its graph methods read the parameters from the given context (use
// ctx.Reuse() for a loaded model).
type Model struct {
	Config
	models.DecoderHooks
}

// New returns a model of the given configuration with the default projection.
func New(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Model{Config: cfg}, nil
}

var _ models.LanguageModel = (*Model)(nil)

func (m *Model) project(ctx *context.Context, name string, x *Node, outDim int) *Node {
	return modelbase.Project(m.Projection, ctx, name, x, outDim, false)
}

// rmsNorm is RMSNorm over the last axis with the scale as the GGUF stores it (llama.cpp's
// converter stores Gemma's 1 + weight, so the scale multiplies as it is).
func (m *Model) rmsNorm(ctx *context.Context, x *Node) *Node {
	return layers.RMSNorm(ctx, x).WithEpsilon(m.RMSNormEps).Done()
}

// Embed returns the embeddings [batch, seq, Dim] of integer token ids [batch, seq], scaled by
// √Dim (in float32, as Gemma does).
func (m *Model) Embed(ctx *context.Context, tokens *Node) *Node {
	modelbase.CheckTokens("gemma3.Embed", tokens)
	x := qlayers.Lookup(modelbase.EmbeddingTable(m.Table, ctx, tokens.Graph(), m.VocabSize, m.Dim), tokens)
	return MulScalar(x, float64(float32(math.Sqrt(float64(m.Dim)))))
}

// Logits applies the final RMSNorm and the output head to hidden states [..., Dim], giving
// [..., VocabSize]: with tied embeddings, the product with the embedding table (never
// transposed in memory); otherwise the "lm_head" projection; then the soft cap, if any.
func (m *Model) Logits(ctx *context.Context, hidden *Node) *Node {
	h := m.rmsNorm(ctx.In(models.OutputNorm), hidden)
	logits := modelbase.Head(m.Projection, m.Table, ctx, h, m.TiedEmbeddings, m.VocabSize, m.Dim)
	if m.FinalSoftcap > 0 {
		logits = MulScalar(Tanh(DivScalar(logits, m.FinalSoftcap)), m.FinalSoftcap)
	}
	return logits
}

// Forward returns the logits [batch, seq, VocabSize] of token ids [batch, seq] at positions
// 0..seq-1, each position attending to itself and the positions before it (within the sliding
// window on the sliding-window layers; no cache).
func (m *Model) Forward(ctx *context.Context, tokens *Node) *Node {
	modelbase.CheckTokens("gemma3.Forward", tokens)
	x := m.Embed(ctx, tokens)
	seq := tokens.Shape().Dim(1)
	positions := Iota(tokens.Graph(), shapes.Make(dtypes.Int32, seq), 0)
	masks := m.masks(func(window int) *Node {
		if window == 0 {
			return models.CausalMask(positions, seq)
		}
		return models.SlidingCausalMask(positions, seq, window)
	})
	for i := 0; i < m.Layers; i++ {
		x = m.Block(ctx.In(models.LayerScope(i)), x, positions, masks[i], nil, i)
	}
	return m.Logits(ctx, x)
}

// masks returns each layer's attention mask, built once per kind by mask(window) (window 0: the
// global layers' causal mask).
func (m *Model) masks(mask func(window int) *Node) []*Node {
	var global, local *Node
	out := make([]*Node, m.Layers)
	for i := range out {
		if m.Sliding(i) {
			if local == nil {
				local = mask(m.SlidingWindow)
			}
			out[i] = local
		} else {
			if global == nil {
				global = mask(0)
			}
			out[i] = global
		}
	}
	return out
}

// Step runs tokens [batch, seq] at positions cache.Start().. against a key/value cache (see
// models.KVCache: per layer keys then values [batch, KVHeads, length, HeadDim]) and returns the
// logits [batch, VocabSize] of the token at index last (a scalar integer node, in 0..seq-1: a
// last outside gives NaN logits, a constant one panics); the chunk's keys and values are written
// through cache.
func (m *Model) Step(ctx *context.Context, tokens, last *Node, cache *models.KVCache) *Node {
	modelbase.CheckTokens("gemma3.Step", tokens)
	modelbase.CheckCache("gemma3.Step", cache, m.Layers)
	seq := tokens.Shape().Dim(1)
	positions := cache.Positions(seq)
	masks := m.masks(func(window int) *Node {
		if window == 0 {
			return cache.Mask(seq)
		}
		return cache.SlidingMask(seq, window)
	})
	x := m.Embed(ctx, tokens)
	for i := 0; i < m.Layers; i++ {
		x = m.Block(ctx.In(models.LayerScope(i)), x, positions, masks[i], cache, i)
	}
	return m.Logits(ctx, modelbase.PickRow("gemma3.Step", x, last))
}

// Block is decoder block layer (ctx is its scope): x + PostNorm(attention(Norm(x))), then
// + PostNorm(down(gelu_tanh(gate(h)) · up(h))) with h = Norm(·). positions [seq] are the
// tokens' positions, mask [seq, keys] says which keys each query sees. Without a cache (nil) the
// keys are this block's own; with one, this step's keys and values are written into the layer's
// cache and the attention runs over the cache's window.
func (m *Model) Block(ctx *context.Context, x, positions, mask *Node, cache *models.KVCache, layer int) *Node {
	h := m.rmsNorm(ctx.In(models.AttnNorm), x)
	a := m.Attention(ctx, h, positions, mask, cache, layer)
	x = Add(x, m.rmsNorm(ctx.In(PostAttnNorm), a))
	h = m.rmsNorm(ctx.In(models.FFNNorm), x)
	gateUp := modelbase.ProjectSplit(m.Projection, ctx, m.FusedGateUp, models.FFNGateUp, []string{models.FFNGate, models.FFNUp}, h, false, m.FFNDim, m.FFNDim)
	f := m.project(ctx, models.FFNDown, Mul(activations.GeluApproximate(gateUp[0]), gateUp[1]), m.Dim)
	return Add(x, m.rmsNorm(ctx.In(PostFFNNorm), f))
}

// Attention is grouped-query self-attention over x [batch, seq, Dim]: q, k and v projections,
// RMSNorm of each query and key head, rotary embeddings (halves rotated, the layer's base),
// queries scaled by QueryScale; see Block for the other arguments.
func (m *Model) Attention(ctx *context.Context, x, positions, mask *Node, cache *models.KVCache, layer int) *Node {
	hd := m.HeadDim
	qkv := modelbase.ProjectSplit(m.Projection, ctx, m.FusedQKV, models.AttnQKV, []string{models.AttnQ, models.AttnK, models.AttnV}, x, false, m.Heads*hd, m.KVHeads*hd, m.KVHeads*hd)
	q := m.rmsNorm(ctx.In(AttnQNorm), modelbase.SplitHeads(qkv[0], m.Heads, hd))
	k := m.rmsNorm(ctx.In(AttnKNorm), modelbase.SplitHeads(qkv[1], m.KVHeads, hd))
	v := modelbase.SplitHeads(qkv[2], m.KVHeads, hd)
	base, pos := m.RoPEBase, positions
	if m.Sliding(layer) {
		base = m.RoPEBaseLocal
	} else if m.RoPEScale != 1 {
		pos = MulScalar(ConvertDType(positions, dtypes.Float32), m.RoPEScale)
	}
	cos, sin := models.RoPETables(pos, hd, base)
	q = MulScalar(models.ApplyRoPE(q, cos, sin, false), m.QueryScale)
	k = models.ApplyRoPE(k, cos, sin, false)
	if cache != nil {
		k, v = cache.Update(layer, k, v)
	}
	out := models.GroupedAttention(q, k, v, mask, 1)
	return m.project(ctx, models.AttnOutput, modelbase.MergeHeads(out), m.Dim)
}
