package llama

import (
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/quanta-ml/quanta/internal/modelbase"
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

// Validate reports a configuration the model cannot be built with: a count or width outside 1 to
// 2^31 − 1 (HeadDim even, KVHeads dividing Heads), an RMSNormEps that is not a finite positive
// number, a RoPEBase that is not a finite number above 1. The error names the field and the
// accepted range.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"VocabSize", c.VocabSize}, {"Dim", c.Dim}, {"Layers", c.Layers}, {"Heads", c.Heads}, {"KVHeads", c.KVHeads},
		{"HeadDim", c.HeadDim}, {"FFNDim", c.FFNDim}} {
		if err := fileio.CheckInt(f.name, f.v, 1, fileio.MaxCount); err != nil {
			return errors.WithMessage(err, "llama.Config")
		}
	}
	switch {
	case c.ContextLength < 0:
		return errors.Errorf("llama.Config: ContextLength = %d; accepted: 0 (unknown) or a positive length", c.ContextLength)
	case c.HeadDim%2 != 0:
		return errors.Errorf("llama.Config: HeadDim = %d; accepted: an even width (rotary pairs)", c.HeadDim)
	case c.Heads%c.KVHeads != 0:
		return errors.Errorf("llama.Config: %d query heads, %d key/value heads; the latter must divide the former", c.Heads, c.KVHeads)
	}
	if err := fileio.CheckFloatAbove("RMSNormEps", c.RMSNormEps, 0); err != nil {
		return errors.WithMessage(err, "llama.Config")
	}
	return errors.WithMessage(fileio.CheckFloatAbove("RoPEBase", c.RoPEBase, 1), "llama.Config")
}

// ConfigFromGGUF reads the hyper-parameters of a "llama" GGUF file: "llama.block_count",
// "llama.embedding_length", "llama.feed_forward_length", "llama.attention.head_count",
// "llama.attention.head_count_kv" (default: head_count), "llama.attention.layer_norm_rms_epsilon",
// "llama.rope.freq_base" (default 10000), "llama.rope.dimension_count" (must be the head width:
// partial rotary is not supported), "llama.context_length", and the vocabulary size from
// "llama.vocab_size" or the token list. TiedEmbeddings is set when the file has no
// "output.weight" tensor.
//
// Each value is checked before it is used, with an error naming the key and the accepted range:
// counts and widths from 1 to 2^31 − 1, no more layers than the file has tensors for (9 a layer),
// head_count_kv dividing head_count, embedding_length a multiple of head_count with an even head
// width equal to rope.dimension_count, a finite positive epsilon, a finite RoPE base above 1.
func ConfigFromGGUF(f *gguf.File) (Config, error) {
	c, err := configFromGGUF(f)
	return c, errors.WithMessage(err, "llama.ConfigFromGGUF")
}

// layerTensors returns the names of the GGUF tensors of decoder block i.
func layerTensors(i int) []string {
	return modelbase.LayerTensorNames(i, AttnNorm, AttnQ, AttnK, AttnV, AttnOutput, FFNNorm, FFNGate, FFNUp, FFNDown)
}

// tensorsPerLayer is the number of GGUF tensors of a decoder block (two norms, seven kernels).
const tensorsPerLayer = 9

func configFromGGUF(f *gguf.File) (Config, error) {
	arch, err := f.String("general.architecture")
	if err != nil {
		return Config{}, err
	}
	if arch != "llama" {
		return Config{}, errors.Errorf("architecture %q; accepted: \"llama\"", arch)
	}
	var c Config
	const (
		keyLayers  = "llama.block_count"
		keyDim     = "llama.embedding_length"
		keyHeads   = "llama.attention.head_count"
		keyKVHeads = "llama.attention.head_count_kv"
		keyRoPEDim = "llama.rope.dimension_count"
		keyEps     = "llama.attention.layer_norm_rms_epsilon"
		keyBase    = "llama.rope.freq_base"
	)
	err = modelbase.ReadInts(f, []modelbase.IntKey{
		{Key: keyLayers, Dst: &c.Layers},
		{Key: keyDim, Dst: &c.Dim},
		{Key: "llama.feed_forward_length", Dst: &c.FFNDim},
		{Key: keyHeads, Dst: &c.Heads},
		{Key: keyKVHeads, Dst: &c.KVHeads, Optional: true},
		{Key: "llama.context_length", Dst: &c.ContextLength, Optional: true},
		{Key: "llama.vocab_size", Dst: &c.VocabSize, Optional: true},
	})
	if err != nil {
		return Config{}, err
	}
	_, hasOutput := f.Tensor("output.weight")
	c.TiedEmbeddings = !hasOutput
	// Each layer has its tensors: bound the count by the directory before anything is planned.
	fixed := []string{"token_embd.weight", "output_norm.weight"}
	if hasOutput {
		fixed = append(fixed, "output.weight")
	}
	if err := modelbase.CheckLayers(f, keyLayers, c.Layers, tensorsPerLayer, fixed, layerTensors); err != nil {
		return Config{}, err
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.VocabSize == 0 {
		tokens, err := f.Strings("tokenizer.ggml.tokens")
		if err != nil {
			return Config{}, errors.WithMessage(err, "no llama.vocab_size")
		}
		if err := fileio.CheckInt("the length of tokenizer.ggml.tokens", len(tokens), 1, fileio.MaxCount); err != nil {
			return Config{}, err
		}
		c.VocabSize = len(tokens)
	}
	if c.Heads%c.KVHeads != 0 {
		return Config{}, errors.Errorf("%s = %d does not divide %s = %d; accepted: a divisor (grouped-query attention)",
			keyKVHeads, c.KVHeads, keyHeads, c.Heads)
	}
	if c.Dim%c.Heads != 0 {
		return Config{}, errors.Errorf("%s = %d is not a multiple of %s = %d; accepted: a head count dividing the width",
			keyDim, c.Dim, keyHeads, c.Heads)
	}
	c.HeadDim = c.Dim / c.Heads
	if c.HeadDim%2 != 0 {
		return Config{}, errors.Errorf("%s = %d gives heads of %s / %d = %d values; accepted: an even head width (rotary pairs)",
			keyHeads, c.Heads, keyDim, c.Heads, c.HeadDim)
	}
	if _, has := f.Value(keyRoPEDim); has {
		rd, err := f.Uint(keyRoPEDim)
		if err != nil {
			return Config{}, err
		}
		if rd != uint64(c.HeadDim) {
			return Config{}, errors.Errorf("%s = %d gives heads of %s / %d = %d values, but %s = %d; accepted: a head "+
				"width equal to the rotary dimension (partial rotary is not supported)", keyHeads, c.Heads, keyDim, c.Heads,
				c.HeadDim, keyRoPEDim, rd)
		}
	}
	if err := modelbase.ReadFloatAbove(f, keyEps, &c.RMSNormEps, 0, false); err != nil {
		return Config{}, err
	}
	c.RoPEBase = 10000
	if err := modelbase.ReadFloatAbove(f, keyBase, &c.RoPEBase, 1, true); err != nil {
		return Config{}, err
	}
	if _, has := f.Value("llama.rope.scaling.type"); has {
		return Config{}, errors.New("RoPE scaling (llama.rope.scaling.*) is not supported")
	}
	return c, c.Validate()
}
