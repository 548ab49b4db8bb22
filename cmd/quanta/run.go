package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/arch"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/quanta-ml/quanta/tokenizer"
)

const runUsage = `usage: quanta run [flags] MODEL.gguf "prompt"

Runs a GGUF model (general.architecture "llama": SmolLM2, Llama, ...; "gemma3"; or "qwen2":
Qwen2, Qwen2.5) on the prompt: every tensor in the format the file stores it (-format file:
Q4_0 ... Q8_0, the K-quants, IQ4_NL as they are; F32, F16, BF16 as float32), or converted to
-format as it loads;
the prompt is wrapped in the model's chat template when the file has one of a known shape (a
file without one, a base model's, continues the prompt as it is), the answer is streamed, then
the prompt and decoding speeds are printed.

flags:
`

// runOptions are the flags of quanta run.
type runOptions struct {
	format, head, system, cache, cacheDType string
	maxNew, maxLen                          int
	raw, fuse                               bool
	sampling                                models.Sampling
	seed                                    int64
}

// cmdRun is quanta run.
func cmdRun(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // written below: to stdout when asked for (-h), to stderr after an error
	var o runOptions
	fs.StringVar(&o.format, "format", models.FilePreset, "the weights' format: file (as the file stores them), or a conversion of the projections: "+
		strings.Join(models.PresetNames()[1:], ", "))
	fs.StringVar(&o.head, "head", "auto", "the token-embedding table and tied output head: auto (file for -format file, f32 for -format f32, "+
		"int8 otherwise), "+strings.Join(models.TableFormats(), ", "))
	fs.IntVar(&o.maxNew, "max", 256, "the most tokens to generate")
	fs.IntVar(&o.maxLen, "maxlen", 0, "the longest sequence, prompt and answer (0: the model's context length)")
	fs.Float64Var(&o.sampling.Temperature, "temp", 0.8, "the sampling temperature (0: greedy, the most likely token)")
	fs.IntVar(&o.sampling.TopK, "top-k", 40, "sample among the k most likely tokens (0: all)")
	fs.Float64Var(&o.sampling.TopP, "top-p", 0.95, "sample among the most likely tokens whose probabilities sum to p, above 0 up to 1 (1: all)")
	fs.Float64Var(&o.sampling.RepetitionPenalty, "repeat-penalty", 1, "penalize tokens already in the sequence (0 or 1: none)")
	fs.Int64Var(&o.seed, "seed", -1, "the random seed: the same seed gives the same answer (-1: a random seed, printed at the end)")
	fs.StringVar(&o.system, "system", "", "the system message (default: the chat template's own, if it has one)")
	fs.BoolVar(&o.raw, "raw", false, "send the prompt as it is, without the chat template (control-token texts such as <|im_start|> are their tokens, as in llama.cpp's CLI)")
	fs.BoolVar(&o.fuse, "fuse", true, "store q/k/v and gate/up as one product each where the format allows it exactly (q/k/v with biases, Qwen2's, stay apart)")
	fs.StringVar(&o.cache, "cache", "grow", "the key/value cache: grow (as long as the attended window) or full (-maxlen from the start)")
	fs.StringVar(&o.cacheDType, "cache-dtype", "float32", "the key/value cache's element type: float32, or float16 (half the bytes a step reads, as llama.cpp's default cache)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return writeHelp(runHelp(fs), stdout, stderr)
		}
		fmt.Fprint(stderr, runHelp(fs))
		return exitUsage
	}
	if fs.NArg() != 2 {
		fmt.Fprintf(stderr, "quanta run: %s %q; want MODEL.gguf and the prompt, after the flags\n\n", count(fs.NArg(), "argument"), fs.Args())
		fmt.Fprint(stderr, runHelp(fs))
		return exitUsage
	}
	s, err := o.settings()
	if err != nil {
		fmt.Fprintf(stderr, "quanta run: %v\n", err)
		return exitUsage
	}
	if err := runModel(fs.Arg(0), fs.Arg(1), o, s, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "quanta run: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// runHelp returns quanta run's help: the usage and the flags of fs.
func runHelp(fs *flag.FlagSet) string {
	var b strings.Builder
	b.WriteString(runUsage)
	out := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	return b.String()
}

// progressKeeper is a models.Keeper that reports each kept kernel's scope to progress.
type progressKeeper struct {
	*models.Quantizer
	progress func(scope string)
}

func (k progressKeeper) KeepKernel(scope string, w implicitarray.Array) ([]models.Variable, error) {
	k.progress(scope)
	return k.Quantizer.KeepKernel(scope, w)
}

// isTerminal reports whether w is a terminal, where a progress line can rewrite itself.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// layerOf reads the block index out of a projection scope such as "/layer_12/attn_qkv".
var layerOf = regexp.MustCompile(`^/layer_(\d+)/`)

// runSettings are the values runModel takes from quanta run's flags, checked and parsed.
type runSettings struct {
	sampling   models.Sampling // its seed drawn when -seed is -1
	head       string          // the table format of the token embedding and tied head
	quantizer  *models.Quantizer
	cache      models.CacheMode
	cacheDType dtypes.DType
}

// settings checks o's values, each error naming its flag and what is accepted, before any file
// is read.
func (o runOptions) settings() (runSettings, error) {
	if o.seed < -1 {
		return runSettings{}, fmt.Errorf("-seed %d; accepted: >= 0, or -1 for a random seed", o.seed)
	}
	s := runSettings{sampling: o.sampling}
	s.sampling.Seed = uint64(o.seed)
	if o.seed == -1 {
		s.sampling.Seed = rand.Uint64() >> 1
	}
	// models.Sampling reads TopP 0 as every token; llama.cpp and transformers keep the most likely
	// token alone, so a user of theirs would get the opposite of what they asked: the command
	// accepts above 0 up to 1 (0 only where greedy decoding draws nothing), and says so.
	if tp := o.sampling.TopP; !(tp > 0 && tp <= 1) && !(tp == 0 && o.sampling.Greedy()) {
		return runSettings{}, fmt.Errorf("-top-p %g; accepted: above 0 up to 1 (1: every token); the most likely token alone is -temp 0", tp)
	}
	// Each setting alone, so that the error names its flag.
	for _, f := range []struct {
		name string
		s    models.Sampling
	}{{"-temp", models.Sampling{Temperature: o.sampling.Temperature}}, {"-top-k", models.Sampling{TopK: o.sampling.TopK}},
		{"-top-p", models.Sampling{TopP: o.sampling.TopP}}, {"-repeat-penalty", models.Sampling{RepetitionPenalty: o.sampling.RepetitionPenalty}}} {
		if err := f.s.Validate(); err != nil {
			return runSettings{}, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	if o.maxNew < 1 {
		return runSettings{}, fmt.Errorf("-max %d; accepted: >= 1", o.maxNew)
	}
	if o.maxLen < 0 {
		return runSettings{}, fmt.Errorf("-maxlen %d; accepted: >= 0 (0: the context length)", o.maxLen)
	}
	s.head = strings.ToLower(strings.TrimSpace(o.head))
	if s.head == "auto" {
		s.head = models.DefaultTableFormat(o.format)
	}
	rules, err := models.Preset(o.format)
	if err != nil {
		return runSettings{}, fmt.Errorf("-format: %w", err)
	}
	headRule, err := models.TableRule("/token_embd", s.head)
	if err != nil {
		return runSettings{}, fmt.Errorf("-head (auto, or a table format): %w", err)
	}
	if s.quantizer, err = models.NewQuantizer(append([]models.Rule{headRule}, rules...)); err != nil {
		return runSettings{}, err
	}
	if s.cache, err = models.ParseCacheMode(o.cache); err != nil {
		return runSettings{}, fmt.Errorf("-cache: %w", err)
	}
	if s.cacheDType, err = models.ParseCacheDType(o.cacheDType); err != nil {
		return runSettings{}, fmt.Errorf("-cache-dtype: %w", err)
	}
	return s, nil
}

// runModel loads path, prompts it and streams the answer to stdout; progress and the final
// figures go to stderr.
func runModel(path, prompt string, o runOptions, s runSettings, stdout, stderr io.Writer) error {
	backend, err := runtime.Backend()
	if err != nil {
		return err
	}
	start := time.Now()
	f, err := gguf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	archName, err := arch.Of(f)
	if err != nil {
		return err
	}
	layers, _ := f.Uint(archName + ".block_count") // for the progress line only: the loader checks it
	tok, err := tokenizer.NewBPEFromGGUF(f)
	if err != nil {
		return err
	}
	name := filepath.Base(path)
	p := tokenizer.EncodePrompt(f, tok, prompt, o.system, !o.raw)
	switch {
	case errors.Is(p.Raw, gguf.ErrNotFound):
		fmt.Fprintf(stderr, "quanta run: %s has no chat template; using the raw prompt\n", name)
	case p.Raw != nil:
		fmt.Fprintf(stderr, "quanta run: %v; using the raw prompt\n", p.Raw)
	}
	if o.system != "" && !p.Templated {
		fmt.Fprintln(stderr, "quanta run: -system has no effect on a raw prompt")
	}
	ids, stops := p.IDs, p.Stops
	// Checked before the weights load: the loader validates the context length too.
	contextLength := 0
	if n, err := f.Uint(archName + ".context_length"); err == nil {
		if err := fileio.CheckInt(archName+".context_length", n, 0, fileio.MaxCount); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		contextLength = int(n)
	}
	maxLen := o.maxLen
	if maxLen == 0 {
		maxLen = contextLength
	}
	switch {
	case maxLen == 0:
		return fmt.Errorf("%s has no %s.context_length; accepted: -maxlen, the longest sequence (prompt and answer)", name, archName)
	case contextLength > 0 && maxLen > contextLength:
		return fmt.Errorf("-maxlen %d; accepted: at most %s.context_length = %d", maxLen, archName, contextLength)
	case len(ids) == 0:
		return fmt.Errorf("the prompt is empty and %s adds no beginning-of-sequence token; accepted: a prompt of one token or more", name)
	case len(ids)+1 > maxLen:
		return fmt.Errorf("the prompt is %d tokens; -maxlen %d (context length %d) leaves no room for an answer", len(ids), maxLen, contextLength)
	}
	shown, live := -1, isTerminal(stderr)
	progress := func(scope string) {
		if !live {
			return // a log gets the final line only
		}
		if m := layerOf.FindStringSubmatch(scope); m != nil {
			if i, _ := strconv.Atoi(m[1]); i != shown {
				shown = i
				fmt.Fprintf(stderr, "\rloading %s (%s): layer %d/%d, weights %s ", name, archName, i+1, layers, o.format)
			}
		}
	}
	q := s.quantizer
	opts := arch.QuantizerOptions(q, backend)
	opts.Kernel = func(scope string, k *tensors.Tensor) ([]models.Variable, error) {
		progress(scope)
		return q.Kernel(scope, k)
	}
	opts.Keep = progressKeeper{q, progress}
	if !o.fuse {
		opts.Fuse = nil
	}
	ctx := context.New()
	m, err := arch.LoadGGUF(ctx, f, opts)
	if err != nil {
		if live {
			fmt.Fprintln(stderr) // ends the progress line
		}
		return err
	}
	spec := m.DecodeSpec()
	erase, pad := "", "" // over the progress line
	if live {
		erase, pad = "\r", strings.Repeat(" ", 20)
	}
	fmt.Fprintf(stderr, "%sloaded %s (%s) in %.1fs: %d layers, weights %s, head %s, %.1f MB%s\n", erase, name, archName,
		time.Since(start).Seconds(), spec.Layers, o.format, s.head, float64(ctx.Memory())/1e6, pad)

	gen, err := models.NewGenerator(backend, ctx, m, models.GeneratorOptions{MaxLen: maxLen, Cache: s.cache, CacheDType: s.cacheDType})
	if err != nil {
		return err
	}
	defer gen.Finalize()
	n, last := 0, -1
	answer := tokenizer.NewUTF8Writer(stdout) // a character split across tokens is written whole
	for id, err := range gen.Stream(ids, models.GenerateOptions{MaxNewTokens: o.maxNew, Stop: stops, Sampling: s.sampling}) {
		if err != nil {
			return err
		}
		n, last = n+1, id
		if !slices.Contains(stops, id) {
			if _, err := answer.Write(tok.Piece(id)); err != nil {
				return fmt.Errorf("writing the answer: %w", err)
			}
		}
	}
	if err := answer.Flush(); err != nil {
		return fmt.Errorf("writing the answer: %w", err)
	}
	if _, err := fmt.Fprintln(stdout); err != nil {
		return fmt.Errorf("writing the answer: %w", err)
	}
	if n < o.maxNew && !slices.Contains(stops, last) {
		fmt.Fprintf(stderr, "quanta run: the answer stopped at -maxlen %d (a prompt of %d tokens)\n", maxLen, len(ids))
	}
	st := gen.Stats()
	seedNote := "" // greedy decoding draws nothing
	if !s.sampling.Greedy() {
		seedNote = fmt.Sprintf("; seed %d", s.sampling.Seed)
	}
	decoding := "no decoding step" // an answer of one token comes from the prompt's pass
	if st.DecodeSteps > 0 {
		decoding = fmt.Sprintf("decoding %.1f tokens/s", st.DecodeTokensPerSecond())
	}
	fmt.Fprintf(stderr, "prompt: %s, %.1f tokens/s; answer: %s, %s; %s in %.1fs (not counted)%s\n",
		count(st.PromptTokens, "token"), st.PromptTokensPerSecond(), count(n, "token"), decoding,
		count(st.Compilations, "compilation"), st.CompileSeconds, seedNote)
	return nil
}

// count writes n and the noun, plural unless n is 1.
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
