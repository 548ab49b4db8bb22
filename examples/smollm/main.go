// Command smollm generates text with SmolLM2-135M-Instruct: a prompt in, the greedy continuation
// out (streamed), then one line with the format, the bytes of the weights, the load time, the
// prompt and decoding speeds in tokens per second, and the peak memory.
//
//	make assets                                         # fetches the GGUF file
//	go run ./examples/smollm -prompt "What is the capital of France?"
//	go run ./examples/smollm -format nf4 -prompt "What is the capital of France?"
//
// -format names a rule set of models.Preset: file (default: every tensor as the GGUF stores it,
// its Q4_1 projections and Q8_0 table as they are, never decoded; -gguf may name any SmolLM2 file,
// e.g. one of `make assets-quants`, or another architecture's: -bench and the generation run any
// file models/arch loads, such as Gemma-3's), or a conversion of the projections as the loader decodes
// them (the float model is never whole in memory): f32, nf4 (blocks of 64 along in,
// bitsandbytes' layout), nf4-out (blocks along out), int8 (a scale per output channel), int8-in,
// ternary, ternary-scaled, binary, binary-scaled. q/k/v and gate/up are fused where the format
// allows it exactly (-fuse). -head is the format of the token-embedding table, which is also the
// output head: file, f32, int8 or nf4 (models.TableRule); "auto" keeps it as the file stores it
// for -format file, float32 for -format f32 and int8 otherwise. The norms stay float32.
//
// -bench measures instead what reference/llamacpp_speed.py measures for llama.cpp, and prints
// one JSON line: prompt tokens/s (the first -bench-prompt GPL-3 tokens as one batch from an
// empty cache) and decode tokens/s (-bench-decode greedy single-token steps after the prompt
// "The", and after the whole -bench-prompt prompt), each the median and best of -reps runs after
// an untimed warm-up (which compiles), and the machine's read bandwidth. -speed-table FILE...
// prints one markdown table from such JSON lines, quanta's and llama.cpp's (make bench-llamacpp
// runs both and prints it), with each engine's weight bytes per second of decoding as a share of
// that bandwidth.
//
// -anatomy times the parts of one decoding step instead (see anatomy.go) and prints a markdown
// table: run it on a quiet machine.
//
// Each mode reads its own flags: one the chosen mode does not read is refused before the model
// loads (-bench with -prompt or -max, -reps without -bench, -anatomy with -cache, which it runs
// both of, -speed-table with any model flag).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/internal/benchsuite"
	"github.com/quanta-ml/quanta/internal/cmdflags"
	"github.com/quanta-ml/quanta/internal/cpukernels"
	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/arch"
	"github.com/quanta-ml/quanta/models/gemma3"
	"github.com/quanta-ml/quanta/models/llama"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/quanta-ml/quanta/tokenizer"
)

