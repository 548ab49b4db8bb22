package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/qlayers"
)

// TestCheckFlags: -max, -maxlen and -minwindow out of range are errors naming the flag, not the
// generator's fields (-max 0 would be MaxNewTokens 0, no bound, generating up to -maxlen tokens).
func TestCheckFlags(t *testing.T) {
	for _, tc := range []struct {
		flag, value, want string
	}{
		{"max", "0", "-max 0; accepted: >= 1"},
		{"max", "-1", "-max -1; accepted: >= 1"},
		{"maxlen", "1", "-maxlen 1; accepted: >= 2"},
		{"minwindow", "-1", "-minwindow -1; accepted: >= 1"},
		{"cache", "bogus", `-cache: models.ParseCacheMode("bogus"): accepted: grow, full`},
		{"cache-dtype", "int8", `-cache-dtype: models.ParseCacheDType("int8"): accepted:`},
		{"max", "1", ""},
		{"minwindow", "0", ""},
	} {
		t.Run(tc.flag+"="+tc.value, func(t *testing.T) {
			old := flag.Lookup(tc.flag).Value.String()
			defer func() { _ = flag.Set(tc.flag, old) }()
			if err := flag.Set(tc.flag, tc.value); err != nil {
				t.Fatal(err)
			}
			err := checkFlags()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("checkFlags() = %v; want %q", err, tc.want)
			}
		})
	}
}

// TestLoadFlagNames: an unknown -format or -head is an error naming the flag, before the model
// loads.
func TestLoadFlagNames(t *testing.T) {
	for _, tc := range []struct{ flag, want string }{{"format", "-format: models.Preset"}, {"head", "-head: models.TableRule"}} {
		old := flag.Lookup(tc.flag).Value.String()
		if err := flag.Set(tc.flag, "bogus"); err != nil {
			t.Fatal(err)
		}
		_, err := load()
		_ = flag.Set(tc.flag, old)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("-%s bogus: load() = %v; want %q", tc.flag, err, tc.want)
		}
	}
}

// TestCheckFlagsModes: -bench, -anatomy and -speed-table each replace the generation; two of them
// are an error naming them, not the first one run and the other ignored.
func TestCheckFlagsModes(t *testing.T) {
	for _, pair := range [][2]string{{"bench", "anatomy"}, {"anatomy", "speed-table"}, {"bench", "speed-table"}} {
		for _, name := range pair {
			if err := flag.Set(name, "true"); err != nil {
				t.Fatal(err)
			}
		}
		err := checkFlags()
		for _, name := range pair {
			_ = flag.Set(name, "false")
		}
		if err == nil || !strings.Contains(err.Error(), "at most one") {
			t.Errorf("-%s -%s: checkFlags() = %v; want an error naming both", pair[0], pair[1], err)
		}
	}
}

// TestCheckFlagsArguments: an argument is -speed-table's file; without -speed-table it is an error
// naming it, not ignored (smollm "Tell me a joke" answered the default -prompt).
func TestCheckFlagsArguments(t *testing.T) {
	defer func() { _ = flag.CommandLine.Parse(nil) }()
	if err := flag.CommandLine.Parse([]string{"Tell me a joke"}); err != nil {
		t.Fatal(err)
	}
	if err := checkFlags(); err == nil || !strings.Contains(err.Error(), `argument "Tell me a joke"`) || !strings.Contains(err.Error(), "-prompt") {
		t.Errorf("checkFlags() = %v; want an error naming the argument and -prompt", err)
	}
	if err := flag.CommandLine.Parse([]string{"-speed-table", "bench.jsonl"}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = flag.Set("speed-table", "false") }()
	if err := checkFlags(); err != nil {
		t.Errorf("-speed-table bench.jsonl: checkFlags() = %v", err)
	}
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
	out := captureStdout(t, func() error { return speedTable([]string{quanta}) })
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
	if err := speedTable([]string{name}); err == nil || !strings.Contains(err.Error(), name) {
		t.Errorf("speedTable of a file without JSON lines = %v; want an error naming it", err)
	}
}

// captureStdout returns what f prints on stdout.
func captureStdout(t *testing.T, f func() error) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() {
		data, _ := io.ReadAll(r)
		done <- data
	}()
	err = f()
	os.Stdout = stdout
	_ = w.Close()
	out := string(<-done)
	if err != nil {
		t.Fatal(err)
	}
	return out
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

// TestCheckFlagsCounts: a -bench or -anatomy count out of range is an error naming its flag and
// value before the model loads; one message named every count of the mode, whichever was wrong.
func TestCheckFlagsCounts(t *testing.T) {
	for _, tc := range []struct{ flag, value, want string }{
		{"reps", "0", "-reps 0; accepted: >= 1"},
		{"bench-prompt", "0", "-bench-prompt 0; accepted: >= 1"},
		{"bench-decode", "-1", "-bench-decode -1; accepted: >= 1"},
		{"anatomy-window", "1", "-anatomy-window 1; accepted: >= 2"},
		{"anatomy-reps", "0", "-anatomy-reps 0; accepted: >= 1"},
		{"anatomy-tokens", "0", "-anatomy-tokens 0; accepted: >= 1"},
		{"anatomy-positions", "0", "-anatomy-positions 0; accepted: 1 to -anatomy-window (256)"},
		{"anatomy-positions", "257", "-anatomy-positions 257; accepted: 1 to -anatomy-window (256)"},
		{"anatomy-positions", "256", ""},
	} {
		t.Run(tc.flag+"="+tc.value, func(t *testing.T) {
			old := flag.Lookup(tc.flag).Value.String()
			defer func() { _ = flag.Set(tc.flag, old) }()
			if err := flag.Set(tc.flag, tc.value); err != nil {
				t.Fatal(err)
			}
			err := checkFlags()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("checkFlags() = %v; want %q", err, tc.want)
			}
		})
	}
}
