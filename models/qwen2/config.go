package qwen2

import (
	"fmt"

	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/modelbase"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/llama"
)

// Architecture is the "general.architecture" of the GGUF files this package loads, and the
// prefix of their keys.
const Architecture = "qwen2"

// ConfigFromGGUF reads the hyper-parameters of a "qwen2" GGUF file, as llama.cpp reads them:
// "qwen2.block_count", "qwen2.embedding_length", "qwen2.feed_forward_length",
// "qwen2.attention.head_count", "qwen2.attention.head_count_kv" (default: head_count),
// "qwen2.attention.key_length" (the head width; default embedding_length / head_count; equal to
// "qwen2.attention.value_length" and "qwen2.rope.dimension_count" when present: partial rotary is
// not supported), "qwen2.attention.layer_norm_rms_epsilon", "qwen2.rope.freq_base" (default
// 10000, Qwen2.5's files give 1000000), "qwen2.context_length", and the vocabulary size from
// "qwen2.vocab_size" or the token list. TiedEmbeddings is set when the file has no
// "output.weight" tensor (Qwen2.5 0.5B to 3B). RoPE scaling is not supported (the YaRN of the
// long-context files): a "qwen2.rope.scaling.type" other than "none", or without one a factor
// other than 0 or 1 in "qwen2.rope.scaling.factor" or "qwen2.rope.scale_linear", is an error.
//
// Each value is checked before it is used, with an error naming the key and the accepted range:
// counts and widths from 1 to 2^31 − 1, no more layers than the file has tensors for (12 a layer),
// head_count_kv dividing head_count, an even head width, a finite positive epsilon, a finite RoPE
// base above 1.
func ConfigFromGGUF(f *gguf.File) (llama.Config, error) {
	c, err := configFromGGUF(f)
	return c, errors.WithMessage(err, "qwen2.ConfigFromGGUF")
}

// layerTensors returns the names of the GGUF tensors of decoder block i.
func layerTensors(i int) []string {
	names := modelbase.LayerTensorNames(i, models.AttnNorm, models.AttnQ, models.AttnK, models.AttnV, models.AttnOutput,
		models.FFNNorm, models.FFNGate, models.FFNUp, models.FFNDown)
	for _, p := range biased {
		names = append(names, fmt.Sprintf("blk.%d.%s.bias", i, p))
	}
	return names
}

// biased are the projections of a Qwen2 block that add a bias.
var biased = []string{models.AttnQ, models.AttnK, models.AttnV}

func configFromGGUF(f *gguf.File) (llama.Config, error) {
	d, err := modelbase.ReadDecoder(f, modelbase.DecoderSpec{Arch: Architecture, LayerTensors: layerTensors, KeyLength: true, RoPEBase: 10000})
	if err != nil {
		return llama.Config{}, err
	}
	if err := modelbase.CheckNoRoPEScaling(f, Architecture); err != nil {
		return llama.Config{}, err
	}
	c := llama.Config(d)
	return c, c.Validate()
}