var (
	flagGGUF   = flag.String("gguf", assets.Path(assets.SmolLM2), "the SmolLM2 GGUF file")
	flagFormat = flag.String("format", models.FilePreset, "the weights' format: file (as the GGUF stores them) or a conversion: "+
		strings.Join(models.PresetNames()[1:], ", "))
	flagPrompt = flag.String("prompt", "What is the capital of France?", "the user's message (or the raw text with -chat=false)")
	flagChat   = flag.Bool("chat", true, "wrap the prompt in the file's chat template (a file without one, a base model's such as Gemma-3's, gets the raw prompt)")
	flagSystem = flag.String("system", "", "the system message of the chat template (default: the template's own, SmolLM2's \"You are a helpful AI assistant named SmolLM, ...\"); refused with -chat=false")
	flagMaxNew = flag.Int("max", 128, "the most tokens to generate")
	flagMaxLen = flag.Int("maxlen", 1024, "the longest sequence (prompt and answer): the size of the key/value cache")
	flagHead   = flag.String("head", "auto", "the token-embedding table and tied head: auto (file for -format file, f32 for -format f32, "+
		"else int8), "+strings.Join(models.TableFormats(), ", "))
	flagFuse       = flag.Bool("fuse", true, "store q/k/v and gate/up as one product each where the format allows it exactly")
	flagCache      = flag.String("cache", "grow", "the key/value cache: grow (tensors as long as the attended window) or full (-maxlen from the start)")
	flagCacheDType = flag.String("cache-dtype", "float32", "the key/value cache's element type: float32, or float16 (half the bytes a step reads, as llama.cpp's default cache)")
	flagWindow     = flag.Int("minwindow", models.DefaultMinWindow, "the smallest attention window, up to -maxlen (windows double from it up to -maxlen)")

	flagBench       = flag.Bool("bench", false, "measure prompt and decode tokens/s as reference/llamacpp_speed.py does; print one JSON line")
	flagBenchText   = flag.String("bench-text", "/usr/share/common-licenses/GPL-3", "the text whose first tokens are the -bench prompt")
	flagBenchPrompt = flag.Int("bench-prompt", 512, "-bench: the prompt's tokens")
	flagBenchDecode = flag.Int("bench-decode", 128, "-bench: the decoding steps")
	flagReps        = flag.Int("reps", 3, "-bench: timed repetitions (after one warm-up)")
	flagSpeedTable  = flag.Bool("speed-table", false, "print a markdown table from the JSON lines of the files given as arguments (quanta's -bench and llamacpp_speed.py's)")
	flagSpeedPairs  = flag.String("speed-pairs", "", "-speed-table: quanta formats and the llama.cpp types to set each against, as make bench-llamacpp's SPEED_PAIRS (\"f32:F32 nf4:Q4_0,Q4_1\"): a table of the ratios after the rates")
	flagAnatomy     = flag.Bool("anatomy", false, "time the parts of a decoding step (projections, attention and cache, head, empty step, ...) and print a markdown table")
)

func main() {
	flag.Parse()
	cmdflags.Exit("smollm", cmdflags.ExitUsage, checkFlags())
	var err error
	switch {
	case *flagSpeedTable:
		err = speedTable(flag.Args(), *flagSpeedPairs)
	case *flagBench:
		err = bench()
	case *flagAnatomy:
		err = anatomy()
	default:
		err = generate()
	}
	cmdflags.Exit("smollm", cmdflags.ExitFailure, err)
}

