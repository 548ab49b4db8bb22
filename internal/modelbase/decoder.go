package modelbase

import (
	"fmt"

	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/quanta-ml/quanta/models"
)

// DecoderSpec is what sets an architecture's GGUF file apart in ReadDecoder.
type DecoderSpec struct {
	// Arch is the file's "general.architecture" and the prefix of its keys, e.g. "llama".
	Arch string
	// LayerTensors returns the names of the GGUF tensors of block i (as many for every block).
	LayerTensors func(i int) []string
	// KeyLength: "<arch>.attention.key_length" gives the head width (default: embedding_length /
	// head_count), and "<arch>.attention.value_length" must equal it too. Otherwise the head
	// width is embedding_length / head_count.
	KeyLength bool
	// RoPEBase is the rotary base when the file has no "<arch>.rope.freq_base".
	RoPEBase float64
}

// key returns the architecture's GGUF key "<arch>.<name>".
func (s DecoderSpec) key(name string) string { return s.Arch + "." + name }

// ReadDecoder reads the hyper-parameters that GGUF decoders share from a file of architecture
// s.Arch, each checked before it is used with an error naming the key and what is accepted:
// "general.architecture" (s.Arch); block_count, embedding_length, feed_forward_length,
// attention.head_count, attention.head_count_kv (default: head_count), context_length
// (optional) and vocab_size (default: the length of "tokenizer.ggml.tokens", which must equal it
// when both are present), counts from 1 to
// fileio.MaxCount; no more blocks than the file has tensors for (CheckLayers: the embedding
// table, the output norm, the output kernel "output.weight" unless absent, which ties the
// embeddings, and s.LayerTensors of each block); head_count_kv dividing head_count; the head
// width (s.KeyLength) even and equal to rope.dimension_count when present;
// attention.layer_norm_rms_epsilon, a finite positive number; rope.freq_base (default
// s.RoPEBase), a finite number above 1.
func ReadDecoder(f *gguf.File, s DecoderSpec) (models.DecoderConfig, error) {
	arch, err := f.String("general.architecture")
	if err != nil {
		return models.DecoderConfig{}, err
	}
	if arch != s.Arch {
		return models.DecoderConfig{}, errors.Errorf("architecture %q; accepted: %q", arch, s.Arch)
	}
	var (
		d          models.DecoderConfig
		keyLayers  = s.key("block_count")
		keyDim     = s.key("embedding_length")
		keyHeads   = s.key("attention.head_count")
		keyKVHeads = s.key("attention.head_count_kv")
		keyKeyLen  = s.key("attention.key_length")
	)
	keys := []IntKey{
		{Key: keyLayers, Dst: &d.Layers},
		{Key: keyDim, Dst: &d.Dim},
		{Key: s.key("feed_forward_length"), Dst: &d.FFNDim},
		{Key: keyHeads, Dst: &d.Heads},
		{Key: keyKVHeads, Dst: &d.KVHeads, Optional: true},
	}
	if s.KeyLength {
		keys = append(keys, IntKey{Key: keyKeyLen, Dst: &d.HeadDim, Optional: true})
	}
	keys = append(keys, IntKey{Key: s.key("context_length"), Dst: &d.ContextLength, Optional: true},
		IntKey{Key: s.key("vocab_size"), Dst: &d.VocabSize, Optional: true})
	if err := ReadInts(f, keys); err != nil {
		return models.DecoderConfig{}, err
	}
	_, hasOutput := f.Tensor("output.weight")
	d.TiedEmbeddings = !hasOutput
	// Each layer has its tensors: bound the count by the directory before anything is planned.
	fixed := []string{"token_embd.weight", "output_norm.weight"}
	if hasOutput {
		fixed = append(fixed, "output.weight")
	}
	if err := CheckLayers(f, keyLayers, d.Layers, len(s.LayerTensors(0)), fixed, s.LayerTensors); err != nil {
		return models.DecoderConfig{}, err
	}
	if d.KVHeads == 0 {
		d.KVHeads = d.Heads
	}
	if _, has := f.Value("tokenizer.ggml.tokens"); has && d.VocabSize != 0 {
		// Both given: they must agree, as llama.cpp checks, or the model picks ids the tokenizer
		// has no text for, or the tokenizer gives ids outside the table.
		tokens, err := f.Strings("tokenizer.ggml.tokens")
		if err != nil {
			return models.DecoderConfig{}, err
		}
		if len(tokens) != d.VocabSize {
			return models.DecoderConfig{}, errors.Errorf("%s = %d, but tokenizer.ggml.tokens has %d tokens; accepted: equal",
				s.key("vocab_size"), d.VocabSize, len(tokens))
		}
	}
	if d.VocabSize == 0 {
		tokens, err := f.Strings("tokenizer.ggml.tokens")
		if err != nil {
			return models.DecoderConfig{}, errors.WithMessage(err, "no "+s.key("vocab_size"))
		}
		if err := fileio.CheckInt("the length of tokenizer.ggml.tokens", len(tokens), 1, fileio.MaxCount); err != nil {
			return models.DecoderConfig{}, err
		}
		d.VocabSize = len(tokens)
	}
	if d.Heads%d.KVHeads != 0 {
		return models.DecoderConfig{}, errors.Errorf("%s = %d does not divide %s = %d; accepted: a divisor (grouped-query attention)",
			keyKVHeads, d.KVHeads, keyHeads, d.Heads)
	}
	if err := s.headWidth(f, &d); err != nil {
		return models.DecoderConfig{}, err
	}
	if err := ReadFloatAbove(f, s.key("attention.layer_norm_rms_epsilon"), &d.RMSNormEps, 0, false); err != nil {
		return models.DecoderConfig{}, err
	}
	d.RoPEBase = s.RoPEBase
	if err := ReadFloatAbove(f, s.key("rope.freq_base"), &d.RoPEBase, 1, true); err != nil {
		return models.DecoderConfig{}, err
	}
	return d, nil
}

