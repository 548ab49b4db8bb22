package gemma3

import (
	"math"

	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/quanta-ml/quanta/internal/modelbase"
	"github.com/quanta-ml/quanta/models"
)

// Config holds the hyper-parameters of a Gemma-3 decoder: those every GGUF decoder has
// (models.DecoderConfig: RoPEBase is the global layers' base; the heads are not Dim/Heads wide,
// 256 for the 270M model), then Gemma's.
type Config struct {
	models.DecoderConfig
	// RoPEBaseLocal is the rotary base of the sliding-window layers; RoPEScale multiplies the
	// global layers' positions (1/factor of a linear RoPE scaling, 1 without one).
	RoPEBaseLocal, RoPEScale float64
	// SlidingWindow is the width of the sliding-window layers' attention (a query sees itself
	// and the SlidingWindow−1 positions before it); 0: every layer is global.
	SlidingWindow int
	// SlidingPattern makes layer i global when i % SlidingPattern == SlidingPattern−1 and a
	// sliding-window layer otherwise (Gemma-3: 6, five local layers to one global); 0 with a
	// SlidingWindow makes every layer a sliding-window one.
	SlidingPattern int
	// QueryScale multiplies the queries before the attention scores (query_pre_attn_scalar^-1/2).
	QueryScale float64
	// FinalSoftcap, if above 0, caps the logits: FinalSoftcap·tanh(logits/FinalSoftcap).
	FinalSoftcap float64
}

// Sliding reports whether layer i attends over a sliding window (and uses RoPEBaseLocal).
func (c Config) Sliding(i int) bool {
	if c.SlidingWindow == 0 {
		return false
	}
	return c.SlidingPattern == 0 || i%c.SlidingPattern != c.SlidingPattern-1
}

// Validate reports a configuration the model cannot be built with: a count or width outside 1 to
// 2^31 − 1 (HeadDim even, KVHeads dividing Heads), a negative ContextLength, SlidingWindow or
// SlidingPattern, an RMSNormEps, QueryScale or RoPEScale that is not a finite positive number (a
// RoPEScale above 1 / models.MinRoPEFactor, whose scaled positions overflow float32, too),
// RoPE bases that are not finite numbers above 1, a FinalSoftcap that is negative or not finite.
// The error names the field and the accepted range.
func (c Config) Validate() error {
	if err := c.DecoderConfig.Validate(); err != nil {
		return errors.WithMessage(err, "gemma3.Config")
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"SlidingWindow", c.SlidingWindow}, {"SlidingPattern", c.SlidingPattern}} {
		if err := fileio.CheckInt(f.name, f.v, 0, fileio.MaxCount); err != nil {
			return errors.WithMessage(err, "gemma3.Config")
		}
	}
	if err := fileio.CheckSoftcap("FinalSoftcap", c.FinalSoftcap); err != nil {
		return errors.WithMessage(err, "gemma3.Config")
	}
	for _, f := range []struct {
		name   string
		v, min float64
	}{{"QueryScale", c.QueryScale, 0}, {"RoPEScale", c.RoPEScale, 0}, {"RoPEBaseLocal", c.RoPEBaseLocal, 1}} {
		if err := fileio.CheckFloatAbove(f.name, f.v, f.min); err != nil {
			return errors.WithMessage(err, "gemma3.Config")
		}
	}
	if maxScale := 1 / models.MinRoPEFactor; float64(float32(c.RoPEScale)) > maxScale {
		return errors.Errorf("gemma3.Config: RoPEScale = %g; accepted: at most %.4g (1 / models.MinRoPEFactor: positions up to 2^31 "+
			"times it stay finite in float32)", c.RoPEScale, maxScale)
	}
	return nil
}

// ConfigFromGGUF reads the hyper-parameters of a "gemma3" GGUF file, as llama.cpp reads them:
// "gemma3.block_count", "gemma3.embedding_length", "gemma3.feed_forward_length",
// "gemma3.attention.head_count", "gemma3.attention.head_count_kv" (default: head_count),
// "gemma3.attention.key_length" (the head width; default embedding_length / head_count; equal
// to "gemma3.attention.value_length" and "gemma3.rope.dimension_count" when present),
// "gemma3.attention.layer_norm_rms_epsilon", "gemma3.rope.freq_base" (global layers, default
// 1000000), "gemma3.rope.freq_base_swa" (sliding-window layers, default 10000),
// "gemma3.rope.scaling.type" ("linear" or "none"; absent, linear when the file has a factor, as
// llama.cpp reads it) with "gemma3.rope.scaling.factor", or without it the older
// "gemma3.rope.scale_linear" (absent or 0: no scaling, as in llama.cpp),
// "gemma3.attention.sliding_window" (absent or 0: every layer global),
// "gemma3.attention.sliding_window_pattern" (default 6), "gemma3.final_logit_softcapping",
// "gemma3.context_length", and the vocabulary size from "gemma3.vocab_size" or the token list.
// The query scale is 1/√HeadDim, or 1/√(embedding_length / head_count) for the 62-block model
// (Gemma-3 27B), llama.cpp's rule (the file has no query_pre_attn_scalar). TiedEmbeddings is set
// when the file has no "output.weight" tensor.
//
// Each value is checked before it is used, with an error naming the key and the accepted range:
// counts and widths from 1 to 2^31 − 1, no more layers than the file has tensors for (13 a
// layer), head_count_kv dividing head_count, an even head width, finite positive epsilon and
// softcap, a finite scaling factor of at least models.MinRoPEFactor (below it the scaled positions
// overflow float32: NaN logits), finite RoPE bases above 1.
func ConfigFromGGUF(f *gguf.File) (Config, error) {
	c, err := configFromGGUF(f)
	return c, errors.WithMessage(err, "gemma3.ConfigFromGGUF")
}