// checkFlags reports -max, -maxlen, -minwindow, a -bench or an -anatomy count out of range,
// naming the flag and its value, a -minwindow given above -maxlen (the generator silently made
// it one window of -maxlen), a -bench-decode that leaves "The" no room in -maxlen (it failed
// only after the prompt runs), more than one of -bench, -anatomy and -speed-table, -system
// with -chat=false (the raw prompt has no system message), an argument without -speed-table (a
// prompt given as one would answer -prompt's) or given to it twice, a flag the mode does not
// read (checkModeFlags), or an unknown -format, -head, -cache or -cache-dtype, before the model
// loads (models.GenerateOptions reads a MaxNewTokens of 0 as no bound, and the generator's own
// errors name its fields, not the flags).
func checkFlags() error {
	if err := cmdflags.First(
		cmdflags.AtLeast("-max", *flagMaxNew, 1, ""),
		cmdflags.AtLeast("-maxlen", *flagMaxLen, 2, "a prompt token and an answer token"),
	); err != nil {
		return err
	}
	switch {
	case *flagWindow < 0:
		return fmt.Errorf("-minwindow %d; accepted: >= 1 (0: %d)", *flagWindow, models.DefaultMinWindow)
	case *flagWindow > *flagMaxLen && isSet("minwindow"): // the generator would make it one window of -maxlen
		return fmt.Errorf("-minwindow %d above -maxlen %d; accepted: 1 to -maxlen (0: %d; the windows double from it up to -maxlen)",
			*flagWindow, *flagMaxLen, models.DefaultMinWindow)
	}
	if err := cmdflags.First(
		cmdflags.AtLeast("-reps", *flagReps, 1, "timed repetitions"),
		cmdflags.AtLeast("-bench-prompt", *flagBenchPrompt, 1, "the prompt's tokens"),
		cmdflags.AtLeast("-bench-decode", *flagBenchDecode, 1, "decoding steps"),
	); err != nil {
		return err
	}
	if *flagBench && *flagBenchDecode > *flagMaxLen-2 { // "The" (a token at least), the steps, the last token chosen
		return fmt.Errorf("-bench-decode %d with -maxlen %d; accepted: up to -maxlen - 2 (the decoding after \"The\" runs in a cache of -maxlen positions)",
			*flagBenchDecode, *flagMaxLen)
	}
	if err := cmdflags.First(
		cmdflags.AtLeast("-anatomy-window", *flagAnatomyWindow, 2, ""),
		cmdflags.AtLeast("-anatomy-reps", *flagAnatomyReps, 1, "timed runs"),
		cmdflags.AtLeast("-anatomy-tokens", *flagAnatomyTokens, 1, "tokens decoded a run"),
	); err != nil {
		return err
	}
	switch {
	case *flagAnatomyPositions < 1 || *flagAnatomyPositions > *flagAnatomyWindow:
		return fmt.Errorf("-anatomy-positions %d; accepted: 1 to -anatomy-window (%d)", *flagAnatomyPositions, *flagAnatomyWindow)
	case btoi(*flagBench)+btoi(*flagAnatomy)+btoi(*flagSpeedTable) > 1:
		return fmt.Errorf("-bench %v, -anatomy %v, -speed-table %v; accepted: at most one of them (each replaces the generation)",
			*flagBench, *flagAnatomy, *flagSpeedTable)
	case *flagSystem != "" && !*flagChat:
		return fmt.Errorf("-system with -chat=false; accepted: -system with the chat template (the raw prompt has no system message)")
	case flag.NArg() > 0 && !*flagSpeedTable:
		return fmt.Errorf("argument %q; accepted: none (the prompt is -prompt; arguments are -speed-table's files)", flag.Arg(0))
	}
	for i, name := range flag.Args() { // a file given twice would give its rows twice
		if slices.ContainsFunc(flag.Args()[:i], func(o string) bool { return filepath.Clean(o) == filepath.Clean(name) }) {
			return fmt.Errorf("-speed-table: %q listed twice; accepted: each file once", name)
		}
	}
	if err := checkModeFlags(); err != nil {
		return err
	}
	if _, err := speedPairs(*flagSpeedPairs); err != nil {
		return err
	}
	if _, err := models.Preset(*flagFormat); err != nil { // as load reads them, before the model loads
		return errors.WithMessage(err, "-format")
	}
	if _, err := models.TableRule("/"+models.EmbeddingScope, headFormat()); err != nil {
		return errors.WithMessage(err, "-head")
	}
	_, err := generatorOptions(*flagMaxLen) // -cache and -cache-dtype, before the model loads
	return err
}

// modeFlags lists the flags each mode reads: the generation (""), -bench, -anatomy (which runs
// both cache modes, so not -cache) and -speed-table (its arguments are the files).
var modeFlags = map[string][]string{
	"":            {"gguf", "format", "head", "fuse", "cache", "cache-dtype", "minwindow", "maxlen", "prompt", "chat", "system", "max"},
	"bench":       {"gguf", "format", "head", "fuse", "cache", "cache-dtype", "minwindow", "maxlen", "bench-text", "bench-prompt", "bench-decode", "reps"},
	"anatomy":     {"gguf", "format", "head", "fuse", "cache-dtype", "minwindow", "maxlen", "anatomy-window", "anatomy-reps", "anatomy-tokens", "anatomy-positions"},
	"speed-table": {"speed-pairs"},
}

// checkModeFlags reports the flags given that the chosen mode does not read, naming them (-bench
// with -max, -prompt; -reps without -bench): they would be silently ignored.
func checkModeFlags() error {
	mode := ""
	switch {
	case *flagBench:
		mode = "bench"
	case *flagAnatomy:
		mode = "anatomy"
	case *flagSpeedTable:
		mode = "speed-table"
	}
	var ignored []string
	flag.Visit(func(f *flag.Flag) {
		if slices.Contains(modeFlags[mode], f.Name) {
			return
		}
		for _, other := range []string{"", "bench", "anatomy"} { // the mode flags and others are in no list
			if slices.Contains(modeFlags[other], f.Name) {
				if mode == "" {
					ignored = append(ignored, "-"+f.Name+" without -"+other)
				} else {
					ignored = append(ignored, "-"+f.Name)
				}
				return
			}
		}
	})
	switch {
	case len(ignored) == 0:
		return nil
	case mode == "":
		return fmt.Errorf("%s; accepted: each with its mode (the generation reads none of them)", strings.Join(ignored, ", "))
	case mode == "speed-table":
		return fmt.Errorf("-speed-table with %s; accepted: none (-speed-table reads only the files given as arguments)", strings.Join(ignored, ", "))
	}
	return fmt.Errorf("-%s with %s; accepted: -%s (-%s reads no other flag)", mode, strings.Join(ignored, ", "),
		strings.Join(modeFlags[mode], ", -"), mode)
}

