package qwen2_test

import (
	"testing"

	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models/qwen2"
)

// FuzzLoadGGUF loads arbitrary bytes as a qwen2 GGUF: reading, the configuration and the load
// (float, and keeping block tensors as stored) either fail with an error, leaving the context
// without variables, or give a model whose configuration is valid; all of it allocating in
// proportion to the input, never to a hyper-parameter (`make fuzz` runs it under a memory limit).
// The seeds are the reference's tiny model (float and with Q8_0 kernels), files with one
// hyper-parameter changed and one without a bias.
func FuzzLoadGGUF(f *testing.F) {
	index := loadIndex(f)
	f.Add(referenceGGUF(f, index, nil, gguf.TypeF32, nil))
	f.Add(referenceGGUF(f, index, nil, gguf.TypeQ8_0, nil))
	for _, kv := range []ggufbuild.KV{
		{Key: "qwen2.block_count", Value: uint32(4)},
		{Key: "qwen2.attention.key_length", Value: uint32(32)},
		{Key: "qwen2.rope.scaling.type", Value: "yarn"},
		{Key: "qwen2.rope.freq_base", Value: float32(0.5)},
	} {
		f.Add(referenceGGUF(f, index, nil, gguf.TypeF32, nil, kv))
	}
	f.Add(referenceGGUF(f, index, func(name string) bool { return name == "blk.1.attn_k.bias" }, gguf.TypeF32, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		testutil.AllocatesAtMost(t, "qwen2.LoadGGUF", 64*uint64(len(data))+32<<20, func() { loadFuzzed(t, data) })
	})
}

func loadFuzzed(t *testing.T, data []byte) {
	decodertest.CheckFuzzedLoad(t, data, qwen2.ConfigFromGGUF, qwen2.LoadGGUF)
}
