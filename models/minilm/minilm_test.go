package minilm_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/minilm"
	"github.com/quanta-ml/quanta/safetensors"
	"github.com/quanta-ml/quanta/tokenizer"
)

var tiny = minilm.Config{VocabSize: 30, Dim: 8, Layers: 2, Heads: 2, FFNDim: 12, MaxPositions: 16, TypeVocabSize: 2, LayerNormEps: 1e-12}

func TestGELU(t *testing.T) {
	backend := testutil.Backend(t)
	out := graph.MustExecOnce(backend, minilm.GELU, []float32{-1, 0, 1, 2})
	// x·Φ(x) with Φ the standard normal CDF: Φ(1) = 0.8413447, Φ(2) = 0.9772499.
	want := []float64{-1 * (1 - 0.8413447461), 0, 0.8413447461, 2 * 0.9772498681}
	for i, got := range out.Value().([]float32) {
		if math.Abs(float64(got)-want[i]) > 1e-6 {
			t.Errorf("GELU element %d = %g, want %g", i, got, want[i])
		}
	}
}

func TestPooling(t *testing.T) {
	backend := testutil.Backend(t)
	hidden := [][][]float32{{{1, 2}, {3, 4}, {100, 100}}, {{0, 3}, {9, 9}, {9, 9}}}
	mask := [][]int32{{1, 1, 0}, {1, 0, 0}}
	out := graph.MustExecOnce(backend, func(h, m *graph.Node) *graph.Node {
		return minilm.Normalize(minilm.MaskedMean(h, m))
	}, hidden, mask)
	// Means (2, 3) and (0, 3), divided by their norms √13 and 3.
	want := [][]float64{{2 / math.Sqrt(13), 3 / math.Sqrt(13)}, {0, 1}}
	got := out.Value().([][]float32)
	for i := range want {
		for j := range want[i] {
			if math.Abs(float64(got[i][j])-want[i][j]) > 1e-6 {
				t.Errorf("pooled[%d][%d] = %g, want %g", i, j, got[i][j], want[i][j])
			}
		}
	}
}

func randomModel(t *testing.T, backend backends.Backend) (*context.Context, *minilm.Model) {
	t.Helper()
	m, err := minilm.New(tiny)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.New()
	ctx.SetParam(context.ParamInitialSeed, int64(7))
	ctx.SetParam("initializer_stddev", 0.5)
	context.MustExecOnce(backend, ctx, func(ctx *context.Context, ids, mask *graph.Node) *graph.Node {
		return m.Embed(ctx, ids, mask)
	}, [][]int32{{1, 2}}, [][]int32{{1, 1}})
	return ctx, m
}

// randomEmbed returns the embedding by randomModel's model of a batch of token ids and their
// attention mask.
func randomEmbed(t *testing.T) func(ids, mask [][]int32) [][]float32 {
	t.Helper()
	backend := testutil.Backend(t)
	ctx, m := randomModel(t, backend)
	exec := context.MustNewExec(backend, ctx.Reuse(), func(ctx *context.Context, ids, mask *graph.Node) *graph.Node {
		return m.Embed(ctx, ids, mask)
	})
	return func(ids, mask [][]int32) [][]float32 { return exec.MustExec(ids, mask)[0].Value().([][]float32) }
}

// TestPaddingInvariance: padding positions change nothing, in a batch or alone.
func TestPaddingInvariance(t *testing.T) {
	embed := randomEmbed(t)
	alone := embed([][]int32{{5, 6, 7}}, [][]int32{{1, 1, 1}})[0]
	batch := embed([][]int32{{5, 6, 7, 0, 0, 0}, {9, 8, 7, 6, 5, 4}}, [][]int32{{1, 1, 1, 0, 0, 0}, {1, 1, 1, 1, 1, 1}})
	norm := 0.0
	for i := range alone {
		norm += float64(alone[i] * alone[i])
		if math.Abs(float64(alone[i]-batch[0][i])) > 1e-5 {
			t.Errorf("element %d: %g alone, %g padded in a batch", i, alone[i], batch[0][i])
		}
	}
	if math.Abs(norm-1) > 1e-5 {
		t.Errorf("squared norm %g, want 1", norm)
	}
}

// TestPaddingRow: a batch row that is all padding (a fixed-size batch not filled) embeds as the
// zero vector, as sentence-transformers embeds it (its attention sees every position evenly, the
// mean over no token is 0), not NaN, and leaves the other rows as they are alone.
func TestPaddingRow(t *testing.T) {
	embed := randomEmbed(t)
	alone := embed([][]int32{{5, 6, 7}}, [][]int32{{1, 1, 1}})[0]
	batch := embed([][]int32{{5, 6, 7}, {0, 0, 0}}, [][]int32{{1, 1, 1}, {0, 0, 0}})
	for i := range alone {
		if batch[1][i] != 0 {
			t.Errorf("padding row element %d = %g, want 0", i, batch[1][i])
		}
		if math.Abs(float64(alone[i]-batch[0][i])) > 1e-5 {
			t.Errorf("element %d: %g alone, %g beside a padding row", i, alone[i], batch[0][i])
		}
	}
}

