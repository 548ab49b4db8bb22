package minilm

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX's house style for graph code
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/modelbase"
	"github.com/quanta-ml/quanta/models"
)

// Scopes of the model's variables (see the package documentation).
const (
	EmbeddingsScope = "embeddings"
	WordScope       = "word"
	PositionScope   = "position"
	TokenTypeScope  = "token_type"
	TableName       = "embeddings"
)

// The attention's projections of an encoder layer, as named in its scope (models.LayerScope(i));
// the layer's other projections and norms have the decoders' names: models.AttnOutput,
// models.FFNUp, models.FFNDown, models.AttnNorm, models.FFNNorm.
const (
	Query = "query"
	Key   = "key"
	Value = "value"
)

// Model is a BERT encoder with mean pooling (all-MiniLM-L6-v2): the configuration and the
// Projection its linear layers go through. Its graph methods read the parameters from the given
// context (use ctx.Reuse() for a loaded model).
type Model struct {
	Config
	// Projection computes every linear layer (query, key, value, attn_output, ffn_up, ffn_down
	// of each layer, all with biases). Nil means models.Dense.
	Projection models.Projection
}

// New returns a model of the given configuration with the default projection.
func New(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Model{Config: cfg}, nil
}

func (m *Model) project(ctx *context.Context, name string, x *Node, outDim int) *Node {
	return modelbase.Project(m.Projection, ctx, name, x, outDim, true)
}

func (m *Model) layerNorm(ctx *context.Context, x *Node) *Node {
	return layers.LayerNormalization(ctx, x, -1).Epsilon(m.LayerNormEps).Done()
}

// checkInputs panics unless ids and mask are integer or boolean [batch, seq] tensors of one shape.
func (m *Model) checkInputs(op string, ids, mask *Node) {
	if ids.Rank() != 2 || !ids.DType().IsInt() || mask == nil || !mask.Shape().EqualDimensions(ids.Shape()) ||
		!(mask.DType().IsInt() || mask.DType() == dtypes.Bool) {
		panic(errors.Errorf("minilm.%s: ids %s, mask %v; accepted: integer ids [batch, seq] and an integer or bool mask of the same dimensions",
			op, ids.Shape(), shapeOf(mask)))
	}
	if s := ids.Shape().Dim(1); s > m.MaxPositions {
		panic(errors.Errorf("minilm.%s: %d tokens; the model has %d positions", op, s, m.MaxPositions))
	}
}

func shapeOf(n *Node) any {
	if n == nil {
		return "nil"
	}
	return n.Shape()
}

// Hidden returns the last hidden states [batch, seq, Dim] of token ids [batch, seq] whose mask
// (1 or true for tokens, 0 or false for padding) says which keys attention may see. Token types
// are all 0 and positions 0..seq-1, as for single sentences.
func (m *Model) Hidden(ctx *context.Context, ids, mask *Node) *Node {
	m.checkInputs("Hidden", ids, mask)
	g := ids.Graph()
	b, s := ids.Shape().Dim(0), ids.Shape().Dim(1)
	emb := ctx.In(EmbeddingsScope)
	word := emb.In(WordScope).VariableWithShape(TableName, shapes.Make(dtypes.Float32, m.VocabSize, m.Dim)).ValueGraph(g)
	pos := emb.In(PositionScope).VariableWithShape(TableName, shapes.Make(dtypes.Float32, m.MaxPositions, m.Dim)).ValueGraph(g)
	types := emb.In(TokenTypeScope).VariableWithShape(TableName, shapes.Make(dtypes.Float32, m.TypeVocabSize, m.Dim)).ValueGraph(g)
	x := Reshape(Gather(word, Reshape(ConvertDType(ids, dtypes.Int32), b*s, 1)), b, s, m.Dim)
	x = Add(x, ExpandAxes(SliceAxis(pos, 0, AxisRange(0, s)), 0))
	x = Add(x, Reshape(SliceAxis(types, 0, AxisRange(0, 1)), 1, 1, m.Dim))
	x = m.layerNorm(emb, x)
	keys := ConvertDType(mask, dtypes.Bool)
	if mask.DType() != dtypes.Bool {
		keys = NotEqual(mask, ScalarZero(g, mask.DType()))
	}
	for i := 0; i < m.Layers; i++ {
		x = m.Layer(ctx.In(models.LayerScope(i)), x, keys)
	}
	return x
}

