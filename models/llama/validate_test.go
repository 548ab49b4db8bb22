package llama_test

import (
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/models/llama"
)

// TestLoadGGUFHyperParameters: a hostile or broken hyper-parameter in a small GGUF is an error
// naming its key and what is accepted, found before anything is sized by it (the load allocates
// in proportion to the file), and the context is left unchanged.
func TestLoadGGUFHyperParameters(t *testing.T) {
	nan32 := float32(math.NaN())
	tests := []struct {
		name     string
		kv       ggufbuild.KV
		want     string
		notFound bool
	}{
		{"block_count 2^24", ggufbuild.KV{Key: "llama.block_count", Value: uint32(1 << 24)},
			`tensor "blk.2.attn_norm.weight" (llama.block_count = 16777216; the file has the tensors of at most 2 layers)`, true},
		{"block_count 2^31", ggufbuild.KV{Key: "llama.block_count", Value: uint32(1 << 31)},
			"llama.block_count = 2147483648; accepted: 1 to 2147483647", false},
		{"block_count 0", ggufbuild.KV{Key: "llama.block_count", Value: uint32(0)}, "llama.block_count = 0; accepted: 1 to 2147483647", false},
		{"head_count 0", ggufbuild.KV{Key: "llama.attention.head_count", Value: uint32(0)},
			"llama.attention.head_count = 0; accepted: 1 to 2147483647", false},
		{"head_count 2", ggufbuild.KV{Key: "llama.attention.head_count", Value: uint32(2)},
			"llama.attention.head_count = 2 gives heads of llama.embedding_length / 2 = 8 values, but llama.rope.dimension_count = 4", false},
		{"head_count 3", ggufbuild.KV{Key: "llama.attention.head_count", Value: uint32(3)},
			"llama.attention.head_count_kv = 2 does not divide llama.attention.head_count = 3", false},
		{"head_count 6", ggufbuild.KV{Key: "llama.attention.head_count", Value: uint32(6)},
			"llama.embedding_length = 16 is not a multiple of llama.attention.head_count = 6", false},
		{"head_count 16", ggufbuild.KV{Key: "llama.attention.head_count", Value: uint32(16)},
			"llama.attention.head_count = 16 gives heads of llama.embedding_length / 16 = 1 values; accepted: an even head width", false},
		{"head_count_kv 0", ggufbuild.KV{Key: "llama.attention.head_count_kv", Value: uint32(0)},
			"llama.attention.head_count_kv = 0; accepted: 1 to 2147483647", false},
		{"embedding_length 0", ggufbuild.KV{Key: "llama.embedding_length", Value: uint32(0)},
			"llama.embedding_length = 0; accepted: 1 to 2147483647", false},
		{"feed_forward_length 0", ggufbuild.KV{Key: "llama.feed_forward_length", Value: uint32(0)},
			"llama.feed_forward_length = 0; accepted: 1 to 2147483647", false},
		{"vocab_size 2^32-1", ggufbuild.KV{Key: "llama.vocab_size", Value: uint32(math.MaxUint32)},
			"llama.vocab_size = 4294967295; accepted: 1 to 2147483647", false},
		{"context_length 0", ggufbuild.KV{Key: "llama.context_length", Value: uint32(0)},
			"llama.context_length = 0; accepted: 1 to 2147483647", false},
		{"epsilon NaN", ggufbuild.KV{Key: "llama.attention.layer_norm_rms_epsilon", Value: nan32},
			"llama.attention.layer_norm_rms_epsilon = NaN; accepted: a finite number above 0", false},
		{"epsilon +Inf", ggufbuild.KV{Key: "llama.attention.layer_norm_rms_epsilon", Value: float32(math.Inf(1))},
			"llama.attention.layer_norm_rms_epsilon = +Inf; accepted: a finite number above 0", false},
		{"epsilon 0", ggufbuild.KV{Key: "llama.attention.layer_norm_rms_epsilon", Value: float32(0)},
			"llama.attention.layer_norm_rms_epsilon = 0; accepted: a finite number above 0", false},
		{"freq_base NaN", ggufbuild.KV{Key: "llama.rope.freq_base", Value: nan32},
			"llama.rope.freq_base = NaN; accepted: a finite number above 1", false},
		{"freq_base 1", ggufbuild.KV{Key: "llama.rope.freq_base", Value: float32(1)},
			"llama.rope.freq_base = 1; accepted: a finite number above 1", false},
		{"rope dimension", ggufbuild.KV{Key: "llama.rope.dimension_count", Value: uint32(2)},
			"llama.attention.head_count = 4 gives heads of llama.embedding_length / 4 = 4 values, but llama.rope.dimension_count = 2", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, _ := tinyGGUF("", tc.kv)
			f := decodertest.Open(t, data)
			decodertest.WantLoadError(t, func(ctx *context.Context) error {
				_, err := llama.LoadGGUF(ctx, f, llama.LoadOptions{})
				return err
			}, tc.want, tc.notFound)
			if _, cfgErr := llama.ConfigFromGGUF(f); cfgErr == nil || !strings.Contains(cfgErr.Error(), tc.want) {
				t.Errorf("ConfigFromGGUF: error %v; want one containing %q", cfgErr, tc.want)
			}
		})
	}
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
