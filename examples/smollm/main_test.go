package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/qlayers"
)

// TestCheckFlags: -max, -maxlen and -minwindow out of range are errors naming the flag, not the
// generator's fields (-max 0 would be MaxNewTokens 0, no bound, generating up to -maxlen tokens).
// A -bench or -anatomy count out of range (given with its mode) is an error naming its flag and
// value before the model loads; one message named every count of the mode, whichever was wrong.
func TestCheckFlags(t *testing.T) {
	for _, tc := range []struct {
		mode, flag, value, want string // mode: "-bench", "-anatomy" or none
	}{
		{"", "max", "0", "-max 0; accepted: >= 1"},
		{"", "max", "-1", "-max -1; accepted: >= 1"},
		{"", "maxlen", "1", "-maxlen 1; accepted: >= 2"},
		{"", "minwindow", "-1", "-minwindow -1; accepted: >= 1"},
		{"", "cache", "bogus", `-cache: models.ParseCacheMode("bogus"): accepted: grow, full`},
		{"", "cache-dtype", "int8", `-cache-dtype: models.ParseCacheDType("int8"): accepted:`},
		{"", "max", "1", ""},
		{"", "minwindow", "0", ""},
		{"-bench", "reps", "0", "-reps 0; accepted: >= 1"},
		{"-bench", "bench-prompt", "0", "-bench-prompt 0; accepted: >= 1"},
		{"-bench", "bench-decode", "-1", "-bench-decode -1; accepted: >= 1"},
		// The decoding after "The" (one token at least) needs -bench-decode + 2 positions of -maxlen
		// (1024); it failed only after the prompt and after-prompt runs.
		{"-bench", "bench-decode", "1023", "-bench-decode 1023 with -maxlen 1024; accepted: up to -maxlen - 2"},
		{"-bench", "bench-decode", "1022", ""},
		{"-anatomy", "anatomy-window", "1", "-anatomy-window 1; accepted: >= 2"},
		{"-anatomy", "anatomy-reps", "0", "-anatomy-reps 0; accepted: >= 1"},
		{"-anatomy", "anatomy-tokens", "0", "-anatomy-tokens 0; accepted: >= 1"},
		{"-anatomy", "anatomy-positions", "0", "-anatomy-positions 0; accepted: 1 to -anatomy-window (256)"},
		{"-anatomy", "anatomy-positions", "257", "-anatomy-positions 257; accepted: 1 to -anatomy-window (256)"},
		{"-anatomy", "anatomy-positions", "256", ""},
	} {
		t.Run(tc.flag+"="+tc.value, func(t *testing.T) {
			testutil.CheckFlags(t, checkFlags, tc.want, append(strings.Fields(tc.mode), "-"+tc.flag, tc.value)...)
		})
	}
}

// TestCheckFlagsMinWindow: a -minwindow above -maxlen is an error naming both; the generator
// silently made it one window of -maxlen positions. The default (64) stays accepted with a
// shorter -maxlen.
func TestCheckFlagsMinWindow(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-minwindow", "2048"}, "-minwindow 2048 above -maxlen 1024; accepted: 1 to -maxlen"},
		{[]string{"-minwindow", "65", "-maxlen", "64"}, "-minwindow 65 above -maxlen 64"},
		{[]string{"-minwindow", "64", "-maxlen", "64"}, ""},
		{[]string{"-maxlen", "32"}, ""},
		{[]string{"-minwindow", "0", "-maxlen", "32"}, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			testutil.CheckFlags(t, checkFlags, tc.want, tc.args...)
		})
	}
}

// TestLoadFlagNames: an unknown -format or -head is an error naming the flag, before the model
// loads: in the flag check (exit 2, a refused command line), not only in load (exit 1).
func TestLoadFlagNames(t *testing.T) {
	for _, tc := range []struct{ flag, want string }{{"format", "-format: models.Preset"}, {"head", "-head: models.TableRule"}} {
		t.Run(tc.flag, func(t *testing.T) {
			testutil.SetFlags(t, "-"+tc.flag, "bogus")
			if _, err := load(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("-%s bogus: load() = %v; want %q", tc.flag, err, tc.want)
			}
			if err := checkFlags(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("-%s bogus: checkFlags() = %v; want %q", tc.flag, err, tc.want)
			}
		})
	}
}

