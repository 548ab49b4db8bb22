package llama_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/llama"
)

// hfKernels holds, per GGUF tensor name of a kernel, the Hugging Face weight [out][in] it was
// made from.
type hfKernels map[string][][]float32

// tinyGGUF writes the tiny configuration as a llama GGUF with float32 tensors, q/k permuted as
// llama.cpp's converter permutes them; skip names a tensor to leave out.
func tinyGGUF(skip string, overrides ...ggufbuild.KV) ([]byte, hfKernels) {
	return ggufOf(tiny, nil, skip, overrides...)
}

// ggufOf writes configuration c as tinyGGUF does, the kernels and table named in types (by their
// name in the block, e.g. "attn_q", or "token_embd") stored in that block type; overrides
// replace metadata (ggufbuild.Override).
func ggufOf(c llama.Config, types map[string]gguf.Type, skip string, overrides ...ggufbuild.KV) ([]byte, hfKernels) {
	kvs := decodertest.Metadata("llama", models.DecoderConfig(c), ggufbuild.KV{Key: "llama.rope.dimension_count", Value: uint32(c.HeadDim)})
	hf := hfKernels{}
	var ts []ggufbuild.Tensor
	seed := 0
	add := func(name string, v []float32, dims ...uint64) {
		seed++
		if name == skip {
			return
		}
		short := strings.TrimSuffix(name[strings.LastIndex(name[:len(name)-len(".weight")], ".")+1:], ".weight")
		ts = append(ts, decodertest.Tensor(name, types[short], v, dims...))
	}
	kernel := func(name string, in, out, heads int) {
		w := make([][]float32, out)
		flat := decodertest.Values(seed+100, in*out)
		for r := range w {
			w[r] = flat[r*in : (r+1)*in]
		}
		hf[name] = w
		stored := make([]float32, 0, in*out)
		for r := 0; r < out; r++ {
			src := r
			if heads > 0 { // GGUF row h·d + 2i + j holds Hugging Face's row h·d + j·d/2 + i
				d := out / heads
				h, within := r/d, r%d
				i, j := within/2, within%2
				src = h*d + j*d/2 + i
			}
			stored = append(stored, w[src]...)
		}
		add(name, stored, uint64(in), uint64(out))
	}
	add("token_embd.weight", decodertest.Values(1, c.VocabSize*c.Dim), uint64(c.Dim), uint64(c.VocabSize))
	for l := 0; l < c.Layers; l++ {
		blk := fmt.Sprintf("blk.%d.", l)
		add(blk+"attn_norm.weight", decodertest.Values(10+l, c.Dim), uint64(c.Dim))
		kernel(blk+"attn_q.weight", c.Dim, c.Heads*c.HeadDim, c.Heads)
		kernel(blk+"attn_k.weight", c.Dim, c.KVHeads*c.HeadDim, c.KVHeads)
		kernel(blk+"attn_v.weight", c.Dim, c.KVHeads*c.HeadDim, 0)
		kernel(blk+"attn_output.weight", c.Heads*c.HeadDim, c.Dim, 0)
		add(blk+"ffn_norm.weight", decodertest.Values(20+l, c.Dim), uint64(c.Dim))
		kernel(blk+"ffn_gate.weight", c.Dim, c.FFNDim, 0)
		kernel(blk+"ffn_up.weight", c.Dim, c.FFNDim, 0)
		kernel(blk+"ffn_down.weight", c.FFNDim, c.Dim, 0)
	}
	add("output_norm.weight", decodertest.Values(3, c.Dim), uint64(c.Dim))
	return ggufbuild.Build(ggufbuild.Override(kvs, overrides...), ts), hf
}

// checkKernels checks that the float kernels of the projections names of layer in ctx are the
// Hugging Face weights hf holds for them, transposed.
func checkKernels(t *testing.T, ctx *context.Context, hf hfKernels, layer int, names ...string) {
	t.Helper()
	for _, name := range names {
		got := variable(t, ctx, fmt.Sprintf("/layer_%d/%s/dense", layer, name), "weights").([][]float32)
		w := hf[fmt.Sprintf("blk.%d.%s.weight", layer, name)]
		for r := range w {
			for c := range w[r] {
				if got[c][r] != w[r][c] {
					t.Fatalf("%s kernel[%d][%d] = %g, want Hugging Face's weight[%d][%d] = %g", name, c, r, got[c][r], r, c, w[r][c])
				}
			}
		}
	}
}