// Layer is encoder layer i (ctx is its scope), post-LN: x = LN(x + attention(x)), then
// x = LN(x + down(GELU(up(x)))). keys [batch, seq] (bool) masks the attended positions: their
// scores are set to float32's lowest value, as Hugging Face's BERT does, so that a row with no
// key to see (a padding row) attends evenly instead of giving NaN.
func (m *Model) Layer(ctx *context.Context, x, keys *Node) *Node {
	b, s := x.Shape().Dim(0), x.Shape().Dim(1)
	hd := m.HeadDim()
	heads := func(y *Node) *Node { return TransposeAllDims(Reshape(y, b, s, m.Heads, hd), 0, 2, 1, 3) }
	q := heads(m.project(ctx, Query, x, m.Dim))
	k := heads(m.project(ctx, Key, x, m.Dim))
	v := heads(m.project(ctx, Value, x, m.Dim))
	scores := MulScalar(Einsum("bhsd,bhtd->bhst", q, k), 1/math.Sqrt(float64(hd)))
	visible := BroadcastToDims(Reshape(keys, b, 1, 1, s), b, m.Heads, s, s)
	scores = Where(visible, scores, BroadcastToDims(Scalar(x.Graph(), dtypes.Float32, -math.MaxFloat32), b, m.Heads, s, s))
	attn := Einsum("bhst,bhtd->bhsd", Softmax(scores, -1), v)
	attn = Reshape(TransposeAllDims(attn, 0, 2, 1, 3), b, s, m.Dim)
	x = m.layerNorm(ctx.In(models.AttnNorm), Add(x, m.project(ctx, models.AttnOutput, attn, m.Dim)))
	h := GELU(m.project(ctx, models.FFNUp, x, m.FFNDim))
	return m.layerNorm(ctx.In(models.FFNNorm), Add(x, m.project(ctx, models.FFNDown, h, m.Dim)))
}

// GELU is the exact Gaussian error linear unit, x·Φ(x) = x/2·(1 + erf(x/√2)) (BERT's "gelu").
func GELU(x *Node) *Node {
	return Mul(MulScalar(x, 0.5), OnePlus(Erf(MulScalar(x, 1/math.Sqrt2))))
}

// MaskedMean averages hidden [batch, seq, Dim] over the positions where mask [batch, seq] is set
// (sentence-transformers' mean pooling: the sum of the masked states over max(count, 1e-9)).
func MaskedMean(hidden, mask *Node) *Node {
	w := ConvertDType(mask, hidden.DType())
	if mask.DType() != dtypes.Bool {
		w = ConvertDType(NotEqual(mask, ScalarZero(mask.Graph(), mask.DType())), hidden.DType())
	}
	sum := ReduceSum(Mul(hidden, ExpandAxes(w, -1)), 1)
	count := Max(ReduceSum(w, 1), Scalar(hidden.Graph(), hidden.DType(), 1e-9))
	return Div(sum, ExpandAxes(count, -1))
}

// Normalize divides each row of x [batch, Dim] by its Euclidean norm, at least 1e-12
// (torch.nn.functional.normalize, sentence-transformers' Normalize).
func Normalize(x *Node) *Node {
	norm := Sqrt(ReduceSum(Square(x), -1))
	return Div(x, ExpandAxes(Max(norm, Scalar(x.Graph(), x.DType(), 1e-12)), -1))
}

// Embed returns the sentence embeddings [batch, Dim] of token ids [batch, seq] with their mask:
// Hidden, MaskedMean over the mask, Normalize.
func (m *Model) Embed(ctx *context.Context, ids, mask *Node) *Node {
	return Normalize(MaskedMean(m.Hidden(ctx, ids, mask), mask))
}
