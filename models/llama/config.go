package llama

import (
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
)

// Config holds the hyper-parameters of a Llama-architecture decoder.
type Config struct {
	// VocabSize is the number of tokens; Dim the width of the residual stream.
	VocabSize, Dim int
	// Layers is the number of decoder blocks.
	Layers int
	// Heads and KVHeads are the query and key/value head counts (KVHeads divides Heads: grouped-
	// query attention); HeadDim is the width of one head.
	Heads, KVHeads, HeadDim int
	// FFNDim is the hidden width of the SwiGLU feed-forward block.
	FFNDim int
	// ContextLength is the longest sequence the model was trained for.
	ContextLength int
	// RMSNormEps is the epsilon of every RMSNorm; RoPEBase the base θ of the rotary embedding.
	RMSNormEps, RoPEBase float64
	// TiedEmbeddings: the output head is the token-embedding table (no separate lm_head kernel).
	TiedEmbeddings bool
}

// Validate reports a configuration the model cannot be built with.
func (c Config) Validate() error {
	switch {
	case c.VocabSize < 1 || c.Dim < 1 || c.Layers < 1 || c.FFNDim < 1 || c.HeadDim < 2:
		return errors.Errorf("llama.Config %+v: vocabulary, width, layers, FFN width must be positive, HeadDim at least 2", c)
	case c.HeadDim%2 != 0:
		return errors.Errorf("llama.Config: HeadDim %d must be even (rotary pairs)", c.HeadDim)
	case c.Heads < 1 || c.KVHeads < 1 || c.Heads%c.KVHeads != 0:
		return errors.Errorf("llama.Config: %d query heads, %d key/value heads; the latter must divide the former", c.Heads, c.KVHeads)
	case c.RMSNormEps <= 0 || c.RoPEBase <= 1:
		return errors.Errorf("llama.Config: RMSNormEps %g must be positive, RoPEBase %g above 1", c.RMSNormEps, c.RoPEBase)
	}
	return nil
}

// ConfigFromGGUF reads the hyper-parameters of a "llama" GGUF file: "llama.block_count",
// "llama.embedding_length", "llama.feed_forward_length", "llama.attention.head_count",
// "llama.attention.head_count_kv" (default: head_count), "llama.attention.layer_norm_rms_epsilon",
// "llama.rope.freq_base" (default 10000), "llama.rope.dimension_count" (must be the head width:
// partial rotary is not supported), "llama.context_length", and the vocabulary size from
// "llama.vocab_size" or the token list. TiedEmbeddings is set when the file has no
// "output.weight" tensor.
func ConfigFromGGUF(f *gguf.File) (Config, error) {
	arch, err := f.String("general.architecture")
	if err != nil {
		return Config{}, errors.WithMessage(err, "llama.ConfigFromGGUF")
	}
	if arch != "llama" {
		return Config{}, errors.Errorf("llama.ConfigFromGGUF: architecture %q; accepted: \"llama\"", arch)
	}
	var c Config
	ints := []struct {
		key      string
		dst      *int
		optional bool
	}{
		{"llama.block_count", &c.Layers, false},
		{"llama.embedding_length", &c.Dim, false},
		{"llama.feed_forward_length", &c.FFNDim, false},
		{"llama.attention.head_count", &c.Heads, false},
		{"llama.attention.head_count_kv", &c.KVHeads, true},
		{"llama.context_length", &c.ContextLength, true},
		{"llama.vocab_size", &c.VocabSize, true},
	}
	for _, k := range ints {
		if _, has := f.Value(k.key); !has && k.optional {
			continue
		}
		v, err := f.Uint(k.key)
		if err != nil {
			return Config{}, errors.WithMessage(err, "llama.ConfigFromGGUF")
		}
		if v > 1<<31 {
			return Config{}, errors.Errorf("llama.ConfigFromGGUF: %s = %d is out of range", k.key, v)
		}
		*k.dst = int(v)
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.VocabSize == 0 {
		tokens, err := f.Strings("tokenizer.ggml.tokens")
		if err != nil {
			return Config{}, errors.WithMessage(err, "llama.ConfigFromGGUF: no llama.vocab_size")
		}
		c.VocabSize = len(tokens)
	}
	if c.RMSNormEps, err = f.Float("llama.attention.layer_norm_rms_epsilon"); err != nil {
		return Config{}, errors.WithMessage(err, "llama.ConfigFromGGUF")
	}
	c.RoPEBase = 10000
	if _, has := f.Value("llama.rope.freq_base"); has {
		if c.RoPEBase, err = f.Float("llama.rope.freq_base"); err != nil {
			return Config{}, errors.WithMessage(err, "llama.ConfigFromGGUF")
		}
	}
	if c.Heads > 0 {
		c.HeadDim = c.Dim / c.Heads
	}
	if _, has := f.Value("llama.rope.dimension_count"); has {
		rd, err := f.Uint("llama.rope.dimension_count")
		if err != nil {
			return Config{}, errors.WithMessage(err, "llama.ConfigFromGGUF")
		}
		if int(rd) != c.HeadDim {
			return Config{}, errors.Errorf("llama.ConfigFromGGUF: rope.dimension_count %d differs from the head width %d; partial rotary is not supported", rd, c.HeadDim)
		}
	}
	if _, has := f.Value("llama.rope.scaling.type"); has {
		return Config{}, errors.New("llama.ConfigFromGGUF: RoPE scaling (llama.rope.scaling.*) is not supported")
	}
	_, hasOutput := f.Tensor("output.weight")
	c.TiedEmbeddings = !hasOutput
	if c.Heads > 0 && c.Dim%c.Heads != 0 {
		return Config{}, errors.Errorf("llama.ConfigFromGGUF: embedding length %d is not a multiple of %d heads", c.Dim, c.Heads)
	}
	return c, errors.WithMessage(c.Validate(), "llama.ConfigFromGGUF")
}
