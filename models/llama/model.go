package llama

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX's house style for graph code
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/modelbase"
	"github.com/quanta-ml/quanta/models"
)

// Scopes and names of the model's variables (see the package documentation).
const (
	EmbeddingScope = "token_embd"
	EmbeddingName  = "embeddings"
	OutputNorm     = "output_norm"
	HeadName       = "lm_head"
)

// LayerScope returns the scope of decoder block i: "layer_<i>".
func LayerScope(i int) string { return fmt.Sprintf("layer_%d", i) }

// The projections of a decoder block, as named in its scope (and in GGUF's blk.N.<name>.weight).
const (
	AttnQ      = "attn_q"
	AttnK      = "attn_k"
	AttnV      = "attn_v"
	AttnOutput = "attn_output"
	FFNGate    = "ffn_gate"
	FFNUp      = "ffn_up"
	FFNDown    = "ffn_down"
	AttnNorm   = "attn_norm"
	FFNNorm    = "ffn_norm"
)

// Model is a Llama-architecture decoder: the configuration and the Projection its linear layers
// go through. Its graph methods read the parameters from the given context (use ctx.Reuse() for a
// loaded model, so that a missing variable is an error rather than a fresh random one).
type Model struct {
	Config
	// Projection computes every linear layer: attn_q/k/v/output and ffn_gate/up/down of each
	// block, and lm_head when the embeddings are not tied. Nil means models.Dense.
	Projection models.Projection
	// RotateAdjacent applies the rotary embedding to adjacent pairs (x[2i], x[2i+1]), llama.cpp's
	// "normal" RoPE, for q/k kernels kept in GGUF's row order; false (the default, what LoadGGUF
	// loads) rotates the two halves (x[i], x[i+HeadDim/2]) as Hugging Face's Llama does.
	RotateAdjacent bool
}

// New returns a model of the given configuration with the default projection.
func New(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Model{Config: cfg}, nil
}

func (m *Model) project(ctx *context.Context, name string, x *Node, outDim int) *Node {
	return modelbase.Project(m.Projection, ctx, name, x, outDim, false)
}

// checkTokens panics unless tokens is an integer [batch, seq] tensor.
func checkTokens(op string, tokens *Node) {
	if tokens.Rank() != 2 || !tokens.DType().IsInt() {
		panic(errors.Errorf("llama.%s: tokens %s; accepted: integer token ids of shape [batch, sequence]", op, tokens.Shape()))
	}
}

// Embed returns the embeddings [batch, seq, Dim] of integer token ids [batch, seq].
func (m *Model) Embed(ctx *context.Context, tokens *Node) *Node {
	checkTokens("Embed", tokens)
	table := m.embeddings(ctx, tokens.Graph())
	b, s := tokens.Shape().Dim(0), tokens.Shape().Dim(1)
	flat := Reshape(ConvertDType(tokens, dtypes.Int32), b*s, 1)
	return Reshape(Gather(table, flat), b, s, m.Dim)
}

// Logits applies the final RMSNorm and the output head to hidden states [..., Dim], giving
// [..., VocabSize]: with tied embeddings, the product with the embedding table (never
// transposed in memory); otherwise the "lm_head" projection.
func (m *Model) Logits(ctx *context.Context, hidden *Node) *Node {
	h := m.rmsNorm(ctx.In(OutputNorm), hidden)
	if !m.TiedEmbeddings {
		return m.project(ctx, HeadName, h, m.VocabSize)
	}
	table := m.embeddings(ctx, h.Graph())
	return DotGeneral(h, []int{h.Rank() - 1}, nil, table, []int{1}, nil)
}