// headWidth sets d.HeadDim where the file has not (embedding_length / head_count) and checks it:
// even, and equal to the widths the file gives (rope.dimension_count, and value_length where
// the key length gives the head width). The errors say where the width comes from.
func (s DecoderSpec) headWidth(f *gguf.File, d *models.DecoderConfig) error {
	keyDim, keyHeads, keyKeyLen := s.key("embedding_length"), s.key("attention.head_count"), s.key("attention.key_length")
	equal := []string{s.key("rope.dimension_count")}
	if s.KeyLength {
		equal = []string{s.key("attention.value_length"), s.key("rope.dimension_count")}
	}
	width := keyKeyLen // where the head width comes from, for errors
	if d.HeadDim == 0 {
		width = fmt.Sprintf("%s / %s = %d / %d", keyDim, keyHeads, d.Dim, d.Heads)
		if d.Dim%d.Heads != 0 {
			if s.KeyLength {
				return errors.Errorf("no %s, and %s = %d is not a multiple of %s = %d; accepted: a head width",
					keyKeyLen, keyDim, d.Dim, keyHeads, d.Heads)
			}
			return errors.Errorf("%s = %d is not a multiple of %s = %d; accepted: a head count dividing the width",
				keyDim, d.Dim, keyHeads, d.Heads)
		}
		d.HeadDim = d.Dim / d.Heads
	}
	if d.HeadDim%2 != 0 {
		if s.KeyLength {
			return errors.Errorf("a head width of %d (%s); accepted: an even width (rotary pairs)", d.HeadDim, width)
		}
		return errors.Errorf("%s = %d gives heads of %s / %d = %d values; accepted: an even head width (rotary pairs)",
			keyHeads, d.Heads, keyDim, d.Heads, d.HeadDim)
	}
	for _, key := range equal {
		if _, has := f.Value(key); !has {
			continue
		}
		v, err := f.Uint(key)
		if err != nil {
			return err
		}
		if v == uint64(d.HeadDim) {
			continue
		}
		if s.KeyLength {
			return errors.Errorf("%s = %d, but the head width is %d (%s); accepted: equal (value heads of another width "+
				"and partial rotary are not supported)", key, v, d.HeadDim, width)
		}
		return errors.Errorf("%s = %d gives heads of %s / %d = %d values, but %s = %d; accepted: a head "+
			"width equal to the rotary dimension (partial rotary is not supported)", keyHeads, d.Heads, keyDim, d.Heads,
			d.HeadDim, key, v)
	}
	return nil
}

// CheckNoRoPEScaling refuses a file of architecture arch whose metadata asks llama.cpp to scale
// the rotary positions, which the decoders without RoPE scaling would run with the wrong
// positions: a "<arch>.rope.scaling.type" other than "none" (with which llama.cpp scales nothing,
// whatever the factor), or without a type a factor other than 0 or 1 in
// "<arch>.rope.scaling.factor" or "<arch>.rope.scale_linear" (which llama.cpp then applies as
// linear scaling). The error names the key and what is accepted.
func CheckNoRoPEScaling(f *gguf.File, arch string) error {
	keyType := arch + ".rope.scaling.type"
	if v, has := f.Value(keyType); has {
		if typ, err := f.String(keyType); err != nil || typ != "none" {
			return errors.Errorf("%s = %v: RoPE scaling is not supported; accepted: absent or \"none\"", keyType, v)
		}
		return nil
	}
	// Without a type, llama.cpp scales the positions by a factor (linear) under either name; a
	// factor of 0 (or 1) scales nothing.
	for _, key := range RoPEFactorKeys(arch) {
		if v, has := f.Value(key); has {
			if factor, err := f.Float(key); err != nil || (factor != 1 && factor != 0) {
				return errors.Errorf("%s = %v: RoPE scaling is not supported; accepted: absent, 0 or 1", key, v)
			}
		}
	}
	return nil
}

// RoPEFactorKeys returns the keys of a RoPE scaling factor of architecture arch in the order
// llama.cpp reads them, the first present winning: "<arch>.rope.scaling.factor", then the older
// "<arch>.rope.scale_linear".
func RoPEFactorKeys(arch string) []string {
	return []string{arch + ".rope.scaling.factor", arch + ".rope.scale_linear"}
}