// isSet reports whether the flag of that name was given on the command line.
func isSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// btoi is 1 for true, 0 for false.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// loaded is the model of one format, ready to run.
type loaded struct {
	backend   backends.Backend
	tok       *tokenizer.BPE
	ctx       *context.Context
	model     models.LanguageModel
	quantizer *models.Quantizer
	seconds   float64
	loadRSS   string // resident memory right after loading, before any graph ran
	loadPeak  string // peak resident memory until then
	// prompt is -prompt encoded as quanta run encodes it (tokenizer.EncodePrompt).
	prompt tokenizer.Prompt
}

// headFormat returns -head with "auto" resolved.
func headFormat() string {
	if *flagHead != "auto" {
		return *flagHead
	}
	return models.DefaultTableFormat(*flagFormat)
}

func load() (*loaded, error) {
	rules, err := models.Preset(*flagFormat)
	if err != nil {
		return nil, errors.WithMessage(err, "-format")
	}
	head, err := models.TableRule("/"+models.EmbeddingScope, headFormat())
	if err != nil {
		return nil, errors.WithMessage(err, "-head")
	}
	q, err := models.NewQuantizer(append([]models.Rule{head}, rules...))
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
	opts := arch.QuantizerOptions(q, backend)
	if !*flagFuse {
		opts.Fuse = nil
	}
	model, err := arch.LoadGGUF(ctx, f, opts)
	if err != nil {
		return nil, err
	}
	l := &loaded{backend: backend, tok: tok, ctx: ctx, model: model, quantizer: q, seconds: time.Since(start).Seconds(),
		loadRSS: procMemory("VmRSS"), loadPeak: procMemory("VmHWM")}
	l.prompt = tokenizer.EncodePrompt(f, tok, *flagPrompt, *flagSystem, *flagChat)
	return l, nil
}

// weights describes the bytes of the weights: all of them, and the projections' and table's.
func (l *loaded) weights() string {
	return fmt.Sprintf("weights %.1f MB (projections and table %.1f MB)", float64(l.ctx.Memory())/1e6, float64(l.quantizer.Report().BytesAfter())/1e6)
}

// generatorOptions returns the generator options the flags give (cache mode and dtype, smallest
// window) for sequences of up to maxLen tokens.
func generatorOptions(maxLen int) (models.GeneratorOptions, error) {
	mode, err := models.ParseCacheMode(*flagCache)
	if err != nil {
		return models.GeneratorOptions{}, errors.WithMessage(err, "-cache")
	}
	dtype, err := models.ParseCacheDType(*flagCacheDType)
	if err != nil {
		return models.GeneratorOptions{}, errors.WithMessage(err, "-cache-dtype")
	}
	return models.GeneratorOptions{MaxLen: maxLen, MinWindow: *flagWindow, Cache: mode, CacheDType: dtype}, nil
}

// generator returns a generator of the flags' options for sequences of up to maxLen tokens.
func (l *loaded) generator(maxLen int) (*models.Generator, error) {
	opts, err := generatorOptions(maxLen)
	if err != nil {
		return nil, err
	}
	return models.NewGenerator(l.backend, l.ctx, l.model, opts)
}

