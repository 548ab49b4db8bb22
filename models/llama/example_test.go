package llama_test

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/llama"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/quanta-ml/quanta/tokenizer"
)

// Greedy generation, streamed, with SmolLM2-135M-Instruct from its GGUF file (make assets fetches it).
func Example() {
	f, err := gguf.Open("SmolLM2-135M-Instruct.Q4_1.gguf")
	if err != nil {
		panic(err)
	}
	defer f.Close()
	tok, err := tokenizer.NewBPEFromGGUF(f)
	if err != nil {
		panic(err)
	}
	ctx := context.New()
	model, err := llama.LoadGGUF(ctx, f, llama.LoadOptions{})
	if err != nil {
		panic(err)
	}
	gen, err := models.NewGenerator(runtime.MustBackend(), ctx, model, models.GeneratorOptions{MaxLen: 256})
	if err != nil {
		panic(err)
	}
	prompt := tok.Encode("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
		tokenizer.EncodeOptions{ParseSpecial: true})
	// Tokens are streamed as they are chosen; Sampling's zero value is greedy decoding.
	for id, err := range gen.Stream(prompt, models.GenerateOptions{MaxNewTokens: 32, Stop: []int{tok.EOS()}}) {
		if err != nil {
			panic(err)
		}
		fmt.Print(tok.Decode([]int{id}))
	}
	fmt.Println()
}

// The full forward pass of a small random model: logits for every position.
func ExampleModel_Forward() {
	model, err := llama.New(llama.Config{VocabSize: 32, Dim: 8, Layers: 1, Heads: 2, KVHeads: 1, HeadDim: 4, FFNDim: 16,
		RMSNormEps: 1e-5, RoPEBase: 10000, TiedEmbeddings: true})
	if err != nil {
		panic(err)
	}
	ctx := context.New()
	logits := context.MustExecOnce(runtime.MustBackend(), ctx, func(ctx *context.Context, tokens *graph.Node) *graph.Node {
		return model.Forward(ctx, tokens)
	}, [][]int32{{1, 2, 3}})
	fmt.Println(logits.Shape())
	// Output:
	// (Float32)[1 3 32]
}
