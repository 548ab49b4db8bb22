// Command eval measures what each quantization format costs on real models, against the
// reference harness's figures (reference/README.md): SmolLM2-135M-Instruct's perplexity on the
// first 1024 llama.cpp ids of GPL-3 (two windows, [0, 513) and [512, 1024), 1023 predictions,
// NLL from the float64 log-softmax of the float32 logits), and all-MiniLM-L6-v2's cosine to its
// float32 embeddings on the reference's 32 sentences. Each format is a named rule set
// (models.Preset): every tensor as the file stores it (file: SmolLM2's Q4_1 and Q8_0 blocks as
// they are), or every projection quantized the same way, norms float32; SmolLM2's
// token-embedding table, which is also its output head, in each of -heads (float32 by default).
//
//	make assets                                       # the models
//	go run ./examples/eval                            # every preset, both models
//	go run ./examples/eval -formats f32,nf4,int8 -models smollm2 -markdown /tmp/eval.md -json /tmp/eval.json
//
// Each model is loaded once per format, one tensor at a time through the format's
// models.Quantizer. The SmolLM2 token ids come from quanta's tokenizer (equal to llama.cpp's,
// checked against the reference's ids when they are present). The reference's figures are read from
// reference/testdata, or from $QUANTA_REFERENCE outside the repository: without them the tables
// lack their reference columns, and stderr says why, once.
package main

import (
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
	"github.com/quanta-ml/quanta/internal/cmdflags"
	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/quanta-ml/quanta/internal/refdata"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/llama"
	"github.com/quanta-ml/quanta/models/minilm"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/quanta-ml/quanta/tokenizer"
)

var (
	flagFormats  = flag.String("formats", strings.Join(models.PresetNames(), ","), "comma-separated presets (models.PresetNames)")
	flagModels   = flag.String("models", "smollm2,minilm", "comma-separated models: smollm2, minilm")
	flagGGUF     = flag.String("gguf", assets.Path(assets.SmolLM2), "the SmolLM2 GGUF file")
	flagMiniLM   = flag.String("minilm", assets.Path("minilm"), "the all-MiniLM-L6-v2 directory (config.json, model.safetensors, tokenizer.json)")
	flagText     = flag.String("text", "/usr/share/common-licenses/GPL-3", "the text whose first tokens SmolLM2 is scored on")
	flagTokens   = flag.Int("tokens", 1024, "the number of tokens scored")
	flagWindow   = flag.Int("window", 513, "the window length (Hugging Face's max_length)")
	flagStride   = flag.Int("stride", 512, "the stride between windows")
	flagJSON     = flag.String("json", "", "write the results as JSON to this file")
	flagMarkdown = flag.String("markdown", "", "write the tables as markdown to this file")
	flagHeads    = flag.String("heads", "f32", "SmolLM2: comma-separated formats of the token-embedding table, which is also the output head ("+
		strings.Join(models.TableFormats(), ", ")+"); each format runs with each")
)

func main() {
	flag.Parse()
	cmdflags.Exit("eval", cmdflags.ExitUsage, checkFlags())
	cmdflags.Exit("eval", cmdflags.ExitFailure, run())
}

// Results is what the command writes as JSON.
type Results struct {
	Backend string `json:"backend"`
	// Environment is runtime.Environment: the plugin, quanta's kernels and XLA_FLAGS, which the
	// timings depend on.
	Environment string      `json:"environment"`
	SmolLM2     []SmolLM2   `json:"smollm2,omitempty"`
	MiniLM      []MiniLMRow `json:"minilm,omitempty"`
	// MiniLMSentences is the number of sentences MiniLM's cosines are taken over.
	MiniLMSentences int `json:"minilm_sentences,omitempty"`
}

// SmolLM2 is one format's perplexity row.
type SmolLM2 struct {
	Format          string  `json:"format"`
	Head            string  `json:"head"`
	Doc             string  `json:"doc"`
	Perplexity      float64 `json:"perplexity"`
	MeanNLL         float64 `json:"mean_nll"`
	Predictions     int     `json:"predictions"`
	Reference       string  `json:"reference_variant,omitempty"`
	RefPerplexity   float64 `json:"reference_perplexity,omitempty"`
	ProjectionBytes int64   `json:"projection_bytes"`
	WeightBytes     int64   `json:"weight_bytes"`
	LoadSeconds     float64 `json:"load_seconds"`
	EvalSeconds     float64 `json:"eval_seconds"`
}