// TestCheckFlagsModes: -bench, -anatomy and -speed-table each replace the generation; two of them
// are an error naming them, not the first one run and the other ignored.
func TestCheckFlagsModes(t *testing.T) {
	for _, pair := range [][2]string{{"bench", "anatomy"}, {"anatomy", "speed-table"}, {"bench", "speed-table"}} {
		t.Run(pair[0]+","+pair[1], func(t *testing.T) {
			testutil.SetFlags(t, "-"+pair[0], "-"+pair[1])
			if err := checkFlags(); err == nil || !strings.Contains(err.Error(), "at most one") {
				t.Errorf("-%s -%s: checkFlags() = %v; want an error naming both", pair[0], pair[1], err)
			}
		})
	}
}

// TestCheckFlagsArguments: an argument is -speed-table's file; without -speed-table it is an error
// naming it, not ignored (smollm "Tell me a joke" answered the default -prompt).
func TestCheckFlagsArguments(t *testing.T) {
	t.Run("prompt", func(t *testing.T) {
		testutil.SetFlags(t, "Tell me a joke")
		if err := checkFlags(); err == nil || !strings.Contains(err.Error(), `argument "Tell me a joke"`) || !strings.Contains(err.Error(), "-prompt") {
			t.Errorf("checkFlags() = %v; want an error naming the argument and -prompt", err)
		}
	})
	t.Run("speed-table", func(t *testing.T) {
		testutil.SetFlags(t, "-speed-table", "bench.jsonl")
		if err := checkFlags(); err != nil {
			t.Errorf("-speed-table bench.jsonl: checkFlags() = %v", err)
		}
	})
}