func generate() error {
	l, err := load()
	if err != nil {
		return err
	}
	ids, stops := l.prompt.IDs, l.prompt.Stops
	switch {
	case errors.Is(l.prompt.Raw, gguf.ErrNotFound):
		fmt.Fprintln(os.Stderr, "smollm: the file has no chat template (a base model's, which continues text); using the raw prompt")
	case l.prompt.Raw != nil:
		fmt.Fprintf(os.Stderr, "smollm: %v; using the raw prompt\n", l.prompt.Raw)
	}
	contextLen := l.model.DecodeSpec().ContextLength
	maxLen := min(*flagMaxLen, contextLen)
	switch { // the generator's error would name its MaxLen
	case len(ids) >= contextLen:
		return errors.Errorf("-prompt of %d tokens; accepted: fewer than the model's context, %d", len(ids), contextLen)
	case len(ids) >= maxLen:
		return errors.Errorf("-maxlen %d: the prompt has %d tokens; accepted: more than the prompt's tokens (up to the model's context, %d)",
			*flagMaxLen, len(ids), contextLen)
	}
	gen, err := l.generator(maxLen)
	if err != nil {
		return err
	}
	n := 0
	answer := tokenizer.NewUTF8Writer(os.Stdout) // a character split across tokens is written whole
	for id, err := range gen.Stream(ids, models.GenerateOptions{MaxNewTokens: *flagMaxNew, Stop: stops}) {
		if err != nil {
			return err
		}
		n++
		if !slices.Contains(stops, id) {
			_, _ = answer.Write(l.tok.Piece(id))
		}
	}
	_ = answer.Flush()
	fmt.Println()
	st := gen.Stats()
	fmt.Fprintf(os.Stderr, "[%s, %s, head %s] %s, load %.2fs, prompt %d tokens at %.1f tokens/s, %d tokens, decoding %.1f tokens/s, "+
		"%d compilations in %.2fs (timed apart), RSS after loading %s (peak while loading %s), peak RSS %s\n",
		l.backend.Name(), *flagFormat, headFormat(), l.weights(), l.seconds, st.PromptTokens, st.PromptTokensPerSecond(), n,
		st.DecodeTokensPerSecond(), st.Compilations, st.CompileSeconds, l.loadRSS, l.loadPeak, procMemory("VmHWM"))
	return nil
}

// BenchResult is the JSON line of -bench; the field names follow reference/llamacpp_speed.py's.
type BenchResult struct {
	Engine       string  `json:"engine"`
	Type         string  `json:"type"`
	GGUF         string  `json:"gguf,omitempty"`
	Head         string  `json:"head,omitempty"`
	Fused        bool    `json:"fused,omitempty"`
	Cache        string  `json:"cache,omitempty"`
	CacheDType   string  `json:"cache_dtype,omitempty"`
	Backend      string  `json:"backend"`
	Environment  string  `json:"environment,omitempty"`
	WeightBytes  int64   `json:"weight_bytes"`
	PromptTokens int     `json:"prompt_tokens"`
	PromptMedian float64 `json:"prompt_tok_s_median"`
	PromptBest   float64 `json:"prompt_tok_s_best"`
	DecodeTokens int     `json:"decode_tokens"`
	DecodeMedian float64 `json:"decode_tok_s_median"`
	DecodeBest   float64 `json:"decode_tok_s_best"`
	DecodeText   string  `json:"decode_text"`
	// DecodeAfterPrompt*: the same decoding steps after the whole -bench-prompt prompt (the
	// attention reads a cache of that many positions more).
	DecodeAfterPromptMedian float64 `json:"decode_after_prompt_tok_s_median,omitempty"`
	DecodeAfterPromptBest   float64 `json:"decode_after_prompt_tok_s_best,omitempty"`
	Reps                    int     `json:"reps"`
	LoadSeconds             float64 `json:"load_seconds"`
	LoadRSS                 string  `json:"rss_after_load"`
	LoadPeak                string  `json:"peak_rss_load"`
	PeakRSS                 string  `json:"peak_rss"`
	DecodeCacheSize         int     `json:"decode_cache"`
	// ReadGBs is the machine's streaming-read bandwidth measured after the runs (a 512 MiB read
	// by the kernels' threads), the limit a decoding step's weight bytes are set against.
	ReadGBs float64 `json:"read_gb_s,omitempty"`
}

