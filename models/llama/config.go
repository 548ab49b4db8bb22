package llama

import (
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/modelbase"
	"github.com/quanta-ml/quanta/models"
)

// Config holds the hyper-parameters of a Llama-architecture decoder: those every GGUF decoder
// has (models.DecoderConfig; HeadDim is the file's key length, by default Dim/Heads), with
// Llama's Validate.
type Config models.DecoderConfig

// Validate reports a configuration the model cannot be built with: a count or width outside 1 to
// 2^31 − 1 (HeadDim even, KVHeads dividing Heads), a ContextLength outside 0 (unknown) to
// 2^31 − 1, an RMSNormEps that is not a finite positive number, a RoPEBase that is not a finite
// number above 1. The error names the field and the accepted range.
func (c Config) Validate() error {
	return errors.WithMessage(c.decoder().Validate(), "llama.Config")
}

// decoder returns c as the fields every GGUF decoder has, which are all of it.
func (c Config) decoder() models.DecoderConfig { return models.DecoderConfig(c) }

// ConfigFromGGUF reads the hyper-parameters of a "llama" GGUF file: "llama.block_count",
// "llama.embedding_length", "llama.feed_forward_length", "llama.attention.head_count",
// "llama.attention.head_count_kv" (default: head_count), "llama.attention.key_length" (the head
// width, as llama.cpp reads it; default embedding_length / head_count; equal to
// "llama.attention.value_length" and "llama.rope.dimension_count" when present: partial rotary
// is not supported), "llama.attention.layer_norm_rms_epsilon", "llama.rope.freq_base" (default
// 10000), "llama.context_length", and the vocabulary size from "llama.vocab_size" or the token
// list. TiedEmbeddings is set when the file has no "output.weight" tensor. RoPE scaling is not
// supported: a file with a "llama.rope.scaling.type" other than "none" (with which llama.cpp
// scales nothing), or without a type a factor other than 0 or 1 in "llama.rope.scaling.factor" or
// "llama.rope.scale_linear" (which llama.cpp then applies as linear scaling), is an error.
//
// Each value is checked before it is used, with an error naming the key and the accepted range:
// counts and widths from 1 to 2^31 − 1, no more layers than the file has tensors for (9 a layer),
// head_count_kv dividing head_count, an even head width (without key_length, embedding_length a
// multiple of head_count) equal to rope.dimension_count, a finite positive epsilon, a finite RoPE
// base above 1.
func ConfigFromGGUF(f *gguf.File) (Config, error) {
	c, err := configFromGGUF(f)
	return c, errors.WithMessage(err, "llama.ConfigFromGGUF")
}

// architecture is the "general.architecture" of the GGUF files this package loads, and the
// prefix of their keys.
const architecture = "llama"

// layerTensors returns the names of the GGUF tensors of decoder block i.
func layerTensors(i int) []string {
	return modelbase.LayerTensorNames(i, models.AttnNorm, models.AttnQ, models.AttnK, models.AttnV, models.AttnOutput,
		models.FFNNorm, models.FFNGate, models.FFNUp, models.FFNDown)
}

func configFromGGUF(f *gguf.File) (Config, error) {
	d, err := modelbase.ReadDecoder(f, modelbase.DecoderSpec{Arch: architecture, LayerTensors: layerTensors, KeyLength: true, RoPEBase: 10000})
	if err != nil {
		return Config{}, err
	}
	c := Config(d)
	if err := modelbase.CheckNoRoPEScaling(f, architecture); err != nil {
		return Config{}, err
	}
	return c, c.Validate()
}