// TestSpeedTableBandwidth: the read bandwidth the speed table sets the decoding rates against is
// the median of the quanta runs' measurements (two runs: their mean), as the table says.
func TestSpeedTableBandwidth(t *testing.T) {
	dir := t.TempDir()
	quanta := filepath.Join(dir, "quanta.jsonl")
	lines := `{"engine":"quanta","type":"f32","backend":"xla","weight_bytes":1000000000,"decode_tok_s_median":3,"decode_tok_s_best":4,"read_gb_s":10}
{"engine":"quanta","type":"nf4","backend":"xla","weight_bytes":500000000,"decode_tok_s_median":6,"decode_tok_s_best":7,"read_gb_s":20}
`
	if err := os.WriteFile(quanta, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	out := testutil.CaptureStdout(t, func() error { return speedTable([]string{quanta}, "") })
	// Each row streams 3 GB/s of weights: 0.20 of the 15 GB/s median.
	for _, want := range []string{"Read bandwidth: 15.0 GB/s (median of the 2 measurements", "| 3.0 (0.20) |"} {
		if !strings.Contains(out, want) {
			t.Errorf("speed table lacks %q:\n%s", want, out)
		}
	}
}

// TestSpeedTableNoRows: files without one JSON line (a wrong file, a run's log without its
// result) are an error naming them, not an empty table and exit 0.
func TestSpeedTableNoRows(t *testing.T) {
	name := filepath.Join(t.TempDir(), "log.txt")
	if err := os.WriteFile(name, []byte("loading...\nsmollm: error\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := speedTable([]string{name}, ""); err == nil || !strings.Contains(err.Error(), name) {
		t.Errorf("speedTable of a file without JSON lines = %v; want an error naming it", err)
	}
}

// TestSpeedTableProcesses: lines of the same engine and weights (one process each) make one row,
// each rate the median of the processes' medians and the best their best, the decoding medians'
// range beside them; -speed-pairs sets the medians of the matching rows against each other.
func TestSpeedTableProcesses(t *testing.T) {
	dir := t.TempDir()
	quanta, llamacpp := filepath.Join(dir, "quanta.jsonl"), filepath.Join(dir, "llamacpp.jsonl")
	q := `{"engine":"quanta","type":"f32","backend":"xla","weight_bytes":1000000000,"prompt_tok_s_median":1000,"prompt_tok_s_best":1010,"decode_tok_s_median":60,"decode_tok_s_best":62}
{"engine":"quanta","type":"nf4","backend":"xla","weight_bytes":100000000,"prompt_tok_s_median":500,"prompt_tok_s_best":510,"decode_tok_s_median":200,"decode_tok_s_best":210}
{"engine":"quanta","type":"f32","backend":"xla","weight_bytes":1000000000,"prompt_tok_s_median":1200,"prompt_tok_s_best":1300,"decode_tok_s_median":90,"decode_tok_s_best":95}
{"engine":"quanta","type":"f32","backend":"xla","weight_bytes":1000000000,"prompt_tok_s_median":1100,"prompt_tok_s_best":1150,"decode_tok_s_median":70,"decode_tok_s_best":75}
`
	l := `{"file":"m.F32.gguf","type":"F32","threads":2,"file_bytes":1000000000,"prompt_tok_s_median":1000,"prompt_tok_s_best":1100,"decode_tok_s_median":80,"decode_tok_s_best":81}
{"file":"m.F32.gguf","type":"F32","threads":2,"file_bytes":1000000000,"prompt_tok_s_median":1200,"prompt_tok_s_best":1250,"decode_tok_s_median":84,"decode_tok_s_best":88}
`
	for name, text := range map[string]string{quanta: q, llamacpp: l} {
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := testutil.CaptureStdout(t, func() error { return speedTable([]string{quanta, llamacpp}, "f32:F32 nf4:Q4_0") })
	for _, want := range []string{
		"| quanta (xla) | f32 | 1000.0 | 3 | 1100.0, 1300.0 | 70.0, 95.0; 60.0-90.0 |",
		"| quanta (xla) | nf4 | 100.0 | 1 | 500.0, 510.0 | 200.0, 210.0 |",
		"| llama.cpp (2 threads) | F32 | 1000.0 | 2 | 1100.0, 1250.0 | 82.0, 88.0; 80.0-84.0 |",
		"| f32 | F32 | 1.00x | 0.85x | — |", // 70 / 82; no decoding after the prompt in either
	} {
		if !strings.Contains(out, want) {
			t.Errorf("speed table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Q4_0 |") { // no llama.cpp row of that type: no ratio
		t.Errorf("speed table sets nf4 against a Q4_0 it was not given:\n%s", out)
	}
}

// TestSpeedPairs: -speed-pairs as make bench-llamacpp's SPEED_PAIRS writes it; a pair without
// its colon or format is refused, naming it.
func TestSpeedPairs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want [][2]string
		bad  string
	}{
		{in: ""},
		{in: "f32:F32 int8:Q8_0 nf4:Q4_0,Q4_1 nf4-out:", want: [][2]string{{"f32", "F32"}, {"int8", "Q8_0"}, {"nf4", "Q4_0"}, {"nf4", "Q4_1"}}},
		{in: "f32:F32 nf4", bad: `"nf4"`},
		{in: ":F32", bad: `":F32"`},
	} {
		got, err := speedPairs(tc.in)
		switch {
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("speedPairs(%q) = %v, %v; want an error naming %s", tc.in, got, err, tc.bad)
		case tc.bad == "" && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("speedPairs(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestWeightBytes: -anatomy sets the head part (and the step) against the bytes of the head the
// model multiplies by: the token-embedding table when tied, the /lm_head kernel otherwise, which
// is then not one of the blocks' projections; an untied table is only looked up.
func TestWeightBytes(t *testing.T) {
	entry := func(scope string, bytes int64) qlayers.ReportEntry {
		return qlayers.ReportEntry{Scope: scope, FloatBytes: bytes}
	}
	tied := qlayers.Report{Entries: []qlayers.ReportEntry{
		entry("/layer_0/attn_q/dense", 10), entry("/layer_0/ffn_down/dense", 20), entry("/token_embd", 300)}}
	untied := qlayers.Report{Entries: append(slices.Clone(tied.Entries), entry("/lm_head/dense", 4000))}
	for _, tc := range []struct {
		name              string
		r                 qlayers.Report
		tied              bool
		projections, head int64
	}{
		{"tied", tied, true, 30, 300},
		{"untied", untied, false, 30, 4000},
	} {
		if p, h := weightBytes(tc.r, tc.tied); p != tc.projections || h != tc.head {
			t.Errorf("%s: weightBytes = projections %d, head %d; want %d, %d", tc.name, p, h, tc.projections, tc.head)
		}
	}
}

// TestCheckFlagsOtherMode: a flag that only another mode reads is an error naming it and the
// mode, before the model loads; it was silently ignored (-bench -max 5 ran the benchmark's
// -bench-decode steps, -reps 5 without -bench generated as usual).
func TestCheckFlagsOtherMode(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-reps", "5"}, "-reps without -bench"},
		{[]string{"-bench-prompt", "64", "-bench-text", "x.txt"}, "-bench-prompt without -bench, -bench-text without -bench"},
		{[]string{"-anatomy-window", "128"}, "-anatomy-window without -anatomy"},
		{[]string{"-bench", "-prompt", "Hi"}, "-bench with -prompt;"},
		{[]string{"-bench", "-max", "5", "-chat", "-system", "x"}, "-bench with -chat, -max, -system;"},
		{[]string{"-bench", "-anatomy-reps", "5"}, "-bench with -anatomy-reps;"},
		{[]string{"-anatomy", "-reps", "5", "-cache", "full"}, "-anatomy with -cache, -reps;"},
		{[]string{"-anatomy", "-max", "5"}, "-anatomy with -max;"},
		{[]string{"-speed-table", "-format", "nf4", "a.jsonl"}, "-speed-table with -format;"},
		{[]string{"-bench", "-reps", "5", "-format", "nf4", "-maxlen", "600", "-cache", "full"}, ""},
		{[]string{"-anatomy", "-anatomy-reps", "5", "-head", "f32", "-cache-dtype", "float16"}, ""},
		{[]string{"-prompt", "Hi", "-max", "5", "-fuse=false", "-minwindow", "32"}, ""},
		{[]string{"-speed-table", "a.jsonl", "b.jsonl"}, ""},
		{[]string{"-chat=false", "-system", "Be brief."}, "-system with -chat=false"},
		{[]string{"-chat=false", "-prompt", "Once upon a time"}, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			testutil.CheckFlags(t, checkFlags, tc.want, tc.args...)
		})
	}
}

// TestPromptLongerThanMaxLen: a prompt that leaves no room in -maxlen is an error naming -maxlen
// and the prompt's tokens; it named the generator's MaxLen ("models.Generator: prompt of 37
// tokens; accepted: 1..3 (MaxLen-1)"), a field the command line does not have.
func TestPromptLongerThanMaxLen(t *testing.T) {
	assets.Require(t, assets.SmolLM2)
	testutil.SetFlags(t, "-maxlen", "4")
	err := generate()
	if err == nil || !strings.Contains(err.Error(), "-maxlen 4") || !strings.Contains(err.Error(), "tokens") {
		t.Errorf("generate() with -maxlen 4 = %v; want an error naming -maxlen and the prompt's tokens", err)
	}
}

// TestBenchPromptLongerThanContext: a -bench-prompt that, with the -bench-decode steps after it,
// does not fit the model's context (SmolLM2's 8192 positions) is an error naming the flags and
// the context, before any generator is built; it was the generator's error naming its MaxLen
// ("models.NewGenerator: MaxLen 8193; ..."), a field the command line does not have.
func TestBenchPromptLongerThanContext(t *testing.T) {
	assets.Require(t, assets.SmolLM2)
	text := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("one two three four ", 4000)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-bench-prompt", "8192"}, "-bench-prompt 8192 and -bench-decode 128 need 8321 positions; accepted: at most the model's context, 8192"},
		{[]string{"-bench-prompt", "8100", "-bench-decode", "92"}, "-bench-prompt 8100 and -bench-decode 92 need 8193 positions"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			testutil.SetFlags(t, append([]string{"-bench", "-bench-text", text}, tc.args...)...)
			if err := checkFlags(); err != nil {
				t.Fatal(err)
			}
			if err := bench(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("bench() = %v; want %q", err, tc.want)
			}
		})
	}
}

// TestSpeedTableListedTwice: a file given twice to -speed-table is an error naming it; its rows
// were printed twice and its bandwidths counted twice in the median.
func TestSpeedTableListedTwice(t *testing.T) {
	testutil.SetFlags(t, "-speed-table", "a.jsonl", "b.jsonl", "./a.jsonl")
	if err := checkFlags(); err == nil || !strings.Contains(err.Error(), `-speed-table: "./a.jsonl" listed twice`) {
		t.Errorf("checkFlags() = %v; want an error naming the file", err)
	}
}