// MiniLMRow is one format's cosine row.
type MiniLMRow struct {
	Format          string  `json:"format"`
	MeanCosine      float64 `json:"mean_cosine"`
	MinCosine       float64 `json:"min_cosine"`
	Reference       string  `json:"reference_variant,omitempty"`
	RefMeanCosine   float64 `json:"reference_mean_cosine,omitempty"`
	ProjectionBytes int64   `json:"projection_bytes"`
	Seconds         float64 `json:"seconds"`
}

// referenceVariant names the reference harness's variant computed with the same rule as a preset
// ("" when it has none). The file's own format is the f32 variant's values: SmolLM2's reference
// runs the GGUF's dequantized weights, MiniLM's file is float.
func referenceVariant(preset string) string {
	switch preset {
	case models.FilePreset:
		return "f32"
	case "int8":
		return "int8_wo"
	case "int8-in":
		return ""
	}
	return strings.ReplaceAll(preset, "-", "_")
}

// presetNames splits a list of -formats or -heads into the names models.Preset and
// models.TableRule read: lower case, without surrounding spaces (the reference's figures and the
// table rows are looked up by them).
func presetNames(list string) []string {
	names := strings.Split(list, ",")
	for i, name := range names {
		names[i] = strings.ToLower(strings.TrimSpace(name))
	}
	return names
}

// checkFlags checks the numeric flags, -models, -formats and -heads, naming the one out of range,
// that no name is listed twice in -models, -formats or -heads, that -json and -markdown are two
// files that can be written, that no flag of a model left out of -models is given (-models minilm
// with -heads), and that no argument follows them.
func checkFlags() error {
	if err := cmdflags.First(
		cmdflags.NoArguments(),
		cmdflags.AtLeast("-tokens", *flagTokens, 2, "tokens scored"),
		cmdflags.AtLeast("-window", *flagWindow, 2, "tokens a window"),
	); err != nil {
		return err
	}
	switch {
	case *flagStride < 1 || *flagStride > *flagWindow:
		return errors.Errorf("-stride %d; accepted: 1 to -window (%d)", *flagStride, *flagWindow)
	case *flagJSON != "" && filepath.Clean(*flagJSON) == filepath.Clean(*flagMarkdown):
		return errors.Errorf("-json and -markdown both %s; accepted: two files (the table would replace the JSON)", *flagJSON)
	}
	// A name listed twice would be evaluated twice (a model's second run replacing its first); a
	// format or head is one whatever its case and surrounding spaces, as Preset and TableRule read it.
	for _, list := range []struct {
		key, value string
		fold       bool
	}{{"-models", *flagModels, false}, {"-formats", *flagFormats, true}, {"-heads", *flagHeads, true}} {
		names := strings.Split(list.value, ",")
		if list.fold {
			names = presetNames(list.value)
		}
		for i, name := range names {
			if slices.Contains(names[:i], name) {
				return errors.Errorf("%s: %q listed twice; accepted: each once", list.key, strings.TrimSpace(strings.Split(list.value, ",")[i]))
			}
		}
	}
	for _, name := range strings.Split(*flagModels, ",") {
		if name != "smollm2" && name != "minilm" {
			return errors.Errorf("-models: unknown model %q; accepted: smollm2, minilm", name)
		}
	}
	for _, f := range presetNames(*flagFormats) {
		if _, err := models.Preset(f); err != nil {
			return errors.WithMessage(err, "-formats")
		}
	}
	for _, head := range strings.Split(*flagHeads, ",") {
		if _, err := models.TableRule("/"+models.EmbeddingScope, head); err != nil {
			return errors.WithMessage(err, "-heads")
		}
	}
	// The outputs are written after the evaluations: check now that they can be.
	for _, out := range []struct{ key, path string }{{"-json", *flagJSON}, {"-markdown", *flagMarkdown}} {
		if out.path != "" {
			if err := fileio.CheckOutput(out.key, out.path); err != nil {
				return err
			}
		}
	}
	// A model's flags given without it in -models would be ignored.
	for model, names := range map[string][]string{"smollm2": smolLM2Flags, "minilm": {"minilm"}} {
		if slices.Contains(strings.Split(*flagModels, ","), model) {
			continue
		}
		var ignored []string
		flag.Visit(func(f *flag.Flag) {
			if slices.Contains(names, f.Name) {
				ignored = append(ignored, "-"+f.Name)
			}
		})
		if len(ignored) > 0 {
			return errors.Errorf("-models %s with %s; accepted: with %s in -models (only %s reads them)", *flagModels,
				strings.Join(ignored, ", "), model, model)
		}
	}
	return nil
}

