package llama_test

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models/llama"
)

// FuzzLoadGGUF loads arbitrary bytes as a llama GGUF: reading, the configuration and the load
// either fail with an error, leaving the context without variables, or give a model whose
// configuration is valid; all of it allocating in proportion to the input, never to a
// hyper-parameter (`make fuzz` runs it under a memory limit). The seeds are the tiny model and
// files with one hyper-parameter changed.
func FuzzLoadGGUF(f *testing.F) {
	good, _ := tinyGGUF("")
	f.Add(good)
	for _, kv := range []ggufbuild.KV{
		{Key: "llama.block_count", Value: uint32(3)},
		{Key: "llama.attention.head_count", Value: uint32(2)},
		{Key: "llama.rope.freq_base", Value: float32(0.5)},
	} {
		data, _ := tinyGGUF("", kv)
		f.Add(data)
	}
	missing, _ := tinyGGUF("output_norm.weight")
	f.Add(missing)
	f.Fuzz(func(t *testing.T, data []byte) {
		testutil.AllocatesAtMost(t, "llama.LoadGGUF", 64*uint64(len(data))+32<<20, func() { loadGGUF(t, data) })
	})
}

func loadGGUF(t *testing.T, data []byte) {
	load := func(opts llama.LoadOptions) func(ctx *context.Context, f *gguf.File) (decodertest.Validator, error) {
		return func(ctx *context.Context, f *gguf.File) (decodertest.Validator, error) {
			return llama.LoadGGUF(ctx, f, opts)
		}
	}
	decodertest.CheckFuzzed(t, data, func(f *gguf.File) (decodertest.Validator, error) { return llama.ConfigFromGGUF(f) },
		load(llama.LoadOptions{}), load(llama.LoadOptions{UntieHead: true, RotateAdjacent: true}))
}
