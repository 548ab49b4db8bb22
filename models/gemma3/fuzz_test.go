package gemma3_test

import (
	"testing"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models/gemma3"
)

// FuzzLoadGGUF loads arbitrary bytes as a gemma3 GGUF: reading, the configuration and the load
// (float, and keeping block tensors as stored) either fail with an error, leaving the context
// without variables, or give a model whose configuration is valid; all of it allocating in
// proportion to the input, never to a hyper-parameter (`make fuzz` runs it under a memory limit).
// The seeds are the tiny model (float and with block tensors) and files with one hyper-parameter
// changed.
func FuzzLoadGGUF(f *testing.F) {
	f.Add(tinyGGUF(nil, ""))
	f.Add(tinyGGUF(map[string]gguf.Type{"attn_q": gguf.TypeQ8_0, "token_embd": gguf.TypeQ4_0}, ""))
	for _, kv := range []ggufbuild.KV{
		{Key: "gemma3.block_count", Value: uint32(4)},
		{Key: "gemma3.attention.key_length", Value: uint32(64)},
		{Key: "gemma3.attention.sliding_window", Value: uint32(1 << 30)},
		{Key: "gemma3.rope.freq_base_swa", Value: float32(0.5)},
	} {
		f.Add(tinyGGUF(nil, "", kv))
	}
	f.Add(tinyGGUF(nil, "output_norm.weight"))
	f.Fuzz(func(t *testing.T, data []byte) {
		testutil.AllocatesAtMost(t, "gemma3.LoadGGUF", 64*uint64(len(data))+32<<20, func() { loadFuzzed(t, data) })
	})
}

func loadFuzzed(t *testing.T, data []byte) {
	decodertest.CheckFuzzedLoad(t, data, gemma3.ConfigFromGGUF, gemma3.LoadGGUF)
}