// smolLM2Flags are the flags only SmolLM2's evaluation reads.
var smolLM2Flags = []string{"gguf", "text", "tokens", "window", "stride", "heads"}

func run() error {
	// MiniLM is scored on the reference's sentences: read them before any model runs.
	var sentences []string
	if slices.Contains(strings.Split(*flagModels, ","), "minilm") {
		var err error
		if sentences, err = miniLMSentences(); err != nil {
			return err
		}
	}
	backend, err := runtime.Backend()
	if err != nil {
		return err
	}
	formats := presetNames(*flagFormats)
	env, err := runtime.Environment()
	if err != nil {
		return err
	}
	res := Results{Backend: backend.Description(), Environment: env}
	fmt.Printf("backend: %s\n", res.Backend)
	for _, name := range strings.Split(*flagModels, ",") {
		switch name {
		case "smollm2":
			if res.SmolLM2, err = evalSmolLM2(backend, formats); err != nil {
				return err
			}
		case "minilm":
			if res.MiniLM, err = evalMiniLM(backend, formats, sentences); err != nil {
				return err
			}
			res.MiniLMSentences = len(sentences)
		}
	}
	md := markdown(res)
	fmt.Print("\n" + md)
	return writeOutputs(res, md)
}

// writeOutputs writes the -json and -markdown files, the JSON first (an error leaves no table
// without its data), each replaced whole (fileio.WriteAtomic), so that an interrupted run leaves
// no truncated file.
func writeOutputs(res Results, md string) error {
	var outs []fileio.Output
	if *flagJSON != "" {
		raw, err := json.MarshalIndent(res, "", " ")
		if err != nil {
			return errors.Wrap(err, "writing the JSON")
		}
		outs = append(outs, fileio.Output{Name: "-json", Path: *flagJSON, Data: append(raw, '\n')})
	}
	if *flagMarkdown != "" {
		outs = append(outs, fileio.Output{Name: "-markdown", Path: *flagMarkdown, Data: []byte(md)})
	}
	return fileio.WriteOutputs(outs...)
}

func evalSmolLM2(backend backends.Backend, formats []string) ([]SmolLM2, error) {
	f, err := gguf.Open(*flagGGUF)
	if err != nil {
		return nil, errors.WithMessage(err, "run make assets to fetch the model")
	}
	defer f.Close()
	tok, err := tokenizer.NewBPEFromGGUF(f)
	if err != nil {
		return nil, err
	}
	text, err := os.ReadFile(*flagText)
	if err != nil {
		return nil, errors.Wrap(err, "the evaluation text")
	}
	ids := tok.Encode(string(text), tokenizer.EncodeOptions{})
	if len(ids) < *flagTokens {
		return nil, errors.Errorf("%s has %d tokens, fewer than -tokens %d", *flagText, len(ids), *flagTokens)
	}
	ids = ids[:*flagTokens]
	if ref, err := refdata.Ints("smollm2", "eval_ids.npy"); err == nil {
		same := len(ref) == len(ids)
		for i := 0; same && i < len(ids); i++ {
			same = ref[i] == ids[i]
		}
		fmt.Printf("smollm2: %d ids of %s, equal to the reference's: %v\n", len(ids), *flagText, same)
	} else {
		noteReference(err)
	}
	windows, err := models.StridedWindows(len(ids), *flagWindow, *flagStride)
	if err != nil {
		return nil, err
	}
	var refIndex struct {
		Results map[string]struct {
			Perplexity float64 `json:"perplexity"`
		} `json:"results"`
	}
	noteReference(refdata.JSON(&refIndex, "smollm2", "index.json")) // optional: the table then lacks the reference column
	var rows []SmolLM2
	for _, head := range presetNames(*flagHeads) {
		for _, format := range formats {
			row, err := evalSmolLM2Format(backend, f, ids, windows, format, head)
			if err != nil {
				return nil, err
			}
			if v := referenceVariant(format); head == "f32" && refIndex.Results[v].Perplexity > 0 {
				row.Reference, row.RefPerplexity = v, refIndex.Results[v].Perplexity
			}
			rows = append(rows, row)
			fmt.Printf("smollm2 %-15s head %-4s perplexity %-12s weights %6.1f MB, load %.1fs, evaluation %.1fs%s\n",
				format, head, number(row.Perplexity), float64(row.WeightBytes)/1e6, row.LoadSeconds, row.EvalSeconds,
				refNote(row.Reference, number(row.RefPerplexity)))
		}
	}
	return rows, nil
}

