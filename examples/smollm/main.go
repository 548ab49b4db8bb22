// Command smollm generates text with SmolLM2-135M-Instruct: a prompt in, the greedy continuation
// out (streamed), then one line with the format, the bytes of the weights, the load time, the
// prompt and decoding speeds in tokens per second, and the peak memory.
//
//	make assets                                         # fetches the GGUF file
//	go run ./examples/smollm -prompt "What is the capital of France?"
//	go run ./examples/smollm -format nf4 -prompt "What is the capital of France?"
//
// -format names a rule set of models.Preset: f32 (default), nf4 (blocks of 64 along in,
// bitsandbytes' layout), nf4-out (blocks along out), int8 (a scale per output channel), int8-in,
// ternary, ternary-scaled, binary, binary-scaled. Every projection is quantized as the loader
// decodes it (the float model is never whole in memory); the embeddings, which are also the
// output head, and the norms stay float32.
//
// -bench measures instead what reference/llamacpp_speed.py measures for llama.cpp, and prints
// one JSON line: prompt tokens/s (the first -bench-prompt GPL-3 tokens as one batch from an
// empty cache) and decode tokens/s (-bench-decode greedy single-token steps after the prompt
// "The"), each the median and best of -reps runs after an untimed warm-up (which compiles).
// -speed-table FILE... prints one markdown table from such JSON lines, quanta's and llama.cpp's
// (make bench-llamacpp runs both and prints it).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/llama"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/quanta-ml/quanta/tokenizer"
)

var (
	flagGGUF   = flag.String("gguf", assets.Path(assets.SmolLM2), "the SmolLM2 GGUF file")
	flagFormat = flag.String("format", "f32", "the projections' format: "+strings.Join(models.PresetNames(), ", "))
	flagPrompt = flag.String("prompt", "What is the capital of France?", "the user's message (or the raw text with -chat=false)")
	flagChat   = flag.Bool("chat", true, "wrap the prompt in SmolLM2's chat template")
	flagSystem = flag.String("system", "You are a helpful AI assistant named SmolLM, trained by Hugging Face", "the system message of the chat template")
	flagMaxNew = flag.Int("max", 128, "the most tokens to generate")
	flagMaxLen = flag.Int("maxlen", 1024, "the longest sequence (prompt and answer): the size of the key/value cache")

	flagBench       = flag.Bool("bench", false, "measure prompt and decode tokens/s as reference/llamacpp_speed.py does; print one JSON line")
	flagBenchText   = flag.String("bench-text", "/usr/share/common-licenses/GPL-3", "the text whose first tokens are the -bench prompt")
	flagBenchPrompt = flag.Int("bench-prompt", 512, "-bench: the prompt's tokens")
	flagBenchDecode = flag.Int("bench-decode", 128, "-bench: the decoding steps")
	flagReps        = flag.Int("reps", 3, "-bench: timed repetitions (after one warm-up)")
	flagSpeedTable  = flag.Bool("speed-table", false, "print a markdown table from the JSON lines of the files given as arguments (quanta's -bench and llamacpp_speed.py's)")
)

func main() {
	flag.Parse()
	var err error
	switch {
	case *flagSpeedTable:
		err = speedTable(flag.Args())
	case *flagBench:
		err = bench()
	default:
		err = generate()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "smollm:", err)
		os.Exit(1)
	}
}

// loaded is the model of one format, ready to run.
type loaded struct {
	backend   backends.Backend
	tok       *tokenizer.BPE
	ctx       *context.Context
	model     *llama.Model
	quantizer *models.Quantizer
	seconds   float64
	loadRSS   string // resident memory right after loading, before any graph ran
	loadPeak  string // peak resident memory until then
}

func load() (*loaded, error) {
	rules, err := models.Preset(*flagFormat)
	if err != nil {
		return nil, err
	}
	q, err := models.NewQuantizer(rules)
	if err != nil {
		return nil, err
	}
	backend, err := runtime.Backend()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	f, err := gguf.Open(*flagGGUF)
	if err != nil {
		return nil, fmt.Errorf("%w (run make assets to fetch the model)", err)
	}
	defer f.Close()
	tok, err := tokenizer.NewBPEFromGGUF(f)
	if err != nil {
		return nil, err
	}
	ctx := context.New()
	model, err := llama.LoadGGUF(ctx, f, llama.LoadOptions{Kernel: q.Kernel, Backend: backend})
	if err != nil {
		return nil, err
	}
	model.Projection = q.Projection
	return &loaded{backend: backend, tok: tok, ctx: ctx, model: model, quantizer: q, seconds: time.Since(start).Seconds(),
		loadRSS: procMemory("VmRSS"), loadPeak: procMemory("VmHWM")}, nil
}

