package llama_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/models/llama"
)

// TestLoadGGUFHyperParameters: a hostile or broken hyper-parameter in a small GGUF is an error
// naming its key and what is accepted, found before anything is sized by it (the load allocates
// in proportion to the file), and the context is left unchanged.
func TestLoadGGUFHyperParameters(t *testing.T) {
	head := func(heads uint32, want string) decodertest.BadKey {
		return decodertest.Bad(fmt.Sprint("head_count ", heads), "llama.attention.head_count", heads, want)
	}
	cases := append(decodertest.DecoderBadKeys("llama"),
		decodertest.BadKey{Name: "block_count 2^24", KV: ggufbuild.KV{Key: "llama.block_count", Value: uint32(1 << 24)},
			Want:     `tensor "blk.2.attn_norm.weight" (llama.block_count = 16777216; the file has the tensors of at most 2 layers)`,
			NotFound: true},
		head(2, "llama.rope.dimension_count = 4, but the head width is 8 (llama.embedding_length / llama.attention.head_count = 16 / 2)"),
		head(3, "llama.attention.head_count_kv = 2 does not divide llama.attention.head_count = 3"),
		head(6, "llama.embedding_length = 16 is not a multiple of llama.attention.head_count = 6"),
		head(16, "a head width of 1 (llama.embedding_length / llama.attention.head_count = 16 / 16); accepted: an even width"),
		decodertest.Bad("rope dimension", "llama.rope.dimension_count", uint32(2),
			"llama.rope.dimension_count = 2, but the head width is 4 (llama.embedding_length / llama.attention.head_count = 16 / 4)"),
		decodertest.Bad("scaling factor", "llama.rope.scaling.factor", float32(4), "llama.rope.scaling.factor = 4: RoPE scaling is not supported; accepted: absent, 0 or 1"),
		decodertest.Bad("scaling type", "llama.rope.scaling.type", "yarn", `llama.rope.scaling.type = yarn: RoPE scaling is not supported; accepted: absent or "none"`),
		decodertest.Bad("scale_linear", "llama.rope.scale_linear", float32(2), "llama.rope.scale_linear = 2: RoPE scaling is not supported"),
		// Subnormal in float32, flushed to zero by XLA's CPU backend: a row of zeros normalizes to NaN.
		decodertest.Bad("epsilon 1e-40", "llama.attention.layer_norm_rms_epsilon", float32(1e-40),
			"llama.attention.layer_norm_rms_epsilon = 9.99994610111476e-41, 0 as float32"),
		decodertest.Bad("key_length odd", "llama.attention.key_length", uint32(5), "a head width of 5 (llama.attention.key_length)"),
		decodertest.Bad("value_length", "llama.attention.value_length", uint32(8),
			"llama.attention.value_length = 8, but the head width is 4 (llama.embedding_length / llama.attention.head_count = 16 / 4)"),
	)
	decodertest.CheckBadKeys(t, cases, func(kv ggufbuild.KV) []byte {
		data, _ := tinyGGUF("", kv)
		return data
	}, llama.LoadGGUF, llama.ConfigFromGGUF)
}

// TestConfigValidate: a Config built in code is checked the same way, naming its fields.
func TestConfigValidate(t *testing.T) {
	decodertest.CheckInvalidConfigs(t, tiny, func(c llama.Config) error {
		_, err := llama.New(c)
		return err
	}, []decodertest.InvalidConfig[llama.Config]{
		{Name: "NaN epsilon", Modify: func(c *llama.Config) { c.RMSNormEps = math.NaN() }, Want: "RMSNormEps = NaN; accepted: a finite number above 0"},
		{Name: "Inf RoPE base", Modify: func(c *llama.Config) { c.RoPEBase = math.Inf(1) }, Want: "RoPEBase = +Inf; accepted: a finite number above 1"},
		{Name: "no heads", Modify: func(c *llama.Config) { c.Heads = 0 }, Want: "Heads = 0; accepted: 1 to 2147483647"},
		{Name: "odd head width", Modify: func(c *llama.Config) { c.HeadDim = 3 }, Want: "HeadDim = 3; accepted: an even width"},
		{Name: "kv heads", Modify: func(c *llama.Config) { c.KVHeads = 3 }, Want: "4 query heads, 3 key/value heads"},
		{Name: "negative context", Modify: func(c *llama.Config) { c.ContextLength = -1 }, Want: "ContextLength = -1"},
	})
}

// TestLoadGGUFNilContext: a nil context is an error, not a nil dereference.
func TestLoadGGUFNilContext(t *testing.T) {
	data, _ := tinyGGUF("")
	if _, err := llama.LoadGGUF(nil, decodertest.Open(t, data), llama.LoadOptions{}); err == nil || !strings.Contains(err.Error(), "nil context") {
		t.Errorf("error %v; want one about the nil context", err)
	}
}

// TestConfigRoPENoScaling: a factor of 1 or 0 (llama.cpp's "no factor"), and any factor under the
// scaling type "none" (llama.cpp never scales then), scale nothing and are accepted.
func TestConfigRoPENoScaling(t *testing.T) {
	for _, tc := range []struct {
		name string
		kvs  []ggufbuild.KV
	}{
		{"factor 1", []ggufbuild.KV{{Key: "llama.rope.scaling.factor", Value: float32(1)}}},
		{"factor 0", []ggufbuild.KV{{Key: "llama.rope.scaling.factor", Value: float32(0)}}},
		{"type none", []ggufbuild.KV{{Key: "llama.rope.scaling.type", Value: "none"}, {Key: "llama.rope.scaling.factor", Value: float32(4)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, _ := tinyGGUF("", tc.kvs...)
			if _, err := llama.ConfigFromGGUF(decodertest.Open(t, data)); err != nil {
				t.Error(err)
			}
		})
	}
}