// evalSmolLM2Format loads SmolLM2 with the projections in format and the table (the tied head) in
// head, and scores the windows of ids.
func evalSmolLM2Format(backend backends.Backend, f *gguf.File, ids []int, windows []models.Window, format, head string) (SmolLM2, error) {
	rules, err := models.Preset(format)
	if err != nil {
		return SmolLM2{}, err
	}
	headRule, err := models.TableRule("/"+models.EmbeddingScope, head)
	if err != nil {
		return SmolLM2{}, err
	}
	q, err := models.NewQuantizer(append([]models.Rule{headRule}, rules...))
	if err != nil {
		return SmolLM2{}, err
	}
	start := time.Now()
	ctx := context.New()
	defer releaseContext(ctx)
	m, err := llama.LoadGGUF(ctx, f, llama.LoadOptions{LoadOptions: models.LoadOptions{Kernel: q.Kernel, Table: q.QuantizeTable, Keep: q,
		Backend: backend}})
	if err != nil {
		return SmolLM2{}, errors.WithMessagef(err, "loading %s", format)
	}
	m.Projection, m.Table = q.Projection, q.Table
	loaded := time.Since(start)
	e, err := models.NewEvaluator(backend, ctx, m)
	if err != nil {
		return SmolLM2{}, err
	}
	nll, err := e.NLL(ids, windows)
	if err != nil {
		return SmolLM2{}, errors.WithMessagef(err, "evaluating %s", format)
	}
	e.Finalize()
	ppl := models.Perplexity(nll)
	var projections int64
	for _, e := range q.Report().Entries {
		if e.Scope != "/"+models.EmbeddingScope {
			projections += e.BytesAfter()
		}
	}
	return SmolLM2{Format: format, Head: head, Doc: models.PresetDoc(format), Perplexity: ppl, MeanNLL: math.Log(ppl), Predictions: len(nll),
		ProjectionBytes: projections, WeightBytes: int64(ctx.Memory()),
		LoadSeconds: loaded.Seconds(), EvalSeconds: (time.Since(start) - loaded).Seconds()}, nil
}

// miniLMSentences reads the reference's sentences MiniLM is scored on (refdata: the error says
// to set QUANTA_REFERENCE outside the repository).
func miniLMSentences() ([]string, error) {
	var sentences struct {
		Sentences []struct {
			Text string `json:"text"`
		} `json:"sentences"`
	}
	if err := refdata.JSON(&sentences, "minilm", "sentences.json"); err != nil {
		return nil, errors.WithMessage(err, "the MiniLM sentences")
	}
	var texts []string
	for _, s := range sentences.Sentences {
		texts = append(texts, s.Text)
	}
	return texts, nil
}

func evalMiniLM(backend backends.Backend, formats, texts []string) ([]MiniLMRow, error) {
	var refIndex struct {
		Results map[string]struct {
			Mean float64 `json:"mean_cosine_to_f32"`
		} `json:"results"`
	}
	noteReference(refdata.JSON(&refIndex, "minilm", "index.json")) // optional, as SmolLM2's
	tok, err := tokenizer.NewWordPieceFromJSON(*flagMiniLM + "/tokenizer.json")
	if err != nil {
		return nil, errors.WithMessage(err, "run make assets to fetch the model")
	}
	embed := func(format string) ([][]float32, int64, error) {
		rules, err := models.Preset(format)
		if err != nil {
			return nil, 0, err
		}
		q := models.MustNewQuantizer(rules)
		ctx := context.New()
		m, err := minilm.LoadDir(ctx, *flagMiniLM, minilm.LoadOptions{Kernel: q.Kernel, Backend: backend})
		if err != nil {
			return nil, 0, err
		}
		defer releaseContext(ctx)
		m.Projection = q.Projection
		e, err := minilm.NewEmbedder(backend, ctx, m, tok)
		if err != nil {
			return nil, 0, err
		}
		v, err := e.Embed(texts)
		return v, q.Report().BytesAfter(), err
	}
	f32, _, err := embed("f32")
	if err != nil {
		return nil, err
	}
	var rows []MiniLMRow
	for _, format := range formats {
		start := time.Now()
		v, bytes, err := embed(format)
		if err != nil {
			return nil, errors.WithMessagef(err, "minilm %s", format)
		}
		row := MiniLMRow{Format: format, MinCosine: 1, ProjectionBytes: bytes}
		for i := range v {
			c := models.Cosine(v[i], f32[i])
			row.MeanCosine += c / float64(len(v))
			row.MinCosine = min(row.MinCosine, c)
		}
		row.Seconds = time.Since(start).Seconds()
		if variant := referenceVariant(format); refIndex.Results[variant].Mean > 0 {
			row.Reference, row.RefMeanCosine = variant, refIndex.Results[variant].Mean
		}
		rows = append(rows, row)
		fmt.Printf("minilm  %-15s mean cosine %.6f, min %.4f%s\n", format, row.MeanCosine, row.MinCosine,
			refNote(row.Reference, fmt.Sprintf("%.6f", row.RefMeanCosine)))
	}
	return rows, nil
}