// embeddings returns the token-embedding table [VocabSize, Dim], shared by Embed and the tied head.
func (m *Model) embeddings(ctx *context.Context, g *Graph) *Node {
	scope := ctx.In(EmbeddingScope)
	v := scope.GetVariable(EmbeddingName)
	if v == nil {
		v = scope.VariableWithShape(EmbeddingName, shapes.Make(dtypes.Float32, m.VocabSize, m.Dim))
	}
	if want := shapes.Make(dtypes.Float32, m.VocabSize, m.Dim); !v.Shape().Equal(want) {
		panic(errors.Errorf("llama: %s/%s is %s; the configuration needs %s", scope.Scope(), EmbeddingName, v.Shape(), want))
	}
	return v.ValueGraph(g)
}

func (m *Model) rmsNorm(ctx *context.Context, x *Node) *Node {
	return layers.RMSNorm(ctx, x).WithEpsilon(m.RMSNormEps).Done()
}

// Forward returns the logits [batch, seq, VocabSize] of token ids [batch, seq] at positions
// 0..seq-1, each position attending to itself and the positions before it (no cache).
func (m *Model) Forward(ctx *context.Context, tokens *Node) *Node {
	checkTokens("Forward", tokens)
	x := m.Embed(ctx, tokens)
	g := tokens.Graph()
	seq := tokens.Shape().Dim(1)
	positions := Iota(g, shapes.Make(dtypes.Int32, seq), 0)
	mask := LessOrEqual(Iota(g, shapes.Make(dtypes.Int32, seq, seq), 1), Iota(g, shapes.Make(dtypes.Int32, seq, seq), 0))
	for i := 0; i < m.Layers; i++ {
		x, _, _ = m.Block(ctx.In(LayerScope(i)), x, positions, mask, nil, nil, nil)
	}
	return m.Logits(ctx, x)
}

// Step runs tokens [batch, seq] at positions start..start+seq-1 (start a scalar int32 node)
// against a key/value cache: caches holds, for each layer, the keys then the values
// [batch, KVHeads, maxLen, HeadDim] of the positions before start (those after are ignored).
// It returns the logits [batch, VocabSize] of the token at index last (a scalar int32 node, in
// 0..seq-1) and the caches with this step's keys and values written at start..start+seq-1.
// start+seq must not exceed maxLen (the write would be clamped).
func (m *Model) Step(ctx *context.Context, tokens, start, last *Node, caches []*Node) (*Node, []*Node) {
	checkTokens("Step", tokens)
	if len(caches) != 2*m.Layers {
		panic(errors.Errorf("llama.Step: %d cache tensors; accepted: 2 per layer (%d)", len(caches), 2*m.Layers))
	}
	g := tokens.Graph()
	batch, seq := tokens.Shape().Dim(0), tokens.Shape().Dim(1)
	want := shapes.Make(dtypes.Float32, batch, m.KVHeads, caches[0].Shape().Dim(2), m.HeadDim)
	for _, c := range caches {
		if !c.Shape().Equal(want) {
			panic(errors.Errorf("llama.Step: cache %s; accepted: %s ([batch, KVHeads, maxLen, HeadDim], float32)", c.Shape(), want))
		}
	}
	maxLen := want.Dim(2)
	if seq > maxLen {
		panic(errors.Errorf("llama.Step: %d tokens do not fit a cache of %d positions", seq, maxLen))
	}
	start = ConvertDType(start, dtypes.Int32)
	positions := Add(Iota(g, shapes.Make(dtypes.Int32, seq), 0), start)
	// Query i (position start+i) sees cache position t if t <= start+i.
	mask := LessOrEqual(Iota(g, shapes.Make(dtypes.Int32, seq, maxLen), 1), ExpandAxes(positions, -1))
	x := m.Embed(ctx, tokens)
	newCaches := make([]*Node, len(caches))
	for i := 0; i < m.Layers; i++ {
		x, newCaches[2*i], newCaches[2*i+1] = m.Block(ctx.In(LayerScope(i)), x, positions, mask, caches[2*i], caches[2*i+1], start)
	}
	// The hidden state at index last, by a one-hot sum (the pure-Go backend has no DynamicSlice).
	pick := ConvertDType(Equal(Iota(g, shapes.Make(dtypes.Int32, seq), 0), ConvertDType(last, dtypes.Int32)), dtypes.Float32)
	h := ReduceSum(Mul(x, Reshape(pick, 1, seq, 1)), 1)
	return m.Logits(ctx, h), newCaches
}