// tinyCheckpoint writes a BertModel checkpoint of the tiny configuration; skip leaves a tensor out.
func tinyCheckpoint(t testing.TB, skip string, edit func(*safetensors.Tensor)) ([]byte, map[string][]float32) {
	t.Helper()
	var list []safetensors.Tensor
	values := map[string][]float32{}
	seed := 0
	add := func(name string, shape ...int) {
		seed++
		n := 1
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(0.3 * math.Sin(float64(seed)*2.1+float64(i)*0.71))
		}
		values[name] = v
		st, err := safetensors.FromTensor(name, tensors.FromFlatDataAndDimensions(v, shape...))
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(&st)
		}
		if name != skip {
			list = append(list, st)
		}
	}
	c := tiny
	add("embeddings.word_embeddings.weight", c.VocabSize, c.Dim)
	add("embeddings.position_embeddings.weight", c.MaxPositions, c.Dim)
	add("embeddings.token_type_embeddings.weight", c.TypeVocabSize, c.Dim)
	add("embeddings.LayerNorm.weight", c.Dim)
	add("embeddings.LayerNorm.bias", c.Dim)
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("encoder.layer.%d.", l)
		for _, lin := range []struct {
			name    string
			in, out int
		}{{"attention.self.query", c.Dim, c.Dim}, {"attention.self.key", c.Dim, c.Dim}, {"attention.self.value", c.Dim, c.Dim},
			{"attention.output.dense", c.Dim, c.Dim}, {"intermediate.dense", c.Dim, c.FFNDim}, {"output.dense", c.FFNDim, c.Dim}} {
			add(p+lin.name+".weight", lin.out, lin.in)
			add(p+lin.name+".bias", lin.out)
		}
		for _, ln := range []string{"attention.output.LayerNorm", "output.LayerNorm"} {
			add(p+ln+".weight", c.Dim)
			add(p+ln+".bias", c.Dim)
		}
	}
	add("pooler.dense.weight", c.Dim, c.Dim)
	var b bytes.Buffer
	if err := safetensors.Write(&b, list, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), values
}

func TestLoadSafetensors(t *testing.T) {
	data, values := tinyCheckpoint(t, "", nil)
	ctx := context.New()
	m, err := minilm.LoadSafetensors(ctx, testutil.FromBytes(t, safetensors.Read, data), tiny, minilm.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kernel := ctx.InspectVariable("/layer_1/ffn_up/dense", "weights").MustValue().Value().([][]float32)
	w := values["encoder.layer.1.intermediate.dense.weight"] // [out=12][in=8]
	for r := 0; r < tiny.FFNDim; r++ {
		for c := 0; c < tiny.Dim; c++ {
			if kernel[c][r] != w[r*tiny.Dim+c] {
				t.Fatalf("ffn_up kernel[%d][%d] = %g, want weight[%d][%d] = %g", c, r, kernel[c][r], r, c, w[r*tiny.Dim+c])
			}
		}
	}
	bias := ctx.InspectVariable("/layer_0/query/dense", "biases").MustValue().Value().([]float32)
	gain := ctx.InspectVariable("/layer_0/ffn_norm/layer_normalization", "gain").MustValue().Value().([]float32)
	if bias[3] != values["encoder.layer.0.attention.self.query.bias"][3] || gain[2] != values["encoder.layer.0.output.LayerNorm.weight"][2] {
		t.Error("biases or LayerNorm gains are not the checkpoint's")
	}
	if n, want := ctx.NumVariables(), 5+tiny.Layers*16; n != want {
		t.Errorf("%d variables, want %d", n, want)
	}
	backend := testutil.Backend(t)
	out := context.MustExecOnce(backend, ctx.Reuse(), func(ctx *context.Context, ids, mask *graph.Node) *graph.Node {
		return m.Embed(ctx, ids, mask)
	}, [][]int32{{1, 2, 3}}, [][]int32{{1, 1, 1}})
	if out.Shape().Dim(1) != tiny.Dim {
		t.Errorf("embedding shape %s", out.Shape())
	}
}

func TestLoadSafetensorsErrors(t *testing.T) {
	good, _ := tinyCheckpoint(t, "", nil)
	missing, _ := tinyCheckpoint(t, "encoder.layer.1.output.dense.bias", nil)
	i32, _ := tinyCheckpoint(t, "", func(st *safetensors.Tensor) {
		if st.Name == "encoder.layer.0.attention.self.key.weight" {
			st.DType = safetensors.I32
		}
	})
	tests := []struct {
		name string
		data []byte
		cfg  minilm.Config
		opts minilm.LoadOptions
		want string
	}{
		{"missing", missing, tiny, minilm.LoadOptions{}, `tensor "encoder.layer.1.output.dense.bias"`},
		{"dtype", i32, tiny, minilm.LoadOptions{}, "encoder.layer.0.attention.self.key.weight I32[8 8]; accepted: F32, F16, BF16 or F64"},
		{"shape", good, func() minilm.Config { c := tiny; c.FFNDim = 16; return c }(), minilm.LoadOptions{}, "F32[12 8]; the configuration needs [16 8]"},
		{"config", good, func() minilm.Config { c := tiny; c.Heads = 3; return c }(), minilm.LoadOptions{}, "hidden_size = 8 is not a multiple of num_attention_heads = 3"},
		{"kernel", good, tiny, minilm.LoadOptions{Kernel: func(scope string, k *tensors.Tensor) ([]models.Variable, error) {
			if scope == "/layer_1/ffn_down" {
				return nil, errors.New("no room")
			}
			return models.DenseKernel(scope, k)
		}}, "kernel of encoder.layer.1.output.dense.weight: no room"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.New()
			_, err := minilm.LoadSafetensors(ctx, testutil.FromBytes(t, safetensors.Read, tc.data), tc.cfg, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want one containing %q", err, tc.want)
			}
			if ctx.NumVariables() != 0 {
				t.Errorf("the failed load left %d variables", ctx.NumVariables())
			}
		})
	}
	ctx := context.New()
	ctx.In("embeddings").In("word").VariableWithValue("embeddings", []float32{1})
	if _, err := minilm.LoadSafetensors(ctx, testutil.FromBytes(t, safetensors.Read, good), tiny, minilm.LoadOptions{}); err == nil || ctx.NumVariables() != 1 {
		t.Errorf("loading into a context with the embeddings: %v, %d variables", err, ctx.NumVariables())
	}
	if _, err := safetensors.Read(bytes.NewReader(good[:len(good)-3]), int64(len(good)-3)); !errors.Is(err, safetensors.ErrCorrupt) {
		t.Errorf("a truncated checkpoint: %v", err)
	}
}

