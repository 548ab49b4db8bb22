// Command smollm generates text with SmolLM2-135M-Instruct in float32: a prompt in, the greedy
// continuation out (streamed), and a line with the load time and tokens per second.
//
//	make assets                  # fetches the GGUF file
//	go run ./examples/smollm -prompt "What is the capital of France?"
//
// The linear layers are float32 here; quantized variants plug in through llama.Model.Projection
// and llama.LoadOptions.Kernel.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/models/llama"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/quanta-ml/quanta/tokenizer"
)

func main() {
	path := flag.String("gguf", assets.Path(assets.SmolLM2), "the SmolLM2 GGUF file")
	prompt := flag.String("prompt", "What is the capital of France?", "the user's message (or the raw text with -chat=false)")
	chat := flag.Bool("chat", true, "wrap the prompt in SmolLM2's chat template")
	system := flag.String("system", "You are a helpful AI assistant named SmolLM, trained by Hugging Face", "the system message of the chat template")
	maxNew := flag.Int("max", 128, "the most tokens to generate")
	maxLen := flag.Int("maxlen", 1024, "the longest sequence (prompt and answer): the size of the key/value cache")
	flag.Parse()
	if err := run(*path, *prompt, *system, *chat, *maxNew, *maxLen); err != nil {
		fmt.Fprintln(os.Stderr, "smollm:", err)
		os.Exit(1)
	}
}

func run(path, prompt, system string, chat bool, maxNew, maxLen int) error {
	backend, err := runtime.Backend()
	if err != nil {
		return err
	}
	start := time.Now()
	f, err := gguf.Open(path)
	if err != nil {
		return fmt.Errorf("%w (run make assets to fetch the model)", err)
	}
	defer f.Close()
	tok, err := tokenizer.NewBPEFromGGUF(f)
	if err != nil {
		return err
	}
	ctx := context.New()
	model, err := llama.LoadGGUF(ctx, f, llama.LoadOptions{})
	if err != nil {
		return err
	}
	loaded := time.Since(start)

	text := prompt
	if chat {
		text = "<|im_start|>system\n" + system + "<|im_end|>\n<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n"
	}
	ids := tok.Encode(text, tokenizer.EncodeOptions{ParseSpecial: chat})
	gen, err := llama.NewGenerator(backend, ctx, model, min(maxLen, model.ContextLength))
	if err != nil {
		return err
	}
	t0 := time.Now()
	var stamps []time.Duration // when each token was chosen
	out, err := gen.Generate(ids, llama.GenerateOptions{MaxNewTokens: maxNew, Stop: []int{tok.EOS()}, OnToken: func(id int) bool {
		stamps = append(stamps, time.Since(t0))
		if id != tok.EOS() {
			_, _ = os.Stdout.Write(tok.Bytes(id))
		}
		return true
	}})
	if err != nil {
		return err
	}
	fmt.Println()
	// The first token's time includes compiling the prompt graph, the second's compiling the
	// one-token step graph: the rate is measured from the second token on.
	rate := 0.0
	if n := len(stamps); n > 2 {
		rate = float64(n-2) / (stamps[n-1] - stamps[1]).Seconds()
	}
	if len(stamps) == 0 {
		return nil
	}
	fmt.Fprintf(os.Stderr, "[%s, f32] load %.2fs, prompt %d tokens, first token after %.2fs, %d tokens, decoding %.1f tokens/s (compilation excluded)\n",
		backend.Name(), loaded.Seconds(), len(ids), stamps[0].Seconds(), len(out), rate)
	return nil
}