func bench() error {
	l, err := load()
	if err != nil {
		return err
	}
	// The decoding after the prompt needs -bench-prompt + -bench-decode + 1 positions (the
	// generator's own error would name its MaxLen, or the decoding stop short).
	if ctx := l.model.DecodeSpec().ContextLength; *flagBenchPrompt >= ctx || *flagBenchDecode >= ctx-*flagBenchPrompt {
		return errors.Errorf("-bench-prompt %d and -bench-decode %d need %d positions; accepted: at most the model's context, %d",
			*flagBenchPrompt, *flagBenchDecode, *flagBenchPrompt+*flagBenchDecode+1, ctx)
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
	res := BenchResult{Engine: "quanta", Type: *flagFormat, GGUF: filepath.Base(*flagGGUF), Head: headFormat(), Fused: fused(l.model), Cache: *flagCache, CacheDType: *flagCacheDType,
		Backend: l.backend.Name(), Environment: runtime.MustEnvironment(), WeightBytes: int64(l.ctx.Memory()),
		PromptTokens: len(prompt), DecodeTokens: *flagBenchDecode, Reps: *flagReps, LoadSeconds: l.seconds, LoadRSS: l.loadRSS, LoadPeak: l.loadPeak}

	// Prompt: one Step over the whole prompt from an empty cache, until the first token is chosen.
	promptGen, err := l.generator(len(prompt) + 1)
	if err != nil {
		return err
	}
	promptRun := func() (float64, error) {
		start := time.Now()
		_, err := promptGen.Generate(prompt, models.GenerateOptions{MaxNewTokens: 1})
		return time.Since(start).Seconds(), err
	}
	// Decode: "The", then decode single-token steps, timed from the first chosen token to the
	// last, in a cache of -maxlen positions (the default's attention follows the filled part).
	res.DecodeCacheSize = min(*flagMaxLen, l.model.DecodeSpec().ContextLength)
	decodeGen, err := l.generator(res.DecodeCacheSize)
	if err != nil {
		return err
	}
	afterPromptGen, err := l.generator(min(max(res.DecodeCacheSize, len(prompt)+*flagBenchDecode+1), l.model.DecodeSpec().ContextLength))
	if err != nil {
		return err
	}
	var text []int
	decodeRun := func(gen *models.Generator, start []int) (float64, error) {
		var t0 time.Time
		text = text[:0]
		for id, err := range gen.Stream(start, models.GenerateOptions{MaxNewTokens: *flagBenchDecode + 1}) {
			if err != nil {
				return 0, err
			}
			if len(text) == 0 {
				t0 = time.Now()
			}
			text = append(text, id)
		}
		if len(text) < *flagBenchDecode+1 {
			return 0, errors.Errorf("%d tokens decoded: -maxlen %d leaves no room for -bench-decode %d", len(text), res.DecodeCacheSize, *flagBenchDecode)
		}
		return time.Since(t0).Seconds(), nil
	}
	if _, err := promptRun(); err != nil { // warm-up: compiles
		return err
	}
	if _, err := decodeRun(afterPromptGen, prompt); err != nil {
		return err
	}
	if _, err := decodeRun(decodeGen, first); err != nil {
		return err
	}
	var promptTimes, decodeTimes, afterTimes []float64
	for range *flagReps {
		p, err := promptRun()
		if err != nil {
			return err
		}
		a, err := decodeRun(afterPromptGen, prompt)
		if err != nil {
			return err
		}
		d, err := decodeRun(decodeGen, first)
		if err != nil {
			return err
		}
		promptTimes, decodeTimes, afterTimes = append(promptTimes, p), append(decodeTimes, d), append(afterTimes, a)
	}
	res.PromptMedian, res.PromptBest = rates(float64(len(prompt)), promptTimes)
	res.DecodeMedian, res.DecodeBest = rates(float64(*flagBenchDecode), decodeTimes)
	res.DecodeAfterPromptMedian, res.DecodeAfterPromptBest = rates(float64(*flagBenchDecode), afterTimes)
	// The first -bench-decode tokens chosen, as llamacpp_speed.py prints them.
	res.DecodeText = l.tok.Decode(text[:*flagBenchDecode])
	res.PeakRSS = procMemory("VmHWM")
	res.ReadGBs = cpukernels.ReadBandwidth(512<<20) / 1e9
	line, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}

// processRate is one table cell over the processes of a row: the median of their medians, the
// best of their bests, and the lowest and highest median.
type processRate struct{ median, best, low, high float64 }

func processRates(runs [][2]float64) processRate {
	medians := make([]float64, len(runs))
	r := processRate{low: math.Inf(1), high: math.Inf(-1)}
	for i, run := range runs {
		medians[i] = run[0]
		r.best = max(r.best, run[1])
		r.low, r.high = min(r.low, run[0]), max(r.high, run[0])
	}
	r.median = benchsuite.MedianOf(medians)
	return r
}

// String writes the median and the best, and with more than one process their medians' range.
func (r processRate) String() string {
	if r.low == r.high {
		return fmt.Sprintf("%.1f, %.1f", r.median, r.best)
	}
	return fmt.Sprintf("%.1f, %.1f; %.1f-%.1f", r.median, r.best, r.low, r.high)
}

// rates returns n / median(seconds) and n / min(seconds).
func rates(n float64, seconds []float64) (med, best float64) {
	return n / benchsuite.MedianOf(seconds), n / slices.Min(seconds)
}

// procMemory returns a memory figure of the process (fileio.ProcStatus) in MB: "VmRSS" the
// resident memory, "VmHWM" its peak; "n/a" where there is none.
func procMemory(field string) string {
	n, err := fileio.ProcStatus(field)
	if err != nil {
		return "n/a"
	}
	return fmt.Sprintf("%.0f MB", float64(n)/1e6)
}

// fused reports whether m runs q/k/v or gate/up as one product.
func fused(m models.LanguageModel) bool {
	switch m := m.(type) {
	case *llama.Model:
		return m.FusedQKV || m.FusedGateUp
	case *gemma3.Model:
		return m.FusedQKV || m.FusedGateUp
	}
	return false
}

// speedTable prints one markdown table from JSON lines: quanta's (-bench) and llama.cpp's
// (reference/llamacpp_speed.py, engine-less lines with a "file" field). Lines of the same engine
// and weights (one process each, make bench-llamacpp's SPEED_ROUNDS) make one row: each rate the
// median of the processes' medians, the best their best, and the processes' decoding medians as a
// range, since on a virtual machine a process's float32 decode can differ from the next one's by
// a quarter.
func speedTable(files []string, pairsFlag string) error {
	if len(files) == 0 {
		return errors.New("-speed-table needs the JSON-lines files as arguments")
	}
	pairs, err := speedPairs(pairsFlag)
	if err != nil {
		return err
	}
	type row struct {
		engine, weights, rss string
		quanta               bool
		typ                  string // quanta's format, llama.cpp's file type
		bytes                int64
		// prompt, decode, after: each process's median and best
		prompt, decode, after [][2]float64
	}
	var rows []*row
	var envs []string
	var bandwidths []float64
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
			engine, bytes, rss, weights := r.Engine, r.WeightBytes, r.LoadRSS+" ("+r.LoadPeak+"), "+r.PeakRSS, r.Type
			if engine == "" {
				engine, bytes, rss = fmt.Sprintf("llama.cpp (%d threads)", r.Threads), r.FileBytes, "—"
			} else {
				engine = "quanta (" + r.Backend + ")"
				if r.Environment != "" && !slices.Contains(envs, r.Environment) {
					envs = append(envs, r.Environment)
				}
				if r.Type == models.FilePreset && r.GGUF != "" {
					weights = "file " + strings.TrimSuffix(r.GGUF, ".gguf")
				}
				if r.Head != "" {
					weights += ", head " + r.Head
				}
				if r.CacheDType != "" {
					weights += ", cache " + r.CacheDType
				}
			}
			if r.ReadGBs > 0 {
				bandwidths = append(bandwidths, r.ReadGBs)
			}
			i := slices.IndexFunc(rows, func(o *row) bool { return o.engine == engine && o.weights == weights })
			if i < 0 {
				rows = append(rows, &row{engine: engine, weights: weights, rss: rss, bytes: bytes, quanta: r.Engine != "", typ: r.Type})
				i = len(rows) - 1
			}
			o := rows[i]
			o.prompt = append(o.prompt, [2]float64{r.PromptMedian, r.PromptBest})
			o.decode = append(o.decode, [2]float64{r.DecodeMedian, r.DecodeBest})
			o.after = append(o.after, [2]float64{r.DecodeAfterPromptMedian, r.DecodeAfterPromptBest})
		}
		f.Close()
		if err := scanner.Err(); err != nil {
			return err
		}
	}
	if len(rows) == 0 {
		return errors.Errorf("-speed-table: no JSON line (quanta's -bench, llamacpp_speed.py's) in %s", strings.Join(files, ", "))
	}
	bw := 0.0 // the median of the bandwidths measured with the quanta rows
	if len(bandwidths) > 0 {
		bw = benchsuite.MedianOf(bandwidths)
	}
	fmt.Println("| engine | weights | file/weight MB | processes | prompt tok/s (median, best) | decode tok/s (median, best; processes' range) | decode after the prompt | decode: weight GB/s (of the read bandwidth) | RSS after load (peak while loading), peak |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		prompt, decode, after := processRates(r.prompt), processRates(r.decode), processRates(r.after)
		stream := float64(r.bytes) * decode.median / 1e9
		share := "—"
		if bw > 0 {
			share = fmt.Sprintf("%.2f", stream/bw)
		}
		afterText := "—"
		if after.median > 0 {
			afterText = after.String()
		}
		fmt.Printf("| %s | %s | %.1f | %d | %.1f, %.1f | %s | %s | %.1f (%s) | %s |\n", r.engine, r.weights, float64(r.bytes)/1e6,
			len(r.decode), prompt.median, prompt.best, decode, afterText, stream, share, r.rss)
	}
	if bw > 0 {
		fmt.Printf("\nRead bandwidth: %.1f GB/s (median of the %d measurements taken after each quanta run; a 512 MiB read with the kernels' threads). "+
			"The weight GB/s is the weights' bytes times the median decoding rate: a step reads every weight once (the attention's cache bytes are left out).\n",
			bw, len(bandwidths))
	}
	for _, env := range envs {
		fmt.Printf("\nquanta's environment: %s.\n", env)
	}
	var ratios []string
	for _, p := range pairs {
		for _, q := range rows {
			for _, l := range rows {
				if !q.quanta || q.typ != p[0] || l.quanta || l.typ != p[1] {
					continue
				}
				ratios = append(ratios, fmt.Sprintf("| %s | %s | %s | %s | %s |", q.weights, l.weights,
					ratioText(q.prompt, l.prompt), ratioText(q.decode, l.decode), ratioText(q.after, l.after)))
			}
		}
	}
	if len(ratios) > 0 {
		fmt.Println("\nquanta ÷ llama.cpp, the medians above:")
		fmt.Println()
		fmt.Println("| quanta | llama.cpp | prompt | decode | decode after the prompt |")
		fmt.Println("|---|---|---|---|---|")
		fmt.Println(strings.Join(ratios, "\n"))
	}
	return nil
}

// ratioText is the median of quanta's processes over llama.cpp's, or a dash where either is
// missing.
func ratioText(quanta, llamacpp [][2]float64) string {
	q, l := processRates(quanta).median, processRates(llamacpp).median
	if q <= 0 || l <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2fx", q/l)
}

// speedPairs reads -speed-pairs: space-separated FORMAT:TYPES, TYPES comma-separated llama.cpp
// types (none: the format has no counterpart).
func speedPairs(s string) ([][2]string, error) {
	var pairs [][2]string
	for _, f := range strings.Fields(s) {
		format, types, ok := strings.Cut(f, ":")
		if !ok || format == "" {
			return nil, fmt.Errorf("-speed-pairs %q: %q; accepted: FORMAT:TYPES, space-separated (\"f32:F32 nf4:Q4_0,Q4_1\")", s, f)
		}
		for _, t := range strings.Split(types, ",") {
			if t != "" {
				pairs = append(pairs, [2]string{format, t})
			}
		}
	}
	return pairs, nil
}
