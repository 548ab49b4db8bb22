package minilm_test

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/models/minilm"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/quanta-ml/quanta/tokenizer"
)

// Sentence embeddings with all-MiniLM-L6-v2 (make assets fetches its directory).
func Example() {
	dir := "minilm" // config.json, model.safetensors, tokenizer.json
	ctx := context.New()
	model, err := minilm.LoadDir(ctx, dir, minilm.LoadOptions{})
	if err != nil {
		panic(err)
	}
	tok, err := tokenizer.NewWordPieceFromJSON(dir + "/tokenizer.json")
	if err != nil {
		panic(err)
	}
	embedder, err := minilm.NewEmbedder(runtime.MustBackend(), ctx, model, tok)
	if err != nil {
		panic(err)
	}
	vectors, err := embedder.Embed([]string{"A man is eating food.", "A man is eating a piece of bread."})
	if err != nil {
		panic(err)
	}
	cosine := 0.0
	for i := range vectors[0] {
		cosine += float64(vectors[0][i] * vectors[1][i])
	}
	fmt.Printf("cosine similarity %.2f\n", cosine)
}