// referenceNoted records that noteReference said why the reference figures are left out.
var referenceNoted bool

// noteReference says on stderr, once a run, that the reference figures (the tables' optional
// reference columns) are left out when err, reading one, is not nil: refdata's error names the
// file or, outside the repository, QUANTA_REFERENCE, which locates them.
func noteReference(err error) {
	if err == nil || referenceNoted {
		return
	}
	referenceNoted = true
	fmt.Fprintf(os.Stderr, "eval: the reference figures are left out: %v\n", err)
}

// releaseContext frees the variables' device buffers now rather than at garbage collection.
func releaseContext(ctx *context.Context) {
	for v := range ctx.IterVariables() {
		if t, err := v.Value(); err == nil && t != nil {
			_ = t.FinalizeAll()
		}
	}
}

// markdown formats the two tables.
func markdown(r Results) string {
	var sb strings.Builder
	if len(r.SmolLM2) > 0 {
		fmt.Fprintf(&sb, "SmolLM2-135M-Instruct, perplexity on GPL-3 (%d predictions; %s)\n\n", r.SmolLM2[0].Predictions, r.Backend)
		sb.WriteString("| format | head | perplexity | reference (same rule) | difference | weights (MB) | projections (MB) |\n")
		sb.WriteString("|---|---|---|---|---|---|---|\n")
		for _, row := range r.SmolLM2 {
			ref, diff := "—", "—"
			if row.Reference != "" {
				ref = fmt.Sprintf("%s %s", row.Reference, number(row.RefPerplexity))
				diff = fmt.Sprintf("%+.3f %%", 100*(row.Perplexity/row.RefPerplexity-1))
			}
			fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %.1f | %.1f |\n", row.Format, row.Head, number(row.Perplexity), ref, diff,
				float64(row.WeightBytes)/1e6, float64(row.ProjectionBytes)/1e6)
		}
		sb.WriteString("\n")
	}
	if len(r.MiniLM) > 0 {
		fmt.Fprintf(&sb, "all-MiniLM-L6-v2, cosine to the float32 embeddings (%d sentences)\n\n", r.MiniLMSentences)
		sb.WriteString("| format | mean cosine | min cosine | reference mean (same rule) | difference | projections (MB) |\n")
		sb.WriteString("|---|---|---|---|---|---|\n")
		for _, row := range r.MiniLM {
			ref, diff := "—", "—"
			if row.Reference != "" {
				ref = fmt.Sprintf("%s %.6f", row.Reference, row.RefMeanCosine)
				diff = fmt.Sprintf("%+.6f", row.MeanCosine-row.RefMeanCosine)
			}
			fmt.Fprintf(&sb, "| %s | %.6f | %.4f | %s | %s | %.1f |\n", row.Format, row.MeanCosine, row.MinCosine, ref, diff,
				float64(row.ProjectionBytes)/1e6)
		}
	}
	return sb.String()
}

// refNote is ", reference VARIANT VALUE", or "" without a reference.
func refNote(variant, value string) string {
	if variant == "" {
		return ""
	}
	return ", reference " + variant + " " + value
}

// number prints a perplexity with 4 decimals, or in scientific notation when it is huge.
func number(x float64) string {
	if x >= 1e5 {
		return fmt.Sprintf("%.3g", x)
	}
	return fmt.Sprintf("%.4f", x)
}