func variable(t *testing.T, ctx *context.Context, scope, name string) any {
	t.Helper()
	v := ctx.InspectVariable(scope, name)
	if v == nil {
		t.Fatalf("variable %s/%s missing", scope, name)
	}
	return v.MustValue().Value()
}

func TestLoadGGUF(t *testing.T) {
	data, hf := tinyGGUF("")
	ctx, m := decodertest.Load(t, llama.LoadGGUF, data, llama.LoadOptions{})
	wantCfg := tiny
	wantCfg.RMSNormEps = float64(float32(tiny.RMSNormEps)) // GGUF stores it as float32
	if m.Config != wantCfg {
		t.Errorf("config %+v, want %+v", m.Config, wantCfg)
	}
	// Kernels are the Hugging Face weights transposed: q/k un-permuted, the others as stored.
	checkKernels(t, ctx, hf, 1, "attn_q", "attn_k", "attn_v", "attn_output", "ffn_down")
	emb := variable(t, ctx, "/token_embd", "embeddings").([][]float32)
	if want := decodertest.Values(1, tiny.VocabSize*tiny.Dim); emb[2][3] != want[2*tiny.Dim+3] {
		t.Errorf("embedding[2][3] = %g, want %g", emb[2][3], want[2*tiny.Dim+3])
	}
	if got := variable(t, ctx, "/layer_0/ffn_norm/rms_norm", "scale").([]float32); got[5] != decodertest.Values(20, tiny.Dim)[5] {
		t.Errorf("ffn_norm scale[5] = %g", got[5])
	}
	if n := ctx.NumVariables(); n != 2+tiny.Layers*9 {
		t.Errorf("%d variables, want %d", n, 2+tiny.Layers*9)
	}

	backend := testutil.Backend(t)
	tokens := []int32{3, 1, 4, 1, 5}
	want := decodertest.Forward(t, backend, ctx, m, tokens)

	t.Run("RotateAdjacent", func(t *testing.T) {
		ctx := context.New()
		m, err := llama.LoadGGUF(ctx, decodertest.Open(t, data), llama.LoadOptions{RotateAdjacent: true})
		if err != nil || !m.RotateAdjacent {
			t.Fatal(err)
		}
		decodertest.SameLogits(t, "GGUF order with adjacent pairs differs", decodertest.Forward(t, backend, ctx, m, tokens), want)
	})
	t.Run("UntieHead", func(t *testing.T) {
		ctx := context.New()
		m, err := llama.LoadGGUF(ctx, decodertest.Open(t, data), llama.LoadOptions{UntieHead: true})
		if err != nil || m.TiedEmbeddings {
			t.Fatal(err)
		}
		head := variable(t, ctx, "/lm_head/dense", "weights").([][]float32)
		if head[3][2] != emb[2][3] {
			t.Errorf("lm_head[3][2] = %g, want embedding[2][3] = %g", head[3][2], emb[2][3])
		}
		decodertest.SameLogits(t, "untied head differs", decodertest.Forward(t, backend, ctx, m, tokens), want)
	})
	t.Run("Kernel", func(t *testing.T) {
		ctx := context.New()
		var scopes []string
		_, err := llama.LoadGGUF(ctx, decodertest.Open(t, data), llama.LoadOptions{LoadOptions: models.LoadOptions{Kernel: func(scope string, k *tensors.Tensor) ([]models.Variable, error) {
			scopes = append(scopes, scope)
			return []models.Variable{{Scope: scope + "/custom", Name: "w", Value: k}}, nil
		}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(scopes) != 7*tiny.Layers || scopes[0] != "/layer_0/attn_q" || ctx.InspectVariable("/layer_1/ffn_down/custom", "w") == nil {
			t.Errorf("Kernel called for %v", scopes)
		}
	})
}

// TestLoadGGUFErrors: every failure leaves the context without a variable.
func TestLoadGGUFErrors(t *testing.T) {
	good, _ := tinyGGUF("")
	missing, _ := tinyGGUF("blk.1.ffn_up.weight")
	badShape, _ := tinyGGUF("", ggufbuild.KV{Key: "llama.feed_forward_length", Value: uint32(32)})
	badArch, _ := tinyGGUF("", ggufbuild.KV{Key: "general.architecture", Value: "gpt2"})
	badHeads, _ := tinyGGUF("", ggufbuild.KV{Key: "llama.attention.head_count_kv", Value: uint32(3)})
	tests := []struct {
		name string
		data []byte
		opts llama.LoadOptions
		pre  func(ctx *context.Context)
		want string
	}{
		{"missing tensor", missing, llama.LoadOptions{}, nil, `tensor "blk.1.ffn_up.weight"`},
		{"shape", badShape, llama.LoadOptions{}, nil, "blk.0.ffn_gate.weight F32 [16 24] has row-major shape [24 16]; the configuration needs [32 16] (llama.feed_forward_length, llama.embedding_length)"},
		{"architecture", badArch, llama.LoadOptions{}, nil, `architecture "gpt2"`},
		{"heads", badHeads, llama.LoadOptions{}, nil, "llama.attention.head_count_kv = 3 does not divide llama.attention.head_count = 4"},
		{"kernel error", good, llama.LoadOptions{LoadOptions: models.LoadOptions{Kernel: func(scope string, k *tensors.Tensor) ([]models.Variable, error) {
			if strings.HasPrefix(scope, "/layer_1/") {
				return nil, errors.New("quantizer failed")
			}
			return models.DenseKernel(scope, k)
		}}}, nil, "kernel of blk.1.attn_q.weight: quantizer failed"},
		{"existing variables", good, llama.LoadOptions{}, func(ctx *context.Context) {
			ctx.In("token_embd").VariableWithValue("embeddings", []float32{1})
		}, "already holds /token_embd/embeddings"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.New()
			if tc.pre != nil {
				tc.pre(ctx)
			}
			before := ctx.NumVariables()
			_, err := llama.LoadGGUF(ctx, decodertest.Open(t, tc.data), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want one containing %q", err, tc.want)
			}
			if n := ctx.NumVariables(); n != before {
				t.Errorf("the failed load left %d variables (had %d)", n, before)
			}
		})
	}
	// A truncated file never reaches the loader: Open/Read reject it.
	if _, err := gguf.Read(bytes.NewReader(good[:len(good)-100]), int64(len(good)-100)); !errors.Is(err, gguf.ErrCorrupt) {
		t.Errorf("truncated file: %v", err)
	}
}

// TestConfigVocabMismatch: a file whose llama.vocab_size (the embedding table's rows) disagrees
// with its token list is corrupt, as llama.cpp finds it: the model would pick ids the tokenizer
// has no text for (quanta run prints nothing for them), or the tokenizer give ids outside the
// table. The error names both keys.
func TestConfigVocabMismatch(t *testing.T) {
	for _, n := range []int{tiny.VocabSize - 1, tiny.VocabSize + 1} {
		tokens := make([]string, n)
		for i := range tokens {
			tokens[i] = fmt.Sprintf("t%d", i)
		}
		data, _ := tinyGGUF("", ggufbuild.KV{Key: "tokenizer.ggml.tokens", Value: tokens})
		_, err := llama.ConfigFromGGUF(decodertest.Open(t, data))
		if err == nil || !strings.Contains(err.Error(), "llama.vocab_size") || !strings.Contains(err.Error(), "tokenizer.ggml.tokens") {
			t.Errorf("%d tokens for llama.vocab_size = %d: error %v; want one naming both keys", n, tiny.VocabSize, err)
		}
	}
}

// TestLoadGGUFKeyLength: heads wider than embedding_length / head_count, given by
// llama.attention.key_length as llama.cpp reads it (Mistral-Nemo's GGUF is one: 32 heads of 128
// over 5120), load with that head width, q/k rows un-permuted per head of that width.
func TestLoadGGUFKeyLength(t *testing.T) {
	c := tiny
	c.HeadDim = 8 // 4 heads of 8 over a width of 16
	data, hf := ggufOf(c, nil, "", ggufbuild.KV{Key: "llama.attention.key_length", Value: uint32(8)},
		ggufbuild.KV{Key: "llama.attention.value_length", Value: uint32(8)})
	got, err := llama.ConfigFromGGUF(decodertest.Open(t, data))
	if err != nil {
		t.Fatal(err)
	}
	want := c
	want.RMSNormEps = float64(float32(c.RMSNormEps))
	if got != want {
		t.Errorf("config %+v, want %+v", got, want)
	}
	ctx, m := decodertest.Load(t, llama.LoadGGUF, data, llama.LoadOptions{})
	checkKernels(t, ctx, hf, 0, "attn_q", "attn_k", "attn_output")
	logits := decodertest.Forward(t, testutil.Backend(t), ctx, m, []int32{3, 1, 4})
	if len(logits) != 3 || len(logits[2]) != c.VocabSize {
		t.Errorf("logits %d×%d, want 3×%d", len(logits), len(logits[0]), c.VocabSize)
	}
}