// layerTensors returns the names of the GGUF tensors of decoder block i.
func layerTensors(i int) []string {
	return modelbase.LayerTensorNames(i, models.AttnNorm, models.AttnQ, models.AttnK, models.AttnV, AttnQNorm, AttnKNorm,
		models.AttnOutput, PostAttnNorm, models.FFNNorm, models.FFNGate, models.FFNUp, models.FFNDown, PostFFNNorm)
}

const (
	keyKeyLen    = "gemma3.attention.key_length"
	keyBaseLocal = "gemma3.rope.freq_base_swa"
	keyScaling   = "gemma3.rope.scaling.type"
	keyWindow    = "gemma3.attention.sliding_window"
	keyPattern   = "gemma3.attention.sliding_window_pattern"
	keySoftcap   = "gemma3.final_logit_softcapping"
)

func configFromGGUF(f *gguf.File) (Config, error) {
	d, err := modelbase.ReadDecoder(f, modelbase.DecoderSpec{Arch: Architecture, LayerTensors: layerTensors, KeyLength: true, RoPEBase: 1e6})
	if err != nil {
		return Config{}, err
	}
	c := Config{DecoderConfig: d, RoPEBaseLocal: 1e4, RoPEScale: 1}
	if err := modelbase.ReadFloatAbove(f, keyBaseLocal, &c.RoPEBaseLocal, 1, true); err != nil {
		return Config{}, err
	}
	// llama.cpp's default type is linear: a factor given without a type scales the positions.
	kind, hasKind := "linear", false
	if _, has := f.Value(keyScaling); has {
		if kind, err = f.String(keyScaling); err != nil {
			return Config{}, err
		}
		hasKind = true
	}
	// The factor under its name, or else under the older "gemma3.rope.scale_linear", as llama.cpp reads it.
	keyFactor, hasFactor := "", false
	for _, key := range modelbase.RoPEFactorKeys(Architecture) {
		if _, hasFactor = f.Value(key); hasFactor {
			keyFactor = key
			break
		}
	}
	if hasKind || hasFactor {
		switch kind {
		case "none":
		case "linear":
			// As llama.cpp reads it: an absent factor, or 0, scales nothing.
			factor := 0.0
			if hasFactor {
				if factor, err = f.Float(keyFactor); err != nil {
					return Config{}, err
				}
			}
			if factor != 0 {
				if err := fileio.CheckFloatAbove(keyFactor, factor, 0); err != nil {
					return Config{}, err
				}
				// The positions (up to 2^31) are multiplied by 1/factor in float32: a tiny factor
				// makes the products +Inf there, and the rotary tables NaN.
				if factor < models.MinRoPEFactor {
					return Config{}, errors.Errorf("%s = %g; accepted: at least %.4g (models.MinRoPEFactor: positions up to 2^31 "+
						"times 1/factor stay finite in float32), or 0 (none)", keyFactor, factor, models.MinRoPEFactor)
				}
				c.RoPEScale = 1 / factor
				// A huge factor makes 1/factor 0 as float32: every position would rotate by 0.
				if err := fileio.CheckFloatAbove("1 / "+keyFactor, c.RoPEScale, 0); err != nil {
					return Config{}, err
				}
			}
		default:
			return Config{}, errors.Errorf("%s = %q; accepted: \"linear\", \"none\"", keyScaling, kind)
		}
	}
	c.SlidingPattern = 6
	if _, has := f.Value(keyWindow); has {
		w, err := f.Uint(keyWindow)
		if err != nil {
			return Config{}, err
		}
		if err := fileio.CheckInt(keyWindow, w, 0, fileio.MaxCount); err != nil {
			return Config{}, err
		}
		c.SlidingWindow = int(w)
	}
	if _, has := f.Value(keyPattern); has {
		p, err := f.Uint(keyPattern)
		if err != nil {
			return Config{}, errors.WithMessagef(err, "%s (accepted: an unsigned integer)", keyPattern)
		}
		if err := fileio.CheckInt(keyPattern, p, 0, fileio.MaxCount); err != nil {
			return Config{}, err
		}
		c.SlidingPattern = int(p)
	}
	if _, has := f.Value(keySoftcap); has {
		if c.FinalSoftcap, err = f.Float(keySoftcap); err != nil {
			return Config{}, err
		}
		if err := fileio.CheckSoftcap(keySoftcap, c.FinalSoftcap); err != nil {
			return Config{}, err
		}
	}
	c.QueryScale = 1 / math.Sqrt(float64(c.HeadDim))
	if c.Layers == 62 && c.Dim%c.Heads == 0 {
		c.QueryScale = 1 / math.Sqrt(float64(c.Dim/c.Heads))
	}
	return c, c.Validate()
}
