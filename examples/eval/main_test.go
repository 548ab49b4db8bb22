package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/refdata"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
)

// TestReferenceVariants: every preset's reference variant is one the reference computed.
func TestReferenceVariants(t *testing.T) {
	var smollm, minilm struct {
		Results map[string]any `json:"results"`
	}
	if err := refdata.JSON(&smollm, "smollm2", "index.json"); err != nil {
		t.Skip(err)
	}
	if err := refdata.JSON(&minilm, "minilm", "index.json"); err != nil {
		t.Skip(err)
	}
	for _, preset := range models.PresetNames() {
		v := referenceVariant(preset)
		if v == "" {
			continue
		}
		if _, ok := smollm.Results[v]; !ok {
			t.Errorf("preset %s: the SmolLM2 reference has no variant %q", preset, v)
		}
		if _, ok := minilm.Results[v]; !ok && !strings.Contains(v, "nary") {
			t.Errorf("preset %s: the MiniLM reference has no variant %q", preset, v)
		}
	}
}

func TestMarkdown(t *testing.T) {
	got := markdown(Results{
		Backend: "test",
		SmolLM2: []SmolLM2{
			{Format: "nf4", Head: "f32", Perplexity: 27.5, Predictions: 1023, Reference: "nf4", RefPerplexity: 27.6715, ProjectionBytes: 59719680, WeightBytes: 173106432},
			{Format: "binary", Head: "int8", Perplexity: 2e7, Predictions: 1023, ProjectionBytes: 1e6, WeightBytes: 2e6},
		},
		MiniLM: []MiniLMRow{{Format: "int8", MeanCosine: 0.9995, MinCosine: 0.99, Reference: "int8_wo", RefMeanCosine: 0.9994, ProjectionBytes: 10699776}},
	})
	for _, want := range []string{
		"| nf4 | f32 | 27.5000 | nf4 27.6715 | -0.620 % | 173.1 | 59.7 |",
		"| binary | int8 | 2e+07 | — | — | 2.0 | 1.0 |",
		"| int8 | 0.999500 | 0.9900 | int8_wo 0.999400 | +0.000100 | 10.7 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("markdown lacks %q:\n%s", want, got)
		}
	}
}

// TestFlagsOutOfRange: a count out of range is an error naming its flag, before any model loads
// (-tokens -1 would slice the token ids with a negative bound).
func TestFlagsOutOfRange(t *testing.T) {
	for _, c := range []struct {
		tokens, window, stride int
		want                   string
	}{
		{-1, 513, 512, "-tokens -1"},
		{1, 513, 512, "-tokens 1"},
		{1024, 0, 512, "-window 0"},
		{1024, -3, 512, "-window -3"},
		{1024, 513, 0, "-stride 0"},
		{1024, 513, -5, "-stride -5"},
		{1024, 513, 514, "-stride 514"},
	} {
		t.Run(c.want, func(t *testing.T) {
			tokens, window, stride, models := *flagTokens, *flagWindow, *flagStride, *flagModels
			defer func() { *flagTokens, *flagWindow, *flagStride, *flagModels = tokens, window, stride, models }()
			*flagTokens, *flagWindow, *flagStride, *flagModels = c.tokens, c.window, c.stride, "smollm2"
			err := checkFlags()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("checkFlags() = %v; want an error naming %q", err, c.want)
			}
		})
	}
}

// TestUnknownModel: an unknown name in -models is an error naming it before any model is
// evaluated, not after the models listed before it ran.
func TestUnknownModel(t *testing.T) {
	gguf, models := *flagGGUF, *flagModels
	defer func() { *flagGGUF, *flagModels = gguf, models }()
	*flagGGUF, *flagModels = filepath.Join(t.TempDir(), "missing.gguf"), "smollm2,bogus"
	err := checkFlags()
	if err == nil || !strings.Contains(err.Error(), `-models: unknown model "bogus"`) {
		t.Errorf("checkFlags() = %v; want an error naming -models and \"bogus\"", err)
	}
}

// TestUnknownHead: an unknown name in -heads is an error naming it before any model loads, not
// after every format ran with the heads listed before it.
func TestUnknownHead(t *testing.T) {
	gguf, heads := *flagGGUF, *flagHeads
	defer func() { *flagGGUF, *flagHeads = gguf, heads }()
	*flagGGUF, *flagHeads = filepath.Join(t.TempDir(), "missing.gguf"), "f32,bogus"
	err := checkFlags()
	if err == nil || !strings.Contains(err.Error(), "-heads") || !strings.Contains(err.Error(), `"bogus"`) {
		t.Errorf("checkFlags() = %v; want an error naming -heads and \"bogus\"", err)
	}
}

