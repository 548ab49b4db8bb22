package llama_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/llama"
	"github.com/quanta-ml/quanta/tokenizer"
)

// TestSmolLM2 is the end-to-end test: the real SmolLM2-135M-Instruct loaded from its GGUF, a
// chat prompt tokenized, greedy decoding with the cache. The generated tokens must be the
// argmax of the full forward pass at each position (cache and full pass agree on the real
// model), and the answer must name Paris.
func TestSmolLM2(t *testing.T) {
	testutil.Slow(t)
	path := assets.Require(t, assets.SmolLM2)
	backend := testutil.Backend(t)
	f := decodertest.OpenFile(t, path)
	tok, err := tokenizer.NewBPEFromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx := context.New()
	m, err := llama.LoadGGUF(ctx, f, llama.LoadOptions{LoadOptions: models.LoadOptions{Backend: backend}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded %d variables (%.0f MB) in %s", ctx.NumVariables(), float64(ctx.Memory())/1e6, time.Since(start))
	prompt := tok.Encode("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
		tokenizer.EncodeOptions{ParseSpecial: true})
	gen, err := models.NewGenerator(backend, ctx, m, models.GeneratorOptions{MaxLen: 64})
	if err != nil {
		t.Fatal(err)
	}
	out, err := gen.Generate(prompt, models.GenerateOptions{MaxNewTokens: 10, Stop: []int{tok.EOS()}})
	if err != nil {
		t.Fatal(err)
	}
	text := tok.Decode(out)
	t.Logf("generated %q", text)
	if !strings.Contains(text, "Paris") {
		t.Errorf("the answer %q does not name Paris", text)
	}
	seq := make([]int32, 0, len(prompt)+len(out))
	for _, id := range append(append([]int{}, prompt...), out[:len(out)-1]...) {
		seq = append(seq, int32(id))
	}
	logits := decodertest.Forward(t, backend, ctx, m, seq)
	for i, id := range out {
		if best := llama.Argmax(logits[len(prompt)-1+i]); best != id {
			t.Errorf("token %d: generated %d, the full pass's argmax is %d", i, id, best)
		}
	}
}