// weights describes the bytes of the weights: all of them, and the projections'.
func (l *loaded) weights() string {
	return fmt.Sprintf("weights %.1f MB (projections %.1f MB)", float64(l.ctx.Memory())/1e6, float64(l.quantizer.Report().BytesAfter())/1e6)
}

func generate() error {
	l, err := load()
	if err != nil {
		return err
	}
	text := *flagPrompt
	if *flagChat {
		text = "<|im_start|>system\n" + *flagSystem + "<|im_end|>\n<|im_start|>user\n" + *flagPrompt + "<|im_end|>\n<|im_start|>assistant\n"
	}
	ids := l.tok.Encode(text, tokenizer.EncodeOptions{ParseSpecial: *flagChat})
	gen, err := llama.NewGenerator(l.backend, l.ctx, l.model, min(*flagMaxLen, l.model.ContextLength))
	if err != nil {
		return err
	}
	t0 := time.Now()
	var stamps []time.Duration // when each token was chosen
	out, err := gen.Generate(ids, llama.GenerateOptions{MaxNewTokens: *flagMaxNew, Stop: []int{l.tok.EOS()}, OnToken: func(id int) bool {
		stamps = append(stamps, time.Since(t0))
		if id != l.tok.EOS() {
			_, _ = os.Stdout.Write(l.tok.Bytes(id))
		}
		return true
	}})
	if err != nil {
		return err
	}
	fmt.Println()
	if len(stamps) == 0 {
		return nil
	}
	// The first token's time includes compiling the prompt graph, the second's compiling the
	// one-token step graph: the decoding rate is measured from the second token on. The prompt
	// rate needs a second run (bench measures both without compilation).
	rate := "n/a"
	if n := len(stamps); n > 2 {
		rate = fmt.Sprintf("%.1f", float64(n-2)/(stamps[n-1]-stamps[1]).Seconds())
	}
	fmt.Fprintf(os.Stderr, "[%s, %s] %s, load %.2fs, prompt %d tokens, first token after %.2fs (compilation included), %d tokens, decoding %s tokens/s (compilation excluded), RSS after loading %s (peak while loading %s), peak RSS %s\n",
		l.backend.Name(), *flagFormat, l.weights(), l.seconds, len(ids), stamps[0].Seconds(), len(out), rate, l.loadRSS, l.loadPeak, procMemory("VmHWM"))
	return nil
}

// BenchResult is the JSON line of -bench; the field names follow reference/llamacpp_speed.py's.
type BenchResult struct {
	Engine          string  `json:"engine"`
	Type            string  `json:"type"`
	Backend         string  `json:"backend"`
	WeightBytes     int64   `json:"weight_bytes"`
	PromptTokens    int     `json:"prompt_tokens"`
	PromptMedian    float64 `json:"prompt_tok_s_median"`
	PromptBest      float64 `json:"prompt_tok_s_best"`
	DecodeTokens    int     `json:"decode_tokens"`
	DecodeMedian    float64 `json:"decode_tok_s_median"`
	DecodeBest      float64 `json:"decode_tok_s_best"`
	DecodeText      string  `json:"decode_text"`
	Reps            int     `json:"reps"`
	LoadSeconds     float64 `json:"load_seconds"`
	LoadRSS         string  `json:"rss_after_load"`
	LoadPeak        string  `json:"peak_rss_load"`
	PeakRSS         string  `json:"peak_rss"`
	DecodeCacheSize int     `json:"decode_cache"`
}