// TestArguments: an argument is an error naming it, before anything runs; it was ignored, and
// with it every flag after it (flag parsing stops at the first argument).
func TestArguments(t *testing.T) { testutil.ArgumentRefused(t, checkFlags) }

// TestJSONEnvironment: the JSON names what the timings ran on, runtime.Environment's plugin,
// kernels and XLA_FLAGS, not only the backend's description.
func TestJSONEnvironment(t *testing.T) {
	testutil.JSONEnvironment(t, runMiniLM(t, "f32"))
}

// TestOutputsChecked: an output that cannot be written is an error naming its flag in the flag
// check (exit 2, a refused command line), not after the evaluations.
func TestOutputsChecked(t *testing.T) {
	gguf := *flagGGUF
	defer func() { *flagGGUF = gguf }()
	*flagGGUF = filepath.Join(t.TempDir(), "missing.gguf")
	testutil.OutputsChecked(t, checkFlags, map[string]*string{"-json": flagJSON, "-markdown": flagMarkdown})
}

// TestUnknownFormat: an unknown name in -formats is an error naming -formats in the flag check
// (exit 2, a refused command line), not once the backend runs (exit 1).
func TestUnknownFormat(t *testing.T) {
	gguf, formats := *flagGGUF, *flagFormats
	defer func() { *flagGGUF, *flagFormats = gguf, formats }()
	*flagGGUF, *flagFormats = filepath.Join(t.TempDir(), "missing.gguf"), "nf4,bogus"
	if err := checkFlags(); err == nil || !strings.Contains(err.Error(), `-formats: models.Preset: unknown name "bogus"`) {
		t.Errorf("checkFlags() = %v; want an error naming -formats and \"bogus\"", err)
	}
}

// TestOutputsReplacedWhole: -json and -markdown are each replaced whole (a complete new file
// renamed over the old one), not rewritten in place, where an interrupted run left a truncated
// file.
func TestOutputsReplacedWhole(t *testing.T) {
	dir := t.TempDir()
	jsonPath, md := *flagJSON, *flagMarkdown
	defer func() { *flagJSON, *flagMarkdown = jsonPath, md }()
	*flagJSON, *flagMarkdown = filepath.Join(dir, "eval.json"), filepath.Join(dir, "eval.md")
	res := Results{Backend: "test", MiniLM: []MiniLMRow{{Format: "int8", MeanCosine: 0.9995, MinCosine: 0.99}}}
	testutil.ReplacedWhole(t, func() error { return writeOutputs(res, markdown(res)) }, *flagJSON, *flagMarkdown)
}

// TestReferenceOutside: run outside the repository, MiniLM's sentences (reference data) are not
// found; the error names QUANTA_REFERENCE, the variable to set, before any model runs (it named
// only a go.mod, after SmolLM2's evaluation when both models were asked for).
func TestReferenceOutside(t *testing.T) {
	gguf, models := *flagGGUF, *flagModels
	defer func() { *flagGGUF, *flagModels = gguf, models }()
	*flagGGUF, *flagModels = filepath.Join(t.TempDir(), "missing.gguf"), "smollm2,minilm"
	t.Setenv(refdata.EnvDir, "")
	t.Chdir(t.TempDir())
	if err := run(); err == nil || !strings.Contains(err.Error(), refdata.EnvDir) {
		t.Errorf("run() outside the repository = %v; want an error naming %s", err, refdata.EnvDir)
	}
}