// Block is decoder block i (ctx is its scope): x + attention(RMSNorm(x)), then
// + SwiGLU(RMSNorm(·)). positions [seq] are the tokens' positions, mask [seq, keys] says which
// keys each query sees. Without a cache (keyCache nil) the keys are this block's own; with one,
// this step's keys and values are written into the caches at start and the attention runs over
// the whole cache; the updated caches are returned.
func (m *Model) Block(ctx *context.Context, x, positions, mask, keyCache, valueCache, start *Node) (out, newKeys, newValues *Node) {
	h := m.rmsNorm(ctx.In(AttnNorm), x)
	attn, newKeys, newValues := m.Attention(ctx, h, positions, mask, keyCache, valueCache, start)
	x = Add(x, attn)
	h = m.rmsNorm(ctx.In(FFNNorm), x)
	gate := m.project(ctx, FFNGate, h, m.FFNDim)
	up := m.project(ctx, FFNUp, h, m.FFNDim)
	x = Add(x, m.project(ctx, FFNDown, Mul(Mul(gate, Sigmoid(gate)), up), m.Dim))
	return x, newKeys, newValues
}

// Attention is grouped-query self-attention with rotary position embeddings over x
// [batch, seq, Dim]; see Block for the other arguments.
func (m *Model) Attention(ctx *context.Context, x, positions, mask, keyCache, valueCache, start *Node) (out, newKeys, newValues *Node) {
	batch, seq := x.Shape().Dim(0), x.Shape().Dim(1)
	hd, groups := m.HeadDim, m.Heads/m.KVHeads
	// [batch, seq, heads, hd] -> [batch, heads, seq, hd]
	heads := func(y *Node, n int) *Node { return TransposeAllDims(Reshape(y, batch, seq, n, hd), 0, 2, 1, 3) }
	q := heads(m.project(ctx, AttnQ, x, m.Heads*hd), m.Heads)
	k := heads(m.project(ctx, AttnK, x, m.KVHeads*hd), m.KVHeads)
	v := heads(m.project(ctx, AttnV, x, m.KVHeads*hd), m.KVHeads)
	cos, sin := RoPETables(positions, hd, m.RoPEBase)
	q = ApplyRoPE(q, cos, sin, m.RotateAdjacent)
	k = ApplyRoPE(k, cos, sin, m.RotateAdjacent)
	if keyCache != nil {
		newKeys, newValues = writeCache(keyCache, k, start), writeCache(valueCache, v, start)
		k, v = newKeys, newValues
	}
	keys := k.Shape().Dim(2)
	// Query head h uses key/value head h / groups (Hugging Face's repeat_kv order).
	qg := Reshape(q, batch, m.KVHeads, groups, seq, hd)
	scores := Einsum("bkgsd,bktd->bkgst", qg, k)
	scores = MulScalar(scores, 1/math.Sqrt(float64(hd)))
	visible := BroadcastToDims(Reshape(mask, 1, 1, 1, seq, keys), batch, m.KVHeads, groups, seq, keys)
	scores = Where(visible, scores, BroadcastToDims(Scalar(x.Graph(), dtypes.Float32, float32(math.Inf(-1))), scores.Shape().Dimensions...))
	probs := Softmax(scores, -1)
	ctxv := Einsum("bkgst,bktd->bkgsd", probs, v) // [batch, kv, groups, seq, hd]
	ctxv = TransposeAllDims(Reshape(ctxv, batch, m.Heads, seq, hd), 0, 2, 1, 3)
	out = m.project(ctx, AttnOutput, Reshape(ctxv, batch, seq, m.Heads*hd), m.Dim)
	return out, newKeys, newValues
}