func bench() error {
	if *flagReps < 1 || *flagBenchPrompt < 1 || *flagBenchDecode < 1 {
		return errors.New("-reps, -bench-prompt and -bench-decode must be positive")
	}
	l, err := load()
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(*flagBenchText)
	if err != nil {
		return errors.Wrap(err, "the -bench text")
	}
	prompt := l.tok.Encode(string(raw), tokenizer.EncodeOptions{})
	if len(prompt) < *flagBenchPrompt {
		return errors.Errorf("%s has %d tokens, fewer than -bench-prompt %d", *flagBenchText, len(prompt), *flagBenchPrompt)
	}
	prompt = prompt[:*flagBenchPrompt]
	first := l.tok.Encode("The", tokenizer.EncodeOptions{})
	res := BenchResult{Engine: "quanta", Type: *flagFormat, Backend: l.backend.Name(), WeightBytes: int64(l.ctx.Memory()),
		PromptTokens: len(prompt), DecodeTokens: *flagBenchDecode, Reps: *flagReps, LoadSeconds: l.seconds, LoadRSS: l.loadRSS, LoadPeak: l.loadPeak}

	// Prompt: one Step over the whole prompt from an empty cache, until the first token is chosen.
	promptGen, err := llama.NewGenerator(l.backend, l.ctx, l.model, len(prompt)+1)
	if err != nil {
		return err
	}
	promptRun := func() (float64, error) {
		start := time.Now()
		_, err := promptGen.Generate(prompt, llama.GenerateOptions{MaxNewTokens: 1})
		return time.Since(start).Seconds(), err
	}
	// Decode: "The", then decode single-token steps, timed from the first chosen token to the
	// last (the cache holds the 1+decode+1 positions, rounded up to a multiple of 64).
	res.DecodeCacheSize = (len(first) + *flagBenchDecode + 1 + 63) / 64 * 64
	decodeGen, err := llama.NewGenerator(l.backend, l.ctx, l.model, res.DecodeCacheSize)
	if err != nil {
		return err
	}
	var text []int
	decodeRun := func() (float64, error) {
		var t0 time.Time
		text = text[:0]
		_, err := decodeGen.Generate(first, llama.GenerateOptions{MaxNewTokens: *flagBenchDecode + 1, OnToken: func(id int) bool {
			if len(text) == 0 {
				t0 = time.Now()
			}
			text = append(text, id)
			return true
		}})
		return time.Since(t0).Seconds(), err
	}
	if _, err := promptRun(); err != nil { // warm-up: compiles
		return err
	}
	if _, err := decodeRun(); err != nil {
		return err
	}
	var promptTimes, decodeTimes []float64
	for range *flagReps {
		p, err := promptRun()
		if err != nil {
			return err
		}
		d, err := decodeRun()
		if err != nil {
			return err
		}
		promptTimes, decodeTimes = append(promptTimes, p), append(decodeTimes, d)
	}
	res.PromptMedian, res.PromptBest = rates(float64(len(prompt)), promptTimes)
	res.DecodeMedian, res.DecodeBest = rates(float64(*flagBenchDecode), decodeTimes)
	// The first -bench-decode tokens chosen, as llamacpp_speed.py prints them.
	res.DecodeText = l.tok.Decode(text[:*flagBenchDecode])
	res.PeakRSS = procMemory("VmHWM")
	line, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}

// rates returns n / median(seconds) and n / min(seconds).
func rates(n float64, seconds []float64) (median, best float64) {
	s := append([]float64(nil), seconds...)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return n / m, n / s[0]
}

// procMemory returns a memory figure of /proc/self/status (Linux): "VmRSS" the resident memory,
// "VmHWM" its peak; "n/a" elsewhere.
func procMemory(field string) string {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "n/a"
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			fields := strings.Fields(rest)
			if kb, err := strconv.Atoi(fields[0]); err == nil {
				return fmt.Sprintf("%.0f MB", float64(kb)*1024/1e6)
			}
		}
	}
	return "n/a"
}

// speedTable prints one markdown table from JSON lines: quanta's (-bench) and llama.cpp's
// (reference/llamacpp_speed.py, engine-less lines with a "file" field).
func speedTable(files []string) error {
	if len(files) == 0 {
		return errors.New("-speed-table needs the JSON-lines files as arguments")
	}
	fmt.Println("| engine | weights | file/weight MB | prompt tok/s (median, best) | decode tok/s (median, best) | RSS after load (peak while loading), peak |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		scanner := bufio.NewScanner(f)
		scanner.Buffer(make([]byte, 1<<20), 1<<20)
		for scanner.Scan() {
			line := strings.TrimSpace(scanner.Text())
			if !strings.HasPrefix(line, "{") {
				continue
			}
			var r struct {
				BenchResult
				File      string `json:"file"`
				FileBytes int64  `json:"file_bytes"`
				Threads   int    `json:"threads"`
				Quick     bool   `json:"quick"`
			}
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				f.Close()
				return errors.Wrapf(err, "%s", name)
			}
			engine, bytes, rss := r.Engine, r.WeightBytes, r.LoadRSS+" ("+r.LoadPeak+"), "+r.PeakRSS
			if engine == "" {
				engine, bytes, rss = fmt.Sprintf("llama.cpp (%d threads)", r.Threads), r.FileBytes, "—"
			} else {
				engine = "quanta (" + r.Backend + ")"
			}
			fmt.Printf("| %s | %s | %.1f | %.1f, %.1f | %.1f, %.1f | %s |\n", engine, r.Type, float64(bytes)/1e6,
				r.PromptMedian, r.PromptBest, r.DecodeMedian, r.DecodeBest, rss)
		}
		f.Close()
		if err := scanner.Err(); err != nil {
			return err
		}
	}
	return nil
}