// TestListedTwice: a name listed twice in -models, -formats or -heads is an error naming it before
// anything runs; it was evaluated twice (a model's second run replacing its first).
func TestListedTwice(t *testing.T) {
	for _, c := range []struct {
		flag        *string
		value, want string
	}{
		{flagModels, "minilm,smollm2,minilm", `-models: "minilm" listed twice`},
		{flagFormats, "nf4,int8,nf4", `-formats: "nf4" listed twice`},
		{flagHeads, "f32,f32", `-heads: "f32" listed twice`},
		// Preset and TableRule read a name whatever its case and surrounding spaces.
		{flagFormats, "nf4,int8,NF4", `-formats: "NF4" listed twice`},
		{flagFormats, "nf4, nf4", `-formats: "nf4" listed twice`},
		{flagHeads, "f32,F32", `-heads: "F32" listed twice`},
	} {
		saved := *c.flag
		*c.flag = c.value
		err := checkFlags()
		*c.flag = saved
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: checkFlags() = %v; want an error naming %q", c.value, err, c.want)
		}
	}
	if err := checkFlags(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// TestReferenceColumnsOutside: run outside the repository, the optional reference figures are not
// found; the table then lacks its reference columns, and stderr says so once, naming
// QUANTA_REFERENCE, the variable that locates them (they were dropped without a word).
func TestReferenceColumnsOutside(t *testing.T) {
	skipWithoutMiniLM(t)
	backend := testutil.Backend(t)
	t.Setenv(refdata.EnvDir, "")
	t.Chdir(t.TempDir())
	referenceNoted = false
	t.Cleanup(func() { referenceNoted = false })
	var rows []MiniLMRow
	out := testutil.CaptureStderr(t, func() (err error) {
		for range 2 { // two reads of the reference index: one note
			if rows, err = evalMiniLM(backend, []string{"int8"}, []string{"The cat sat on the mat."}); err != nil {
				return err
			}
		}
		return nil
	})
	if len(rows) != 1 || rows[0].Reference != "" {
		t.Errorf("rows %+v; want one without a reference", rows)
	}
	if n := strings.Count(out, refdata.EnvDir); n != 1 || !strings.HasPrefix(out, "eval: ") {
		t.Errorf("stderr %q names %s %d times; want one line", out, refdata.EnvDir, n)
	}
}

// TestModelFlagsWithoutModel: a flag only one model's evaluation reads, given without that model
// in -models, is an error naming it; it was silently ignored (-models minilm -heads int8 ran
// MiniLM alone, -models smollm2 -minilm DIR never read DIR).
func TestModelFlagsWithoutModel(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-models", "minilm", "-heads", "int8", "-tokens", "512"}, "-models minilm with -heads, -tokens; accepted: with smollm2"},
		{[]string{"-models", "smollm2", "-minilm", "/tmp/minilm"}, "-models smollm2 with -minilm; accepted: with minilm"},
		{[]string{"-models", "minilm", "-minilm", "/tmp/minilm", "-formats", "int8"}, ""},
		{[]string{"-models", "smollm2,minilm", "-heads", "int8", "-minilm", "/tmp/minilm"}, ""},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			testutil.CheckFlags(t, checkFlags, c.want, c.args...)
		})
	}
}

// TestOutputsSamePath: -json and -markdown naming the same file is an error naming both before
// anything runs; the table was written over the JSON after the evaluations.
func TestOutputsSamePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "eval.out")
	testutil.SetFlags(t, "-json", path, "-markdown", filepath.Join(filepath.Dir(path), ".", "eval.out"))
	if err := checkFlags(); err == nil || !strings.Contains(err.Error(), "-json and -markdown both") {
		t.Errorf("checkFlags() = %v; want an error naming -json and -markdown", err)
	}
}

// TestMarkdownSentences: the MiniLM table gives the number of sentences its cosines were taken
// over; it said 32, the reference's count, whatever sentences.json held.
func TestMarkdownSentences(t *testing.T) {
	got := markdown(Results{Backend: "test", MiniLMSentences: 3, MiniLM: []MiniLMRow{{Format: "int8", MeanCosine: 0.99, MinCosine: 0.98}}})
	if !strings.Contains(got, "(3 sentences)") {
		t.Errorf("markdown lacks \"(3 sentences)\":\n%s", got)
	}
}

// TestReferenceAnySpelling: a format spelled in capitals or with spaces, which models.Preset
// accepts, is set against the reference harness's figures as its lower-case name is (-formats
// NF4 gave a MiniLM row with no reference).
func TestReferenceAnySpelling(t *testing.T) {
	data, err := os.ReadFile(runMiniLM(t, " NF4"))
	if err != nil {
		t.Fatal(err)
	}
	var res Results
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.MiniLM) != 1 || res.MiniLM[0].Reference != "nf4" {
		t.Errorf("-formats ' NF4': MiniLM rows %+v; want one set against the reference's nf4", res.MiniLM)
	}
}

// skipWithoutMiniLM skips the test when MiniLM's files (-minilm) are absent.
func skipWithoutMiniLM(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(*flagMiniLM, "tokenizer.json")); err != nil {
		t.Skipf("all-MiniLM-L6-v2 missing (%v): make assets fetches it", err)
	}
}

// runMiniLM runs the command on MiniLM alone in formats and returns the JSON file it wrote; the
// flags are restored after the test.
func runMiniLM(t *testing.T, formats string) string {
	t.Helper()
	skipWithoutMiniLM(t)
	path := filepath.Join(t.TempDir(), "eval.json")
	models, saved, jsonPath := *flagModels, *flagFormats, *flagJSON
	t.Cleanup(func() { *flagModels, *flagFormats, *flagJSON = models, saved, jsonPath })
	*flagModels, *flagFormats, *flagJSON = "minilm", formats, path
	if err := run(); err != nil {
		t.Fatal(err)
	}
	return path
}