// TestMiniLM runs the real all-MiniLM-L6-v2: unit-norm embeddings, and the paraphrase closer than
// the unrelated sentence.
func TestMiniLM(t *testing.T) {
	_, _, v := embed(t, "", []string{"A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby."})
	dot := func(a, b []float32) float64 {
		s := 0.0
		for i := range a {
			s += float64(a[i]) * float64(b[i])
		}
		return s
	}
	for i := range v {
		if n := dot(v[i], v[i]); math.Abs(n-1) > 1e-5 {
			t.Errorf("embedding %d has squared norm %g", i, n)
		}
	}
	if close, far := dot(v[0], v[1]), dot(v[0], v[2]); close < 0.5 || far > 0.2 {
		t.Errorf("similarities: paraphrase %.4f, unrelated %.4f", close, far)
	}
}

// TestConfigFromJSONSpecialFile: config.json that is a device (or a FIFO) is refused by name, as
// safetensors.Open and gguf.Open refuse one: os.ReadFile of /dev/zero never ends and grows
// without bound (over a gigabyte a second).
func TestConfigFromJSONSpecialFile(t *testing.T) {
	var err error
	testutil.Within(t, 3*time.Second, "ConfigFromJSON(/dev/zero)", func() { _, err = minilm.ConfigFromJSON("/dev/zero") })
	if err == nil || !strings.Contains(err.Error(), "regular file") {
		t.Errorf("ConfigFromJSON(/dev/zero): error %v; want one refusing a file that is not a regular file", err)
	}
}

// TestEmbedderVocabulary: a tokenizer whose ids go past the model's word table (a vocab.txt or
// tokenizer.json of more tokens than config.json's vocab_size) is an error naming both sizes:
// the lookup of an id past the table is clamped by the backend, a silently wrong embedding.
func TestEmbedderVocabulary(t *testing.T) {
	backend := testutil.Backend(t)
	ctx, m := randomModel(t, backend)
	tokens := []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
	for i := len(tokens); i < m.VocabSize+10; i++ {
		tokens = append(tokens, fmt.Sprintf("w%d", i))
	}
	tok, err := tokenizer.NewWordPiece(tokens, tokenizer.BertOptions())
	if err != nil {
		t.Fatal(err)
	}
	e, err := minilm.NewEmbedder(backend, ctx, m, tok)
	if err == nil {
		v, embedErr := e.Embed([]string{fmt.Sprintf("w%d", m.VocabSize+5)}) // an id past the table
		t.Fatalf("NewEmbedder with %d tokens for a table of %d: no error; Embed gave %v, %v", len(tokens), m.VocabSize, v != nil, embedErr)
	}
	if !strings.Contains(err.Error(), "vocab_size") {
		t.Errorf("error %v; want one naming vocab_size", err)
	}
}