// writeCache writes update [batch, kv, seq, hd] into cache [batch, kv, maxLen, hd] at positions
// start..start+seq-1: DynamicUpdateSlice (in place, with the cache buffer donated) where the
// backend has it, otherwise a one-hot placement (exact: products by 0 and 1).
func writeCache(cache, update, start *Node) *Node {
	g := cache.Graph()
	if g.Backend().Capabilities().Operations[backends.OpTypeDynamicUpdateSlice] {
		zero := ScalarZero(g, dtypes.Int32)
		return DynamicUpdateSlice(cache, update, []*Node{zero, zero, start, zero})
	}
	maxLen, seq := cache.Shape().Dim(2), update.Shape().Dim(2)
	target := Add(Iota(g, shapes.Make(dtypes.Int32, seq), 0), start)
	oneHot := ConvertDType(Equal(Iota(g, shapes.Make(dtypes.Int32, maxLen, seq), 0), ExpandAxes(target, 0)), dtypes.Float32)
	placed := Einsum("ts,bksd->bktd", oneHot, update)
	kept := Reshape(OneMinus(ReduceSum(oneHot, -1)), 1, 1, maxLen, 1)
	return Add(Mul(cache, kept), placed)
}

// RoPETables returns cos and sin [seq, headDim/2] of the rotary angles positions[p]·θ_i with
// θ_i = base^(-2i/headDim), computed in float32 from inverse frequencies computed in float64.
func RoPETables(positions *Node, headDim int, base float64) (cos, sin *Node) {
	g := positions.Graph()
	inv := make([]float32, headDim/2)
	for i := range inv {
		inv[i] = float32(1 / math.Pow(base, float64(2*i)/float64(headDim)))
	}
	angles := Mul(ExpandAxes(ConvertDType(positions, dtypes.Float32), -1), ExpandAxes(Const(g, inv), 0))
	return Cos(angles), Sin(angles)
}

// ApplyRoPE rotates x [batch, heads, seq, headDim] by the angles whose cos and sin
// [seq, headDim/2] RoPETables gives. With adjacent false the pairs are (x[i], x[i+headDim/2])
// (Hugging Face's rotate_half); with adjacent true (x[2i], x[2i+1]) (llama.cpp's normal mode, for
// q/k kernels in GGUF's permuted row order). Each pair (a, b) becomes
// (a·cos − b·sin, a·sin + b·cos).
func ApplyRoPE(x, cos, sin *Node, adjacent bool) *Node {
	dims := x.Shape().Dimensions
	hd := dims[len(dims)-1]
	if hd%2 != 0 || !cos.Shape().Equal(sin.Shape()) || cos.Shape().Dim(-1) != hd/2 || cos.Shape().Dim(0) != dims[len(dims)-2] {
		panic(errors.Errorf("llama.ApplyRoPE: x %s, cos %s, sin %s; accepted: x [..., seq, headDim] with headDim even, cos and sin [seq, headDim/2]",
			x.Shape(), cos.Shape(), sin.Shape()))
	}
	cos = ExpandLeftToRank(cos, len(dims))
	sin = ExpandLeftToRank(sin, len(dims))
	if adjacent {
		pairs := Reshape(x, append(append([]int{}, dims[:len(dims)-1]...), hd/2, 2)...)
		a := Squeeze(SliceAxis(pairs, -1, AxisRange(0, 1)), -1)
		b := Squeeze(SliceAxis(pairs, -1, AxisRange(1, 2)), -1)
		ra := Sub(Mul(a, cos), Mul(b, sin))
		rb := Add(Mul(a, sin), Mul(b, cos))
		return Reshape(Concatenate([]*Node{ExpandAxes(ra, -1), ExpandAxes(rb, -1)}, -1), dims...)
	}
	a := SliceAxis(x, -1, AxisRange(0, hd/2))
	b := SliceAxis(x, -1, AxisRange(hd/2, hd))
	return Concatenate([]*Node{Sub(Mul(a, cos), Mul(b, sin)), Add(Mul(a, sin), Mul(b, cos))}, -1)
}
